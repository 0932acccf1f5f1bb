package codex

import "syscall"

// sysProcAttr keeps the app-server in the plugin's process group (no
// Setpgid: the host signals the plugin's whole group) and has the kernel
// SIGKILL it if the plugin dies, even by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
