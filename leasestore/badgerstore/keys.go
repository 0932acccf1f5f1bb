package badgerstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/leasestore"
)

// Key layout. Session ids are opaque (see leasestore.ValidateSessionID), so
// no byte of an id may act as a separator: every key embeds the id
// length-prefixed (uvarint length, then the bytes). Uvarints are a prefix-free code, so no id's keys can collide
// with, or be a prefix of, another id's keys — NUL, '/', 0xff and ids that
// are prefixes of each other included.
//
//	'r' lp(id) 0x00           session record (JSON)
//	'r' lp(id) 0x01           last journal seq (8 bytes big-endian)
//	'j' lp(id) seq(8 BE)      journal entry (leasestore.EncodeEntry)
//	'p' lp(id) 0x00           provider state: its description (JSON, see stateMeta)
//	'p' lp(id) 0x01 gen(8 BE) chunk(4 BE)
//	                          provider state: one chunk of its data (see providerstate.go)
//
// Provider state has a prefix of its own, outside 'r', so that neither the
// backup nor the consistency check ever reads it: it may be 64 MiB a
// session, and a restore from backup goes on without it.
//
// Record and seq keys share the 'r' prefix so that one prefix stream backs
// up both: a store restored from backup continues numbering after the last
// seq it knew instead of reusing numbers a client has already seen.
const (
	prefixRecord  = 'r'
	prefixJournal = 'j'
	prefixState   = 'p'

	recordSuffix = 0x00
	seqSuffix    = 0x01

	stateMetaSuffix  = 0x00
	stateChunkSuffix = 0x01
)

func appendID(b []byte, prefix byte, id string) []byte {
	b = append(b, prefix)
	b = binary.AppendUvarint(b, uint64(len(id)))
	return append(b, id...)
}

func recordKey(id string) []byte {
	return append(appendID(make([]byte, 0, len(id)+8), prefixRecord, id), recordSuffix)
}

func seqKey(id string) []byte {
	return append(appendID(make([]byte, 0, len(id)+8), prefixRecord, id), seqSuffix)
}

// journalPrefix is the prefix of every journal key of id and of no other
// id's keys.
func journalPrefix(id string) []byte {
	return appendID(make([]byte, 0, len(id)+16), prefixJournal, id)
}

// statePrefix is the prefix of every provider state key of id and of no
// other id's keys.
func statePrefix(id string) []byte {
	return appendID(make([]byte, 0, len(id)+24), prefixState, id)
}

func stateMetaKey(id string) []byte { return append(statePrefix(id), stateMetaSuffix) }

// stateChunkPrefix is the prefix of every chunk of id's provider states.
func stateChunkPrefix(id string) []byte { return append(statePrefix(id), stateChunkSuffix) }

func stateChunkKey(id string, gen uint64, chunk uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(stateChunkPrefix(id), gen), chunk)
}

// parseStateChunkKey returns the generation of a chunk key of id.
func parseStateChunkKey(id string, key []byte) (gen uint64, ok bool) {
	prefix, kid, rest, err := parseKey(key)
	if err != nil || prefix != prefixState || kid != id || len(rest) != 13 || rest[0] != stateChunkSuffix {
		return 0, false
	}
	return binary.BigEndian.Uint64(rest[1:9]), true
}

func journalKey(id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(journalPrefix(id), seq)
}

var errBadKey = errors.New("malformed store key")

// parseKey splits any store key into its prefix, session id and the bytes
// after the id.
func parseKey(key []byte) (prefix byte, id string, rest []byte, err error) {
	if len(key) < 2 {
		return 0, "", nil, errBadKey
	}
	n, w := binary.Uvarint(key[1:])
	if w <= 0 || n > uint64(len(key)-1-w) {
		return 0, "", nil, errBadKey
	}
	start := 1 + w
	return key[0], string(key[start : start+int(n)]), key[start+int(n):], nil
}

// parseJournalKey returns the session id and seq of a journal key.
func parseJournalKey(key []byte) (id string, seq uint64, err error) {
	prefix, id, rest, err := parseKey(key)
	if err != nil || prefix != prefixJournal || len(rest) != 8 {
		return "", 0, errBadKey
	}
	return id, binary.BigEndian.Uint64(rest), nil
}

func encodeSeq(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

func decodeSeq(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: journal position is %d bytes", leasestore.ErrDamaged, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
