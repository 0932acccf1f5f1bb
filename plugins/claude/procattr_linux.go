package claude

import "syscall"

// sysProcAttr keeps the CLI in the plugin's process group (the host signals
// the plugin's whole group, so no Setpgid) and has the kernel SIGKILL it
// when the plugin dies, even by SIGKILL. Linux delivers the death signal
// when the thread that started the child exits; the Go runtime does not
// retire threads while the process lives (the plugin never locks a
// goroutine to a thread and returns), so in practice that is the plugin's
// exit.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
