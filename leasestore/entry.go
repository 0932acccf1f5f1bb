package leasestore

import (
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"
)

// EntryKind says what a journal entry records.
type EntryKind string

const (
	// KindLifecycle: a lease transition or another host-side event.
	KindLifecycle EntryKind = "lifecycle"
	// KindPrompt: a prompt, written durably before it is dispatched.
	KindPrompt EntryKind = "prompt"
	// KindUpdate: an agent update (message chunk, tool call, plan, usage…).
	KindUpdate EntryKind = "update"
	// KindHandle: the provider handle changed.
	KindHandle EntryKind = "handle"
	// KindStop: a turn or the session stopped, with its reason.
	KindStop EntryKind = "stop"
)

// Valid reports whether k is one of the kinds a writer may append.
func (k EntryKind) Valid() bool {
	switch k {
	case KindLifecycle, KindPrompt, KindUpdate, KindHandle, KindStop:
		return true
	}
	return false
}

// MaxPayloadSize bounds one entry's payload, so that every backend can hold
// an entry in one value (the Badger backend keeps entries below its value
// threshold, so its value log is never used); a plugin that produces larger
// updates must truncate or summarise them.
const MaxPayloadSize = 1<<20 - 1<<10

// maxKindLen bounds a stored kind name; it keeps a damaged length field from
// turning into a huge allocation.
const maxKindLen = 64

// Entry is one journal record. Seq numbers start at 1 and have no gaps
// within a session; Fence is the lease fence the writer held.
type Entry struct {
	Seq     uint64
	Fence   uint64
	Time    time.Time
	Kind    EntryKind
	Payload []byte
}

// EntryInput is an entry before the store numbers and stamps it.
type EntryInput struct {
	Kind    EntryKind
	Payload []byte
}

// Validate checks that a writer may append in: a known kind and a payload
// within MaxPayloadSize (ErrInvalidArgument). Append refuses a batch with
// one invalid entry whole, before writing any.
func (in EntryInput) Validate() error {
	if !in.Kind.Valid() {
		return fmt.Errorf("%w: unknown journal entry kind %q", ErrInvalidArgument, in.Kind)
	}
	if len(in.Payload) > MaxPayloadSize {
		return fmt.Errorf("%w: journal entry payload is %d bytes, the limit is %d; truncate or summarise it",
			ErrInvalidArgument, len(in.Payload), MaxPayloadSize)
	}
	return nil
}

// entryCodecVersion is the first byte of every encoded entry; a store that
// finds a newer version refuses to decode rather than guess.
const entryCodecVersion = 1

// errBadEntry is wrapped by every decoding failure.
var errBadEntry = fmt.Errorf("%w: malformed journal entry", ErrDamaged)

// EncodeEntry encodes e in the journal's binary format, the one a backend
// stores:
//
//	version:1 | seq:uvarint | fence:uvarint | unix-nanos:varint | len(kind):uvarint | kind | payload
func EncodeEntry(e Entry) []byte {
	buf := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+len(e.Kind)+len(e.Payload))
	buf = append(buf, entryCodecVersion)
	buf = binary.AppendUvarint(buf, e.Seq)
	buf = binary.AppendUvarint(buf, e.Fence)
	buf = binary.AppendVarint(buf, e.Time.UnixNano())
	buf = binary.AppendUvarint(buf, uint64(len(e.Kind)))
	buf = append(buf, e.Kind...)
	return append(buf, e.Payload...)
}

// DecodeEntry decodes what EncodeEntry produced. It never panics on damaged
// input: every failure is an error naming what was wrong. The payload is
// copied, so the caller may reuse b.
func DecodeEntry(b []byte) (Entry, error) {
	if len(b) == 0 {
		return Entry{}, fmt.Errorf("%w: empty", errBadEntry)
	}
	if b[0] != entryCodecVersion {
		return Entry{}, fmt.Errorf("%w: codec version %d, this build reads %d", errBadEntry, b[0], entryCodecVersion)
	}
	r := b[1:]
	next := func(field string) (uint64, error) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, fmt.Errorf("%w: bad %s", errBadEntry, field)
		}
		r = r[n:]
		return v, nil
	}
	var e Entry
	var err error
	if e.Seq, err = next("seq"); err != nil {
		return Entry{}, err
	}
	if e.Fence, err = next("fence"); err != nil {
		return Entry{}, err
	}
	nanos, n := binary.Varint(r)
	if n <= 0 {
		return Entry{}, fmt.Errorf("%w: bad time", errBadEntry)
	}
	r = r[n:]
	e.Time = time.Unix(0, nanos).UTC()
	kindLen, err := next("kind length")
	if err != nil {
		return Entry{}, err
	}
	if kindLen > maxKindLen || kindLen > uint64(len(r)) {
		return Entry{}, fmt.Errorf("%w: kind length %d", errBadEntry, kindLen)
	}
	kind := r[:kindLen]
	if kindLen == 0 || !utf8.Valid(kind) {
		return Entry{}, fmt.Errorf("%w: kind is not a name", errBadEntry)
	}
	e.Kind = EntryKind(kind)
	e.Payload = append([]byte(nil), r[kindLen:]...)
	return e, nil
}
