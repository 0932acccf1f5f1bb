// Command neverready is a broken plugin for the conformance kit's tests: it never
// serves, so the host's start timeout must fire.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	fmt.Fprintln(os.Stderr, "neverready: sleeping instead of serving")
	for {
		time.Sleep(time.Hour)
	}
}
