package badgerstore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
)

// ProbeStore opens the Badger directory storeDir with the store's profile
// and closes it again. It is the child's half of Options.ProbeOpen: a
// damaged table that makes Badger panic in one of its goroutines kills the
// probe process, not the host. It takes no lock of the state directory (its
// parent holds that) and must not run while a store has storeDir open.
func ProbeStore(storeDir string) error {
	db, err := badger.Open(badgerOptions(storeDir, hclog.NewNullLogger()))
	if err != nil {
		return err
	}
	return db.Close()
}

// The crash-loop guard. Badger v4.9.6 panics inside one of its own
// goroutines when a table is damaged, which kills the process before any
// caller can recover. So before every open the store writes a marker file
// counting the attempt, and removes it once the open returned. A marker that
// has counted OpenAttempts unfinished opens means the store keeps killing
// the process: it is treated as damaged without being opened again (unless
// Options.ProbeOpen, opening it in a child process, shows it opens).
//
// The marker covers the open only: once Open has returned, a crash
// of the host, whatever its cause, is not counted against the store.

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

// opener opens the Badger directory of a state directory behind the
// crash-loop guard, restoring it from the backup when it is damaged or
// missing. It runs once, in Open, before any of the store's goroutines
// start; db and recovery are its result.
type opener struct {
	stateDir string
	opts     Options
	log      hclog.Logger

	db       *badger.DB
	recovery *leasestore.Recovery
}

func (o *opener) path(name string) string { return filepath.Join(o.stateDir, name) }

func (o *opener) now() time.Time { return o.opts.now() }

