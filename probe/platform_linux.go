package probe

import (
	"io/fs"
	"syscall"
)

func platformTable(tokenVar string) Table { return &ProcFS{TokenVar: tokenVar} }

// entryUID returns the owner of a /proc/<pid> entry, -1 when the file system
// does not say (a synthetic tree).
func entryUID(e fs.DirEntry) int {
	info, err := e.Info()
	if err != nil {
		return -1
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
