//go:build !linux

package probe

import "os"

// readProcFile reads a /proc file (on systems that have one) the plain way.
func readProcFile(path string, _ *[]byte) ([]byte, error) { return os.ReadFile(path) }
