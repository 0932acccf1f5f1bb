//go:build !linux

package cliproc

import "syscall"

// sysProcAttr keeps the child in the plugin's process group (no Setpgid:
// the host signals the plugin's whole group). Only Linux has a
// parent-death signal; elsewhere the group is what ties the child to the
// plugin.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
