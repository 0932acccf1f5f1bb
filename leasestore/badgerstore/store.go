package badgerstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
)

// Options configure Open. The zero value works.
type Options struct {
	// Logger receives the store's logs, Badger's own included (Badger's
	// chatty info lines are demoted to debug). Default: no logging.
	Logger hclog.Logger
	// Now is the clock for entry times, evidence and record timestamps.
	// Default: time.Now.
	Now func() time.Time
	// NewToken mints spawn tokens. Default: 128 random bits from
	// crypto/rand, base32-encoded.
	NewToken func() (string, error)
	// OpenAttempts is how many consecutive opens of the store may die
	// (Badger panics inside its own goroutines on some damaged tables,
	// which no caller can recover) before the store is treated as damaged,
	// moved aside and restored from its backup. Default: 2.
	//
	// The guard counts every death during an open, whatever killed the
	// process; see ProbeOpen for telling a damaged store from a watchdog
	// or a power cut during a slow open. Deaths after Open returned are
	// not counted: the guard is about opening, not running.
	OpenAttempts int
	// ProbeOpen, when set, is asked before a store whose last OpenAttempts
	// opens died is moved aside: it must open storeDir in a short-lived
	// child process (one that may die instead of the host) and report
	// whether that worked. A nil error means the store opens: the deaths
	// had another cause, so the marker is cleared and the store is opened
	// normally. An error (the child failed or died) means the store is
	// damaged and is restored from the backup. If ctx ends first, Open
	// fails with ctx's error and decides nothing.
	//
	// The store cannot start a process of its own (it does not know the
	// binary), so a host sets ProbeOpen to re-execute itself in a probe
	// mode whose whole job is
	//
	//	if err := badgerstore.ProbeStore(storeDir); err != nil { os.Exit(1) }
	//	os.Exit(0)
	//
	// Nil (the default) keeps the plain rule: OpenAttempts deaths restore.
	ProbeOpen func(ctx context.Context, storeDir string) error
	// BackupDelay is how long lease changes are coalesced before the backup
	// of session records is rewritten. Default: 200ms.
	BackupDelay time.Duration
	// CloseRetries keeps journal handles whose close failed until a later
	// Close succeeds in closing them. Default: a registry owned by the
	// store (see Store.CloseRetries).
	CloseRetries *leasestore.CloseRetries
	// MinFreeSpace is how many bytes must stay free on the file system
	// holding the store for a journal append to be accepted; lease and
	// record changes may use half of it, so a lease can still be released
	// or handed over after the journals filled the disk. A refused write
	// fails with leasestore.ErrNoSpace and nothing is written. Default:
	// 64 MiB. Negative: no check (the caller guarantees space some other
	// way).
	//
	// The check keeps the store's own writes off a full disk; another
	// program can still take the last byte. Badger writes its logs and
	// tables through memory maps, where a page a full disk cannot back
	// would be a SIGBUS that kills the whole process; so its files are
	// allocated when they are created (third_party/ristretto's PATCH.md),
	// a full disk is an error Badger retries, and the store keeps a
	// reserve file (store.reserve, 24 MiB, beside the store while there is
	// room for it) that it deletes when Badger cannot allocate a file or a
	// Close finds the disk full: the room a flush needs. The default
	// covers one memtable's log (16 MiB), the table its flush writes and
	// compaction output, with room to spare. The reserve is allocated only
	// when it fits on top of MinFreeSpace, and only where the file system
	// can allocate ahead (Linux).
	MinFreeSpace int64

	// restoreHook, set only by tests, runs between the steps of a restore.
	restoreHook func(step string)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewToken == nil {
		o.NewToken = func() (string, error) { return rand.Text(), nil }
	}
	if o.OpenAttempts <= 0 {
		o.OpenAttempts = 2
	}
	if o.BackupDelay <= 0 {
		o.BackupDelay = 200 * time.Millisecond
	}
	if o.CloseRetries == nil {
		o.CloseRetries = &leasestore.CloseRetries{}
	}
	if o.MinFreeSpace == 0 {
		o.MinFreeSpace = 64 << 20
	}
	return o
}

func (o Options) now() time.Time { return o.Now().UTC() }

// Store is the embedded leasestore.Store: one Badger directory under the
// state directory, guarded by an exclusive lock file and a crash-loop
// marker, with a backup of the session records beside it. Its parts each
// own their goroutine: the writer (every write, group-committed) and the
// backup; Close stops both before it closes Badger.
type Store struct {
	stateDir string
	opts     Options
	log      hclog.Logger
	lock     *dirLock
	recovery *leasestore.Recovery

	writer  *writer
	mirror  *mirror
	backup  *backupper
	reserve *reserve
	// unregisterNoSpace removes the reserve's handler once Badger closed.
	unregisterNoSpace func()

	// readMu keeps reads out of a closing database; db is nil once closed.
	readMu sync.RWMutex
	db     *badger.DB

	// closeSem admits one Close at a time (a channel, so that a waiting
	// Close can give up when its context ends).
	closeSem chan struct{}

	mu       sync.Mutex
	closing  bool                      // a Close is under way or succeeded: no new writes
	closed   bool                      // a Close succeeded
	journals leasestore.JournalHandles // handles from OpenJournal not yet closed
	watchers map[string]chan struct{}  // closed when a session's journal or record changes

	// stateLocks serialise provider state puts of one session (see
	// providerstate.go), by a hash of its id.
	stateLocks [stateLockCount]sync.Mutex
}

