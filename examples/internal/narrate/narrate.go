// Package narrate prints the running commentary of the demos (`make demo`,
// `make demo-real`): numbered steps, indented details, checks that held,
// and commands as a reader would type them.
package narrate

import (
	"fmt"
	"os"
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

// Exit ends a demo whose run returned err: with status 1 and what failed,
// or with status 0 and passed, the sentence saying what the checks showed.
func Exit(err error, passed string) {
	if err != nil {
		fmt.Printf("\nFAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\n" + passed)
	os.Exit(0)
}