// openDB opens Badger behind the crash-loop guard, restoring from the backup
// when the store is damaged or missing.
func (o *opener) openDB(ctx context.Context) error {
	storeDir := o.path(storeDirName)
	marker := o.path(markerFileName)
	if err := o.finishInterruptedRestore(); err != nil {
		return err
	}
	o.recovery = o.readRecoveryReport()
	hasManifest := pathExists(filepath.Join(storeDir, storeManifest))
	if !hasManifest && pathExists(o.path(backupFileName)) {
		// Every Badger directory ever opened has a MANIFEST. Opening
		// this one would create an empty store whose first backup would
		// overwrite the sessions the backup still holds.
		return o.restore(fmt.Sprintf("the store directory %s is missing or has no MANIFEST, but a backup exists", storeDir))
	}
	attempts := readMarker(marker)
	if hasManifest && attempts >= o.opts.OpenAttempts {
		reason := fmt.Sprintf("the last %d attempts to open it died before finishing", attempts)
		if o.opts.ProbeOpen == nil {
			return o.restore(reason)
		}
		err := o.opts.ProbeOpen(ctx, storeDir)
		switch {
		case err == nil:
			// Something else killed those opens (a watchdog, a power cut
			// during a long replay): the store is not moved for it.
			o.log.Warn("the last attempts to open the state store died, but it opens in a probe process; opening it normally",
				"store", storeDir, "attempts", attempts)
			attempts = 0
		case ctx.Err() != nil:
			// Undecided: leave the marker for the next start.
			return fmt.Errorf("probe-open state store %s: %w", storeDir, ctx.Err())
		default:
			return o.restore(fmt.Sprintf("%s, and opening it in a probe process failed too (%v)", reason, err))
		}
	}
	if err := os.WriteFile(marker, []byte(strconv.Itoa(attempts+1)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write crash-loop marker %s: %w", marker, err)
	}
	db, err := openBadgerWaiting(storeDir, o.log)
	if err != nil {
		if damaged(err) && !environmental(err) {
			return o.restore(fmt.Sprintf("opening it failed: %v", err))
		}
		// The open returned: it did not die, and the store may be fine.
		_ = os.Remove(marker)
		return o.refuseOpen(storeDir, err)
	}
	// The check reads every record for the first time since the open, so
	// it runs under the crash-loop marker too: a damaged block that makes
	// Badger panic here counts as a death during the open.
	switch lost, err := checkAgainstBackup(db, o.path(backupFileName)); {
	case err != nil:
		// An unreadable backup cannot testify either way; the restore
		// path would refuse it too. Open what is there.
		o.log.Warn("the backup cannot be read to check the store against it", "error", err)
	case lost != "":
		if err := db.Close(); err != nil {
			o.log.Warn("close the store found short of its backup", "error", err)
		}
		return o.restore("it opened, but " + lost)
	}
	if err := os.Remove(marker); err != nil {
		_ = db.Close()
		return fmt.Errorf("remove crash-loop marker %s: %w", marker, err)
	}
	o.db = db
	// A restore that built its store but died before putting it in place
	// leaves it behind; the store it meant to replace has just opened.
	_ = os.RemoveAll(o.path(restoringDirName))
	return nil
}

// Badger v4.9.6 formats most causes with %v, which loses the error chain,
// so open errors are classified by their text.

// damageSigns are the open errors that positively say the store's content
// is damaged: a MANIFEST that does not parse, a table it names that is
// missing or unreadable, a checksum that does not match, a file that ends
// early. Only these move a store aside.
func damageSigns() []string {
	return []string{
		"manifest has bad magic",
		"manifest has checksum mismatch",
		"Manifest file might be corrupted",
		"MANIFEST invalid",
		"MANIFEST file has invalid manifestChange op",
		"cannot parse invalid wire-format data", // a MANIFEST change set
		"file does not exist for table",
		"Opening table:",
		"while mmapping", // a table file truncated to nothing
		"checksum mismatch",
		"CHECKSUM_MISMATCH",
		"failed to verify checksum",
		"checksum length",
		"Level validation",
		"key registry",
		"Encryption key mismatch", // a KEYREGISTRY that no longer parses (no encryption is used)
		"while iterating wal",
		"unexpected EOF",
	}
}

func damaged(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, sign := range damageSigns() {
		if strings.Contains(msg, sign) {
			return true
		}
	}
	return false
}

// environmental reports whether an open error is about the machine
// (permissions, a full or read-only disk, exhausted descriptors or memory)
// rather than the store's content. Such an error must never move a healthy
// store aside.
func environmental(err error) bool {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"permission denied", "no space left on device", "read-only file system",
		"too many open files", "cannot allocate memory"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// badgerLockedSign is how Badger says its own directory lock is held.
const badgerLockedSign = "Another process is using this Badger database"

// openBadgerWaiting opens Badger, waiting up to lockWait while its own
// directory lock is held. This store already holds agenthost.lock, so the
// holder is most likely a child a dead host was starting, which lets go
// at its exec (see lockWait); a tool holding it is reported after the wait.
// Badger takes the lock first thing in Open, before it starts anything.
//
// The key registry is read on its own first: Badger's Open returns on a
// registry that does not read without stopping the two goroutines it has
// started by then, so each open of a store with a damaged registry would
// leak them.
func openBadgerWaiting(storeDir string, log hclog.Logger) (*badger.DB, error) {
	if _, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: storeDir, ReadOnly: true}); err != nil {
		return nil, fmt.Errorf("read the key registry: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		db, err := badger.Open(badgerOptions(storeDir, log))
		if err == nil || !strings.Contains(err.Error(), badgerLockedSign) || !time.Now().Before(deadline) {
			return db, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refuseOpen explains an open error that does not prove damage. Nothing was
// moved or changed; the advice says what the user can do.
func (o *opener) refuseOpen(storeDir string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, badgerLockedSign):
		// Our own lock (agenthost.lock) is held, so this is another
		// program: the badger CLI, a backup tool.
		lockPath := filepath.Join(storeDir, "LOCK")
		holder := "another process"
		if pid := readLockPID(lockPath); pid > 0 {
			holder = fmt.Sprintf("pid %d", pid)
		}
		return fmt.Errorf("%w: the state store %s is locked by %s (Badger's lock file %s); "+
			"a tool such as the badger CLI may have it open: stop it and start again", leasestore.ErrLocked, storeDir, holder, lockPath)
	case strings.Contains(msg, "manifest has unsupported version") || strings.Contains(msg, "external magic number"):
		return fmt.Errorf("open state store %s: it was written by another version of Badger (%v); nothing was moved: "+
			"run the agenthost that wrote it, or move the directory aside and start again to %s",
			storeDir, err, o.afterMoveAside())
	case environmental(err):
		return fmt.Errorf("open state store %s (nothing was moved; fix the cause and start again): %w", storeDir, err)
	}
	return fmt.Errorf("open state store %s: %w; nothing was moved: if this persists and the store is damaged, "+
		"move the directory aside and start again to %s", storeDir, err, o.afterMoveAside())
}

func (o *opener) afterMoveAside() string {
	if pathExists(o.path(backupFileName)) {
		return "restore the sessions from the backup " + o.path(backupFileName)
	}
	return "begin with no sessions (there is no backup)"
}

// restore rebuilds the store from the backup and puts it in place of the
// damaged one, which is moved aside (nothing is deleted). If there is no
// usable backup nothing is moved: the open is refused with instructions,
// and the marker stays so that the next start refuses again without
// opening (and crashing on) the damaged store.
//
// Every step that can be interrupted leaves a state the next open finishes
// or redoes, never a store without its fence floors or an empty store in
// place of the sessions:
//
//  1. build store.restoring from the backup and the journal mirror's
//     entries of the sessions it holds, and prepare it there: fence
//     floors, unreconciled leases, journal positions moved past anything
//     the lost store can have acknowledged, a "restored-from-backup" entry
//     in every journal (a crash here: the damaged store is still in place
//     and the next open decides again);
//  2. rewrite the backup from the prepared store, so a later restore
//     starts from these positions and not from the old ones;
//  3. write the report into store.restoring: from now on it is complete;
//  4. move the damaged store aside, and store.restoring into its place (a
//     crash between the two renames: finishInterruptedRestore completes
//     the second on the next open);
//  5. clear the marker and move the report out to store.recovered.json.
func (o *opener) restore(reason string) error {
	storeDir := o.path(storeDirName)
	backup := o.path(backupFileName)
	if !pathExists(backup) {
		return fmt.Errorf("%w: the state store %s is damaged (%s) and there is no backup to restore from; "+
			"move that directory aside to start with no sessions, or restore it by hand", leasestore.ErrDamaged, storeDir, reason)
	}
	now := o.now()
	fresh := o.path(restoringDirName)
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("clear %s: %w", fresh, err)
	}
	// No sync per transaction: nothing here counts until the report is
	// written, after Close has flushed everything to tables.
	db, err := badger.Open(badgerOptions(fresh, o.log).WithSyncWrites(false))
	if err != nil {
		return fmt.Errorf("%w: the state store %s is damaged (%s) and a fresh store for the restore cannot be opened: %v",
			leasestore.ErrDamaged, storeDir, reason, err)
	}
	if err := loadBackup(db, backup); err != nil {
		_ = db.Close()
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("%w: the state store %s is damaged (%s) and its backup %s cannot be loaded either (%v); "+
			"both are kept as they are: move them aside to start with no sessions", leasestore.ErrDamaged, storeDir, reason, backup, err)
	}
	// The backup holds records and positions; the journal mirror holds
	// the entries, all of them (the positions the backup gives are not a
	// bound on what it has).
	states, err := journalStates(db)
	for id, st := range states {
		st.last = 0
		states[id] = st
	}
	var entries int
	if err == nil {
		entries, _, err = loadFromMirror(db, o.path(mirrorFileName), states)
	}
	var n int
	if err == nil {
		n, err = prepareRestored(db, reason, now, o.log)
	}
	if err == nil {
		err = writeBackupOf(db, o.stateDir, o.log)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("%w: the state store %s is damaged (%s) and restoring it from %s failed: %v",
			leasestore.ErrDamaged, storeDir, reason, backup, err)
	}
	rec := &leasestore.Recovery{Reason: reason, Sessions: n, Entries: entries, RestoredAt: now}
	if pathExists(storeDir) {
		rec.DamagedDir = o.path(damagedPrefix + now.Format("20060102T150405.000000000Z"))
	}
	report, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode restore report: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(fresh, restoreReportName), func(w io.Writer) error {
		_, err := w.Write(report)
		return err
	}); err != nil {
		return fmt.Errorf("mark restored store complete: %w", err)
	}
	o.restoreStep("complete")
	if rec.DamagedDir != "" {
		if err := os.Rename(storeDir, rec.DamagedDir); err != nil {
			return fmt.Errorf("move damaged store %s aside: %w", storeDir, err)
		}
	}
	o.restoreStep("moved-aside")
	if err := os.Rename(fresh, storeDir); err != nil {
		return fmt.Errorf("put restored store in place: %w", err)
	}
	if err := syncDir(o.stateDir); err != nil {
		return fmt.Errorf("put restored store in place: %w", err)
	}
	o.restoreStep("in-place")
	if err := o.settleRestored(); err != nil {
		return err
	}
	// This process just closed the restored store: a child it is
	// starting meanwhile (a plugin, a probe) holds a copy of its locked
	// descriptor until the child's exec, so the reopen waits that out
	// as every open does (see lockWait).
	if db, err = openBadgerWaiting(storeDir, o.log); err != nil {
		return fmt.Errorf("%w: reopen restored store: %v", leasestore.ErrDamaged, err)
	}
	o.db = db
	o.recovery = rec
	o.log.Error(rec.String())
	return nil
}

