package badgerstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Paths inside a state directory.
const (
	storeDirName   = "store"          // the Badger directory
	backupFileName = "store.backup"   // Badger backup stream of session records
	markerFileName = "store.opening"  // crash-loop guard, present while opening
	lockFileName   = "agenthost.lock" // exclusive lock naming the holder's pid
	storeManifest  = "MANIFEST"       // exists in every Badger directory ever opened
	damagedPrefix  = "store.damaged-" // a damaged store moved aside

	// A restore builds the new store beside the damaged one and writes its
	// report inside it once it is complete; the report travels with the
	// directory into place and is then moved out to recoveredFileName.
	restoringDirName  = "store.restoring"        // a restore being built
	restoreReportName = "agenthost-restore.json" // inside it: complete, and the report
	recoveredFileName = "store.recovered.json"   // the last restore's report, until a clean Close
)

// Present reports whether stateDir holds a lease store from an earlier run,
// without opening anything: at most two bounded existence checks, the store
// first, then its backup. A desktop app calls it at start-up to decide
// whether it needs a host before any session is asked for.
//
// exists reports whether a path exists; nil means os.Lstat. Any error other
// than "does not exist" counts as present: a store that cannot be inspected
// must not be mistaken for a fresh profile.
func Present(stateDir string, exists func(path string) bool) bool {
	if exists == nil {
		exists = pathExists
	}
	if exists(filepath.Join(stateDir, storeDirName, storeManifest)) {
		return true
	}
	return exists(filepath.Join(stateDir, backupFileName))
}

func pathExists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
