// Command agenthost is the agenthost host binary and its command line: it
// will run the supervisor that starts and reconciles agent plugin processes
// and serve the control socket that desktop apps connect to.
//
// For now it only reports its version:
//
//	agenthost version   print the version and the Go version it was built with
//	agenthost help      print usage
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

const usage = `usage: agenthost <command>

Commands:
  version   print the agenthost version
  help      print this help
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code:
// 0 on success, 2 for a usage error (as the flag package does).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch cmd := args[0]; cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version":
		if len(args) > 1 {
			fmt.Fprintln(stderr, "agenthost: version takes no arguments")
			return 2
		}
		fmt.Fprintf(stdout, "agenthost %s (%s)\n", version(), runtime.Version())
		return 0
	default:
		fmt.Fprintf(stderr, "agenthost: unknown command %q; run 'agenthost help' for usage\n", cmd)
		return 2
	}
}

// version returns the main module's version as recorded by the go command:
// a tag or pseudo-version when built with `go install ...@version`, and
// "devel" for a build from a work tree, which records "(devel)" or nothing.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	return "devel"
}
