//go:build !linux

package codex

import "syscall"

// sysProcAttr keeps the app-server in the plugin's process group (no
// Setpgid: the host signals the plugin's whole group). Only Linux can tie
// the child's life to the plugin's (Pdeathsig).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
