package badgerstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

// backupper keeps the backup of session records (store.backup) behind the
// store: every committed batch that changed a record marks it behind, and
// its goroutine rewrites it after BackupDelay, coalescing the changes made
// meanwhile into one write. It owns that goroutine: start runs it, shutdown
// ends it and writes a last backup if one is due. Appends alone do not
// make it behind: the backup holds records and journal positions, the
// journal mirror (mirror.go) the entries, and a restore jumps every
// position by leasestore.RestoredSeqGap past what the two knew.
type backupper struct {
	stateDir string
	log      hclog.Logger
	delay    time.Duration
	// withDB runs fn on the open database, or fails with
	// leasestore.ErrClosed once the store closed it.
	withDB func(fn func(db *badger.DB) error) error

	mu      sync.Mutex    // serialises backup writes
	gen     atomic.Uint64 // bumped by every committed batch that changed a record
	written atomic.Uint64 // gen the last backup captured

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func (b *backupper) start() {
	b.kick = make(chan struct{}, 1)
	b.stop = make(chan struct{})
	b.done = make(chan struct{})
	go b.run()
}

// changed marks the backup behind a committed record change and wakes the
// goroutine.
func (b *backupper) changed() {
	b.gen.Add(1)
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// current reports whether the backup holds every committed record change.
func (b *backupper) current() bool { return b.gen.Load() == b.written.Load() }

// shutdown ends the goroutine and writes a last backup if one is due. The
// database must still be open.
func (b *backupper) shutdown() error {
	close(b.stop)
	<-b.done
	if b.current() {
		return nil
	}
	return b.write()
}

func (b *backupper) run() {
	defer close(b.done)
	for {
		select {
		case <-b.kick:
		case <-b.stop:
			return
		}
		t := time.NewTimer(b.delay)
		select {
		case <-t.C:
		case <-b.stop:
			t.Stop()
			return // shutdown writes the last backup itself
		}
		if err := b.write(); err != nil {
			b.log.Error("backup of session records failed; retrying after the next lease change", "error", err)
		}
	}
}

// write replaces the backup with the current session records. Delete calls
// it from its caller's goroutine, which a concurrent Close may race: it
// reads the database only while it is open.
func (b *backupper) write() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.withDB(func(db *badger.DB) error {
		gen := b.gen.Load()
		if err := writeBackupOf(db, b.stateDir, b.log); err != nil {
			return err
		}
		b.written.Store(gen)
		return nil
	})
}

// writeBackupOf replaces the backup in stateDir atomically with a Badger
// backup stream of db's session records and journal positions (the 'r' key
// prefix). A db without a single session record never replaces an existing
// backup: an empty store is far more often one that lost its content (an
// interrupted restore, a store directory gone missing) than one whose every
// session was deleted, and the old backup is the only copy of the sessions.
func writeBackupOf(db *badger.DB, stateDir string, log hclog.Logger) error {
	path := filepath.Join(stateDir, backupFileName)
	var empty bool
	if err := db.View(func(txn *badger.Txn) error { empty = len(recordIDs(txn, 1)) == 0; return nil }); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if empty && pathExists(path) {
		log.Warn("the store holds no session; keeping the existing backup rather than replacing it with an empty one", "backup", path)
		return nil
	}
	err := writeFileAtomic(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		if err := db.View(func(txn *badger.Txn) error { return backupRecords(txn, bw) }); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	return nil
}

// backupRecords writes the newest version of every 'r' key (session
// records and journal positions) in the format Badger's Stream.Backup
// writes and DB.Load reads: blocks of a little-endian uint64 length and a
// protobuf KVList. Badger's own Stream allocates and clears a 32 MiB
// buffer per run, which made every lease change cost ~10 ms of CPU and a
// 32 MiB RSS spike; a store of a few hundred records needs a few KiB.
func backupRecords(txn *badger.Txn, w io.Writer) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}, PrefetchValues: false})
	defer it.Close()
	var list pb.KVList
	size := 0
	flush := func() error {
		if len(list.Kv) == 0 {
			return nil
		}
		b, err := proto.Marshal(&list)
		if err != nil {
			return err
		}
		if err := binary.Write(w, binary.LittleEndian, uint64(len(b))); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		list.Kv, size = list.Kv[:0], 0
		return nil
	}
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		value, err := item.ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("read %x: %w", item.Key(), err)
		}
		list.Kv = append(list.Kv, &pb.KV{
			Key: item.KeyCopy(nil), Value: value, Version: item.Version(),
			UserMeta: []byte{item.UserMeta()}, ExpiresAt: item.ExpiresAt(),
		})
		if size += len(value) + len(item.Key()); size >= 1<<20 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// readBackup reads a Badger backup stream (what Stream.Backup writes and
// DB.Load reads: a little-endian uint64 length, then a protobuf KVList,
// repeated) into the newest value of each key.
func readBackup(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	out := map[string][]byte{}
	versions := map[string]uint64{}
	for {
		var size uint64
		if err := binary.Read(r, binary.LittleEndian, &size); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("read backup %s: %w", path, err)
		}
		if size > 1<<30 {
			return nil, fmt.Errorf("read backup %s: a %d-byte block is not a backup's", path, size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("read backup %s: %w", path, err)
		}
		var list pb.KVList
		if err := proto.Unmarshal(buf, &list); err != nil {
			return nil, fmt.Errorf("read backup %s: %w", path, err)
		}
		for _, kv := range list.Kv {
			k := string(kv.Key)
			if v, seen := versions[k]; !seen || kv.Version >= v {
				versions[k], out[k] = kv.Version, kv.Value
			}
		}
	}
}
