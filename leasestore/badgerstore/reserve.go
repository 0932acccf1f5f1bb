package badgerstore

import (
	"errors"
	"io/fs"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// reserveFileName is the store's ballast beside it (see reserve).
const reserveFileName = "store.reserve"

// reserveSize is the ballast's size: what Badger needs to close on a full
// disk, its two memtables (8 MiB each) flushed into tables, with room for
// the MANIFEST and the table indexes.
const reserveSize = 24 << 20

// reserve is the store's ballast: a file of reserveSize allocated bytes
// beside the store, kept while there is room for it on top of
// Options.MinFreeSpace. The free-space guard keeps the store's own writes
// off a full disk, but another program can take the last byte; Badger then
// cannot flush its memtables, and Close would wait forever. So a Close that
// finds less than MinFreeSpace free deletes the ballast first: the space
// another program cannot have taken is Badger's to flush into. The writer
// allocates it again once the space is back.
type reserve struct {
	path    string
	minFree int64
	log     hclog.Logger

	mu      sync.Mutex
	present bool
}

// ensure allocates the ballast unless it is there, there is no room for it
// on top of the free-space reserve, or the file system cannot allocate
// ahead (then there is none: writes into Badger's maps there are sparse
// anyway).
func (r *reserve) ensure(free int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.present || r.minFree < 0 || free < r.minFree+reserveSize {
		return
	}
	if fi, err := os.Stat(r.path); err == nil && fi.Size() >= reserveSize {
		r.present = true
		return
	}
	switch err := allocateFile(r.path, reserveSize); {
	case err == nil:
		r.present = true
	case errors.Is(err, errUnsupported):
		r.present = true // nothing to do, now or later
	default:
		_ = os.Remove(r.path)
		r.log.Warn("could not allocate the store's disk reserve; a Close on a full disk may not finish", "path", r.path, "error", err)
	}
}

// release deletes the ballast, reporting whether there was one.
func (r *reserve) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := os.Remove(r.path)
	r.present = false
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("could not delete the store's disk reserve", "path", r.path, "error", err)
		return false
	}
	return err == nil
}
