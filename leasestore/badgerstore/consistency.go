package badgerstore

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/leasestore"
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
			if rec, err := leasestore.DecodeRecord(value); err != nil || rec.Deleting {
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
