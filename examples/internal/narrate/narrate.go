// Package narrate prints the running commentary of the demos (`make demo`,
// `make demo-real`): numbered steps, indented details, checks that held,
// and commands as a reader would type them.
package narrate

import (
	"fmt"
	"strings"
)

// Step prints a step of the demo after a blank line.
func Step(format string, args ...any) { fmt.Printf("\n"+format+"\n", args...) }

// Detail prints an indented line under the current step.
func Detail(format string, args ...any) { fmt.Printf("   "+format+"\n", args...) }

// OK prints a check that held.
func OK(format string, args ...any) { fmt.Printf("   ✓ "+format+"\n", args...) }

// Block prints s (a command's output) indented under the current step.
func Block(s string) {
	s = strings.TrimRight(s, "\n")
	fmt.Println("     " + strings.ReplaceAll(s, "\n", "\n     "))
}

// Command is how an agenthost command is shown: the binary and its
// --state-dir left out, arguments with spaces or quotes quoted.
func Command(args ...string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " '\"") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return "$ agenthost " + strings.Join(out, " ")
}