// restoreStep marks a step of a restore; tests that kill the process at a
// given step set Options.restoreHook (see export_test.go).
func (o *opener) restoreStep(step string) {
	if o.opts.restoreHook != nil {
		o.opts.restoreHook(step)
	}
}

// finishInterruptedRestore completes a restore that died between moving
// the damaged store aside and putting the restored one in place (no
// MANIFEST in store/, a complete store.restoring beside it), or after that
// but before its report was moved out.
func (o *opener) finishInterruptedRestore() error {
	storeDir := o.path(storeDirName)
	fresh := o.path(restoringDirName)
	if !pathExists(filepath.Join(storeDir, storeManifest)) && fileExists(filepath.Join(fresh, restoreReportName)) {
		if pathExists(storeDir) {
			// Not a Badger store (it has no MANIFEST), but not ours to
			// delete either.
			aside := o.path(damagedPrefix + o.now().Format("20060102T150405.000000000Z"))
			if err := os.Rename(storeDir, aside); err != nil {
				return fmt.Errorf("finish interrupted restore: move %s aside: %w", storeDir, err)
			}
		}
		if err := os.Rename(fresh, storeDir); err != nil {
			return fmt.Errorf("finish interrupted restore: put %s in place: %w", fresh, err)
		}
		if err := syncDir(o.stateDir); err != nil {
			return fmt.Errorf("finish interrupted restore: %w", err)
		}
		o.log.Warn("finished a restore from backup that was interrupted before the restored store was in place", "store", storeDir)
	}
	if fileExists(filepath.Join(storeDir, restoreReportName)) {
		return o.settleRestored()
	}
	return nil
}

