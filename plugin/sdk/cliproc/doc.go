// Package cliproc runs the command line agent a plugin wraps, as a child
// process bound to the plugin's life. Every plugin that drives a CLI over
// its stdio (the reference plugins drive claude and codex) needs the same
// few things, and this package is where each is written once:
//
//   - Start runs the executable with three pipes of its own. Process.Write
//     and CloseStdin feed its stdin; the plugin reads Process.Stdout,
//     usually through a LineReader, which caps the size of a line; the
//     package reads stderr itself, logging every line at debug level and
//     keeping the last ones (Tail) for error messages.
//   - Process.Stop ends the child: stdin EOF, then SIGTERM, then SIGKILL,
//     under one deadline rule (below).
//   - Lookup.Find locates the executable (a path the user set, PATH, the
//     usual install locations) and QueryVersion reads its version.
//
// A Process is shaped like go-plugin's runner.Runner and Nomad's executor:
// a Config whose zero value works but for Path, a context first, typed
// errors (ErrLineTooLong, ErrStdinClosed, ErrNotReaped, *NotFoundError,
// *UnusableError, *VersionError) to match with errors.Is and errors.As.
//
// # Stopping
//
// Stop closes the child's stdin (a CLI's cue to flush its state and exit)
// and waits, sends SIGTERM and waits, then sends SIGKILL and waits for the
// child to be reaped. The phases share the deadline of Stop's context:
// before each of the two waits, the time left is split evenly among the
// phases still to come, the SIGKILL phase counting as one, and the wait is
// the smaller of that share and Config.Grace. With 3 s left and a 5 s
// grace the child gets 1 s after EOF, 1 s after SIGTERM, and the last
// second is kept for the kill and the reap; with no deadline each wait is
// the grace; a context that has ended skips to SIGKILL. After SIGKILL Stop
// waits up to KillWait for the reap whatever its context says, because a
// child must be reaped, and only this wait may outlast the deadline.
//
// # Hazards
//
//   - The parent-death signal follows the thread. On Linux the child is
//     started with Pdeathsig SIGKILL, so it dies with a plugin that is
//     SIGKILLed and no CLI outlives a crashed plugin. The kernel sends that
//     signal when the thread that forked the child exits, not the process.
//     The Go runtime ends a thread when a goroutine locked to it
//     (runtime.LockOSThread) returns without unlocking, so code in the
//     plugin or a library that does so on the thread that happened to fork
//     would kill the CLI at a random moment. Start therefore forks from a
//     goroutine of its own, locked to its thread until the child is
//     reaped: the forking thread is neither the caller's, which may end
//     with the caller's goroutine, nor one back in the runtime's pool,
//     where another locked goroutine could end it. It costs one thread,
//     blocked in wait4, per child. The tests show it: a child forked from
//     a thread that then ends dies with it, a child of Start does not, and
//     a child whose plugin is SIGKILLed dies.
//   - The process group. The child stays in the plugin's process group,
//     which the host signals as a whole to stop a plugin. Only Linux has a
//     parent-death signal; elsewhere the group is what ties the two.
//   - Pipes held by descendants. A tool's background job inherits the
//     child's stdout and stderr and may hold them open long after the
//     child exited. After the reap the pipes are read for DrainWait more,
//     then closed, so no reader waits on a grandchild.
//   - Lines of any length. A CLI may print a whole tool output as one JSON
//     line. A LineReader holds at most its cap and discards the rest of a
//     longer line, which it reports as *LineTooLongError.
//   - A child that stops reading its stdin blocks writes once the pipe's
//     buffer is full; Config.WriteTimeout bounds each write.
//
// The package belongs to plugin/sdk: it imports neither the host, its
// store, Badger, gopsutil nor the testing package.
package cliproc
