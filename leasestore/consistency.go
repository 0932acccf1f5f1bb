package leasestore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"google.golang.org/protobuf/proto"
)

// checkAgainstBackup compares a store that opened with its backup, and
// describes what the store lost: a session the backup holds alive (not
// Deleting) that the store lacks, or a journal position behind the one the
// backup recorded. Neither happens to a healthy store: sessions leave only
// through Delete, which records Deleting in the backup before the record
// goes, and journal positions only grow. Badger, though, opens some damage
// silently: a MANIFEST cut short reads as a torn last write, and the tables
// its lost part listed are dropped (and deleted) without an error. The
// backup is the only witness of what was there. An empty description means
// nothing is missing; no backup means nothing to compare. A record the store
// cannot read counts as damage too; an error is only returned for a backup
// that cannot be read, which cannot testify either way.
func checkAgainstBackup(db *badger.DB, path string) (string, error) {
	backup, err := readBackup(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var lost, behind, unreadable []string
	err = db.View(func(txn *badger.Txn) error {
		for key, value := range backup {
			prefix, id, rest, err := parseKey([]byte(key))
			if err != nil || prefix != prefixRecord || len(rest) != 1 || rest[0] != recordSuffix {
				continue
			}
			if rec, err := DecodeRecord(value); err != nil || rec.Deleting {
				continue
			}
			switch _, err := txn.Get([]byte(key)); {
			case errors.Is(err, badger.ErrKeyNotFound):
				lost = append(lost, fmt.Sprintf("%q", id))
				continue
			case err != nil:
				// The store cannot read a record it should hold: that
				// is damage, not a backup problem.
				unreadable = append(unreadable, fmt.Sprintf("%q (%v)", id, err))
				continue
			}
			raw, ok := backup[string(seqKey(id))]
			if !ok {
				continue
			}
			want, err := decodeSeq(raw)
			if err != nil {
				continue
			}
			have, err := readLastSeq(txn, id)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("the journal position of %q (%v)", id, err))
				continue
			}
			if have < want {
				behind = append(behind, fmt.Sprintf("%q at %d (the backup saw %d)", id, have, want))
			}
		}
		return nil
	})
	if err != nil {
		return "reading its records failed: " + err.Error(), nil
	}
	slices.Sort(lost)
	slices.Sort(behind)
	var parts []string
	if len(lost) > 0 {
		parts = append(parts, fmt.Sprintf("%d session(s) its backup holds are missing: %s", len(lost), abbreviate(lost)))
	}
	if len(behind) > 0 {
		parts = append(parts, fmt.Sprintf("%d journal(s) are behind their backed-up position: %s", len(behind), abbreviate(behind)))
	}
	if len(unreadable) > 0 {
		slices.Sort(unreadable)
		parts = append(parts, fmt.Sprintf("%d record(s) cannot be read: %s", len(unreadable), abbreviate(unreadable)))
	}
	return strings.Join(parts, "; "), nil
}

func abbreviate(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
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