// settleRestored runs once a restored store is in place: the crash-loop
// marker counted opens of the damaged store, not of this one, and the
// report moves out of the Badger directory to where Store.Recovery finds it.
func (o *opener) settleRestored() error {
	if err := os.Remove(o.path(markerFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear crash-loop marker: %w", err)
	}
	if err := os.Rename(filepath.Join(o.path(storeDirName), restoreReportName), o.path(recoveredFileName)); err != nil {
		return fmt.Errorf("keep restore report: %w", err)
	}
	return syncDir(o.stateDir)
}

// reportJournals adds the journals syncMirror recovered to the recovery
// report, and keeps it (store.recovered.json) until a clean Close, as a
// restore's: a host that dies before telling anyone reports it next time.
func (o *opener) reportJournals(journals []leasestore.JournalRecovery) error {
	if o.recovery == nil {
		o.recovery = &leasestore.Recovery{
			Reason:       "most likely Badger's log of its latest writes, store/*.mem, was lost or damaged",
			RestoredAt:   o.now(),
			JournalsOnly: true,
		}
	}
	o.recovery.Journals = append(o.recovery.Journals, journals...)
	report, err := json.Marshal(o.recovery)
	if err != nil {
		return fmt.Errorf("encode recovery report: %w", err)
	}
	if err := writeFileAtomic(o.path(recoveredFileName), func(w io.Writer) error {
		_, err := w.Write(report)
		return err
	}); err != nil {
		return fmt.Errorf("keep recovery report: %w", err)
	}
	o.log.Error(o.recovery.String())
	return nil
}

// readRecoveryReport returns the report of a restore no clean Close has
// followed yet, or nil.
func (o *opener) readRecoveryReport() *leasestore.Recovery {
	b, err := os.ReadFile(o.path(recoveredFileName))
	if err != nil {
		return nil
	}
	var rec leasestore.Recovery
	if err := json.Unmarshal(b, &rec); err != nil {
		o.log.Warn("unreadable restore report", "path", o.path(recoveredFileName), "error", err)
		return &leasestore.Recovery{Reason: "unknown (the restore report is unreadable)"}
	}
	return &rec
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// writeFileAtomic replaces path with what fill writes: a reader sees the
// old content or all of the new, never part of it, even after a power cut.
// The new content goes to path.tmp, is synced and renamed over path, and
// the directory is synced; on any failure path.tmp is removed and path is
// left as it was.
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
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
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func loadBackup(db *badger.DB, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return db.Load(bufio.NewReader(f), 64)
}

// prepareRestored readies every session of a store just loaded from a
// backup, in db, before the store is put in place (a store in place must
// never lack its floors). The backup may be older than the last lease
// commits, and one of those may have granted the next fence already; so
// every restored lease gets a fence floor above it (a floor: the current
// fence itself is never rewritten, which would corrupt exactly the records
// a restore means to save), is marked unreconciled, has its journal
// position moved leasestore.RestoredSeqGap ahead, and its journal records the restore.
// A record that does not decode is left as it is (every operation on it
// fails, so no writer can be admitted on it) and not counted.
func prepareRestored(db *badger.DB, reason string, now time.Time, log hclog.Logger) (int, error) {
	var ids []string
	if err := db.View(func(txn *badger.Txn) error { ids = recordIDs(txn, 0); return nil }); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		unreadable := false
		err := runOne(db, func(b *batch) error {
			cur, err := b.session(id)
			if err != nil {
				unreadable = errors.Is(err, leasestore.ErrDamaged)
				return err
			}
			cur.Lease.MinNextFence = max(cur.Lease.MinNextFence, cur.Lease.NextFence()+1)
			cur.Lease.Unreconciled = true
			cur.UpdatedAt = now
			if err := b.putSession(cur); err != nil {
				return err
			}
			last, err := b.lastSeq(id)
			if err != nil {
				return err
			}
			b.set(seqKey(id), encodeSeq(last+leasestore.RestoredSeqGap))
			ev := leasestore.LifecycleEntry(cur, leasestore.LifecycleEvent{Event: "restored-from-backup", Reason: reason, GapAfter: last})
			_, err = b.appendEntries(id, cur.Incarnation, cur.Lease.Fence, now, ev)
			return err
		})
		if unreadable {
			log.Error("a restored session record is unreadable; it is kept as it is", "session", id, "error", err)
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("prepare restored session %q: %w", id, err)
		}
		n++
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