var (
	_ leasestore.Store                = (*Store)(nil)
	_ leasestore.ProviderStateHandles = (*Store)(nil)
)

// Open opens (creating if needed) the lease store in stateDir, which must
// be an absolute path. It takes an exclusive lock on the directory; a second
// opener gets a *LockedError naming the holder's pid.
//
// If the previous opens died (see Options.OpenAttempts and ProbeOpen), or
// Badger reports damage it recognisably cannot open (a corrupt MANIFEST, a
// missing or unreadable table, a checksum mismatch), the damaged directory
// is moved aside and the session records are restored from the backup (see
// Store.Recovery); every restored lease gets a fence floor above anything
// the lost commits could have granted, and is marked unreconciled. Without a
// usable backup Open refuses with leasestore.ErrDamaged and says what to
// do. Any other open error (a lock held by another process, a store written
// by a newer Badger, a full disk) is returned with advice and nothing is
// moved.
func Open(ctx context.Context, stateDir string, opts Options) (*Store, error) {
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("%w: state directory must be an absolute path, got %q", leasestore.ErrInvalidArgument, stateDir)
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	lock, err := lockStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	o := &opener{stateDir: stateDir, opts: opts, log: opts.Logger}
	if err := o.openDB(ctx); err != nil {
		_ = lock.release()
		return nil, err
	}
	m, journals, err := syncMirror(o.db, stateDir, opts.BackupDelay, opts.now(), opts.Logger)
	if err != nil {
		_ = o.db.Close()
		_ = lock.release()
		return nil, err
	}
	if len(journals) > 0 {
		if err := o.reportJournals(journals); err != nil {
			_ = m.f.Close()
			_ = o.db.Close()
			_ = lock.release()
			return nil, err
		}
	}
	s := &Store{
		stateDir: stateDir,
		opts:     opts,
		log:      opts.Logger,
		lock:     lock,
		recovery: o.recovery,
		db:       o.db,
		watchers: make(map[string]chan struct{}),
		closeSem: make(chan struct{}, 1),
	}
	s.backup = &backupper{stateDir: stateDir, log: s.log, delay: opts.BackupDelay, withDB: s.withDB}
	s.mirror = m
	s.reserve = &reserve{path: s.path(reserveFileName), minFree: opts.MinFreeSpace, log: s.log}
	if free, ok := freeSpace(stateDir); ok {
		s.reserve.ensure(free)
	}
	// Badger allocates its files when it creates them (third_party/
	// ristretto's PATCH.md); one it cannot allocate because another
	// program took the disk gets the reserve's space.
	s.unregisterNoSpace = z.SetNoSpaceHandler(s.path(storeDirName), func() bool {
		released := s.reserve.release()
		if released {
			s.log.Warn("the disk is full; released the store's disk reserve so that Badger can go on writing its tables and logs")
		}
		return released
	})
	s.writer = &writer{
		db: o.db, log: s.log, mirror: m, reserve: s.reserve,
		minFree: opts.MinFreeSpace, storeDir: s.path(storeDirName), stateDir: stateDir,
		committed: s.committed,
	}
	s.mirror.start()
	s.writer.start()
	s.backup.start()
	return s, nil
}

// Recovery implements leasestore.Store: the report Open wrote when it
// restored the store, during this open or an earlier one that no
// successful Close has followed since.
func (s *Store) Recovery() *leasestore.Recovery { return s.recovery }

// CloseRetries implements leasestore.Store.
func (s *Store) CloseRetries() *leasestore.CloseRetries { return s.opts.CloseRetries }

func (s *Store) now() time.Time { return s.opts.now() }

func (s *Store) path(name string) string { return filepath.Join(s.stateDir, name) }

// submit hands run to the writer and waits for its durable result.
func (s *Store) submit(ctx context.Context, what, id string, run func(b *batch) error) error {
	return s.wait(ctx, newOp(what, id, run))
}

// wait queues o and waits for its durable result.
func (s *Store) wait(ctx context.Context, o *op) error {
	if err := s.send(ctx, o); err != nil {
		return err
	}
	<-o.done
	return o.err
}

// send queues ops for the writer, together (see writer.send), refusing new
// writes while a Close is under way or after one succeeded.
func (s *Store) send(ctx context.Context, ops ...*op) error {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return leasestore.ErrClosed
	}
	return s.writer.send(ctx, ops...)
}

