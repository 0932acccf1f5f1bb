package cliproc

import "syscall"

// sysProcAttr keeps the child in the plugin's process group (no Setpgid:
// the host signals the plugin's whole group) and has the kernel SIGKILL it
// when the thread that forked it exits, which Start makes the plugin's
// exit (see the package doc).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
