// Command agenthost is the agenthost binary: the host (agenthost serve on a
// unix socket, agenthost acp on stdio), the command-line clients of a
// running host (run, sessions, journal, status), the plugin conformance kit
// (conformance), and the built-in plugins, which the host starts by
// re-executing this binary (agenthost __plugin NAME), so a desktop app
// ships one file. Run agenthost help for the commands; package internal/cli
// implements them.
package main

import (
	"io"
	"os"

	"github.com/agenthost/agenthost/internal/cli"
)

func main() {
	keepInheritedFDsHere()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code:
// 0 on success, 1 on failure, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	app := &cli.App{Builtins: builtins, BuiltinOptions: builtinOptions, Credentials: credentials, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr}
	return app.Main(args)
}