// committed is the writer's report of a commit: readers of the sessions it
// touched wake, and a changed record puts the backup behind.
func (s *Store) committed(ids map[string]struct{}, records bool) {
	s.notify(ids)
	if records {
		s.backup.changed()
	}
}

// withDB runs fn on the database unless the store is closed.
func (s *Store) withDB(fn func(db *badger.DB) error) error {
	s.readMu.RLock()
	defer s.readMu.RUnlock()
	if s.db == nil {
		return leasestore.ErrClosed
	}
	return fn(s.db)
}

// view runs fn in a read transaction unless the store is closed.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	return s.withDB(func(db *badger.DB) error { return db.View(fn) })
}

// Close implements leasestore.Store. Calls are serialised: a Close that finds
// another under way waits for it (or for its own ctx) and then returns nil
// if that one succeeded, or makes its own attempt if it failed.
//
// While a Close is under way, writes are refused with leasestore.ErrClosed. A Close
// that fails (a journal handle still would not close) reopens the store for
// writes before it returns, so between a failed Close and its retry the
// store works as before: reads, Tail, lease transitions, appends, new
// journal handles. The handles this Close did close stay closed.
func (s *Store) Close(ctx context.Context) error {
	select {
	case s.closeSem <- struct{}{}:
	default:
		select {
		case s.closeSem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("close lease store: waiting for another Close: %w", ctx.Err())
		}
	}
	defer func() { <-s.closeSem }()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	if err := s.journals.CloseAll(ctx, s.opts.CloseRetries); err != nil {
		s.mu.Lock()
		s.closing = false
		s.mu.Unlock()
		return err
	}
	return s.shutdown(ctx)
}

// shutdown stops the writer and the backup (which writes a last backup if
// one is due) and closes Badger. Only Close calls it, once: the store is
// closed afterwards whatever it reports.
func (s *Store) shutdown(ctx context.Context) error {
	s.writer.shutdown()
	var errs []error
	if err := s.mirror.shutdown(); err != nil {
		errs = append(errs, err)
	}
	if err := s.backup.shutdown(); err != nil {
		errs = append(errs, err)
	}
	s.mu.Lock()
	s.closed = true
	for id, ch := range s.watchers {
		close(ch)
		delete(s.watchers, id)
	}
	s.mu.Unlock()

	if free, ok := freeSpace(s.stateDir); ok && s.opts.MinFreeSpace >= 0 && free < s.opts.MinFreeSpace {
		// Another program took the space the store keeps free: Badger's
		// Close flushes its memtables, and the reserve is the room for it.
		if s.reserve.release() {
			s.log.Warn("the disk is nearly full; released the store's disk reserve so that it can close", "free_bytes", free)
		}
	}
	finished, err := s.closeDB(ctx)
	if !finished {
		// Badger's Close flushes the memtable into a table file and
		// retries that forever when it cannot (a directory made
		// read-only, a full disk): a host must still be able to quit.
		// Every acknowledged write is in Badger's log on disk, which the
		// next open replays. Badger keeps its files and its directory
		// lock until this process exits, and so does this store: its
		// lock is not released, so no second store opens the directory
		// in this process meanwhile.
		errs = append(errs, fmt.Errorf("close badger: it did not finish (%w), most likely because it cannot write to %s (check its permissions and free space); its log on disk holds every acknowledged write, and the next start replays it", ctx.Err(), s.path(storeDirName)))
		return errors.Join(errs...)
	}
	s.unregisterNoSpace()
	if err != nil {
		errs = append(errs, fmt.Errorf("close badger: %w", err))
	}
	if len(errs) == 0 {
		// A host that ran and stopped cleanly has had the restore report
		// (Recovery) all along; only a run that ended otherwise leaves it
		// for the next start.
		if err := os.Remove(s.path(recoveredFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("could not remove the restore report; the next start reports the restore again", "error", err)
		}
	}
	if err := s.lock.release(); err != nil {
		errs = append(errs, fmt.Errorf("unlock state directory: %w", err))
	}
	return errors.Join(errs...)
}

// closeDB closes Badger, waiting for it until ctx ends but at least a short
// grace period; finished is false when it gave up. Reads see a closed
// store either way (the closing goroutine keeps its db).
func (s *Store) closeDB(ctx context.Context) (finished bool, err error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	closed := make(chan error, 1)
	db := s.db
	s.db = nil
	go func() { closed <- db.Close() }()
	// A healthy Badger closes in milliseconds: give it a moment even when
	// the caller's deadline is already spent (a host may have used it up
	// stopping sessions), so that a normal close still releases the lock.
	grace := time.NewTimer(2 * time.Second)
	defer grace.Stop()
	select {
	case err = <-closed:
		return true, err
	case <-grace.C:
	}
	select {
	case err = <-closed:
		return true, err
	case <-ctx.Done():
		return false, nil
	}
}
