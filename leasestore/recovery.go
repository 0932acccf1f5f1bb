package leasestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The crash-loop guard. Badger v4.9.6 panics inside one of its own
// goroutines when a table is damaged, which kills the process before any
// caller can recover. So before every open the store writes a marker file
// counting the attempt, and removes it once the open returned. A marker that
// has counted OpenAttempts unfinished opens means the store keeps killing
// the process: it is treated as damaged without being opened again.

func readMarker(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		// An unreadable marker still says an open did not finish.
		return 1
	}
	return n
}

// openDB opens Badger behind the crash-loop guard, restoring from the backup
// when the store is damaged.
func (s *BadgerStore) openDB() error {
	storeDir := filepath.Join(s.stateDir, storeDirName)
	marker := filepath.Join(s.stateDir, markerFileName)
	attempts := readMarker(marker)
	if attempts >= s.opts.OpenAttempts && pathExists(filepath.Join(storeDir, storeManifest)) {
		return s.restore(fmt.Sprintf("the last %d attempts to open it died before finishing", attempts))
	}
	if err := os.WriteFile(marker, []byte(strconv.Itoa(attempts+1)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write crash-loop marker %s: %w", marker, err)
	}
	db, err := badger.Open(badgerOptions(storeDir, s.log))
	if err != nil {
		if environmental(err) {
			// The store may be fine; the machine is not letting us at it.
			_ = os.Remove(marker)
			return fmt.Errorf("open state store %s: %w", storeDir, err)
		}
		return s.restore(fmt.Sprintf("opening it failed: %v", err))
	}
	s.db = db
	if err := os.Remove(marker); err != nil {
		_ = db.Close()
		return fmt.Errorf("remove crash-loop marker %s: %w", marker, err)
	}
	return nil
}

// environmental reports whether an open error is about the machine
// (permissions, a full or read-only disk) rather than the store's content.
// Such an error must never move a healthy store aside.
func environmental(err error) bool {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) {
		return true
	}
	// Badger formats some causes with %v, which loses the errno.
	msg := err.Error()
	for _, s := range []string{"permission denied", "no space left on device", "read-only file system", "too many open files"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// restore rebuilds the store from the backup into a fresh directory and,
// only once that worked, moves the damaged directory aside (nothing is
// deleted) and puts the restored one in its place. If there is no usable
// backup nothing is moved: the open is refused with instructions, and the
// marker stays so that the next start refuses again without opening (and
// crashing on) the damaged store.
func (s *BadgerStore) restore(reason string) error {
	storeDir := filepath.Join(s.stateDir, storeDirName)
	backup := filepath.Join(s.stateDir, backupFileName)
	if !pathExists(backup) {
		return fmt.Errorf("%w: the state store %s is damaged (%s) and there is no backup to restore from; "+
			"move that directory aside to start with no sessions, or restore it by hand", ErrDamaged, storeDir, reason)
	}
	stamp := s.now().Format("20060102T150405.000000000Z")
	fresh := storeDir + ".restoring"
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("clear %s: %w", fresh, err)
	}
	db, err := badger.Open(badgerOptions(fresh, s.log))
	if err != nil {
		return fmt.Errorf("%w: the state store %s is damaged (%s) and a fresh store for the restore cannot be opened: %v",
			ErrDamaged, storeDir, reason, err)
	}
	if err := loadBackup(db, backup); err != nil {
		_ = db.Close()
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("%w: the state store %s is damaged (%s) and its backup %s cannot be loaded either (%v); "+
			"both are kept as they are: move them aside to start with no sessions", ErrDamaged, storeDir, reason, backup, err)
	}
	// Close and reopen under the final name: Badger records no absolute
	// paths, but its directory lock is on the path it opened.
	if err := db.Close(); err != nil {
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("%w: close restored store: %v", ErrDamaged, err)
	}
	aside := filepath.Join(s.stateDir, damagedPrefix+stamp)
	if err := os.Rename(storeDir, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move damaged store %s aside: %w", storeDir, err)
	}
	if err := os.Rename(fresh, storeDir); err != nil {
		return fmt.Errorf("put restored store in place: %w", err)
	}
	if db, err = badger.Open(badgerOptions(storeDir, s.log)); err != nil {
		return fmt.Errorf("%w: reopen restored store: %v", ErrDamaged, err)
	}
	s.db = db
	s.recovery = &Recovery{Reason: reason, DamagedDir: aside}
	return os.Remove(filepath.Join(s.stateDir, markerFileName))
}

func loadBackup(db *badger.DB, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return db.Load(bufio.NewReader(f), 64)
}

// finishRecovery runs once the writer is up after a restore. The backup may
// be older than the last lease commits, and one of those may have granted
// the next fence already; so every restored lease gets a fence floor above
// it (a floor: the current fence itself is never rewritten, which would
// corrupt exactly the records a restore means to save), is marked
// unreconciled, and its journal records the restore.
func (s *BadgerStore) finishRecovery(ctx context.Context) error {
	ids, err := s.sessionIDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.submit(ctx, func(b *batch) error {
			cur, err := b.session(id)
			if err != nil {
				return err
			}
			cur.Lease.MinNextFence = max(cur.Lease.MinNextFence, cur.Lease.NextFence()+1)
			cur.Lease.Unreconciled = true
			if err := b.putSession(cur); err != nil {
				return err
			}
			ev := lifecycle(KindLifecycle, cur, LifecycleEvent{Event: "restored-from-backup", Reason: s.recovery.Reason})
			_, err = b.appendEntries(id, cur.Lease.Fence, s.now(), *ev)
			return err
		})
		if err != nil {
			return fmt.Errorf("raise fence floor of restored session %q: %w", id, err)
		}
	}
	s.recovery.Sessions = len(ids)
	if err := s.writeBackup(); err != nil {
		return fmt.Errorf("back up restored store: %w", err)
	}
	s.log.Error(s.recovery.String())
	return nil
}

// backupLoop rewrites the backup after lease changes, coalescing the
// changes of BackupDelay into one write.
func (s *BadgerStore) backupLoop() {
	defer close(s.backupDone)
	for {
		select {
		case <-s.backupKick:
		case <-s.stopBackup:
			return
		}
		t := time.NewTimer(s.opts.BackupDelay)
		select {
		case <-t.C:
		case <-s.stopBackup:
			t.Stop()
			return // shutdown writes the last backup itself
		}
		if err := s.writeBackup(); err != nil {
			s.log.Error("backup of session records failed; retrying after the next lease change", "error", err)
		}
	}
}

// writeBackup replaces the backup atomically with a Badger backup stream of
// the session records and journal positions (the 'r' key prefix).
func (s *BadgerStore) writeBackup() error {
	s.backupMu.Lock()
	defer s.backupMu.Unlock()
	gen := s.leaseGen.Load()
	path := filepath.Join(s.stateDir, backupFileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create backup: %w", err)
	}
	w := bufio.NewWriter(f)
	st := s.db.NewStream()
	st.Prefix = []byte{prefixRecord}
	st.NumGo = 1
	st.LogPrefix = "leasestore.backup"
	_, err = st.Backup(w, 0)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(s.stateDir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	s.backedUpGen.Store(gen)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
