//go:build !linux

package claude

import "syscall"

// sysProcAttr keeps the CLI in the plugin's process group. Only Linux has a
// parent-death signal; elsewhere the host's process-group kill is what stops
// a CLI whose plugin died.
func sysProcAttr() *syscall.SysProcAttr { return nil }
