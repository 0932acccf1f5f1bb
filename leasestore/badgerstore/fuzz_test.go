package badgerstore

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// FuzzSessionKeys checks the key encoding for any two session ids: keys
// parse back to their id, and no key of one id collides with, or starts
// with the journal prefix of, another id.
func FuzzSessionKeys(f *testing.F) {
	f.Add("a", "a\x00", uint64(1), uint64(2))
	f.Add("a/b", "a", uint64(0), uint64(1<<64-1))
	f.Add("\x00", "\x00\x00", uint64(256), uint64(1))
	f.Add("ab", "a", uint64(0x6200000000000000), uint64(0))
	f.Add(strings.Repeat("é", 200), strings.Repeat("é", 201), uint64(5), uint64(5))
	f.Fuzz(func(t *testing.T, a, b string, seqA, seqB uint64) {
		if leasestore.ValidateSessionID(a) != nil || leasestore.ValidateSessionID(b) != nil {
			return
		}
		for _, id := range []string{a, b} {
			for _, seq := range []uint64{seqA, seqB} {
				gotID, gotSeq, err := parseJournalKey(journalKey(id, seq))
				if err != nil || gotID != id || gotSeq != seq {
					t.Fatalf("journal key of (%q, %d) parses as (%q, %d, %v)", id, seq, gotID, gotSeq, err)
				}
			}
			prefix, gotID, rest, err := parseKey(recordKey(id))
			if err != nil || prefix != prefixRecord || gotID != id || !bytes.Equal(rest, []byte{recordSuffix}) {
				t.Fatalf("record key of %q parses as (%c, %q, %x, %v)", id, prefix, gotID, rest, err)
			}
		}
		if a == b {
			return
		}
		if bytes.Equal(recordKey(a), recordKey(b)) || bytes.Equal(seqKey(a), seqKey(b)) {
			t.Fatalf("record keys of %q and %q collide", a, b)
		}
		if bytes.HasPrefix(journalKey(b, seqB), journalPrefix(a)) || bytes.HasPrefix(journalKey(a, seqA), journalPrefix(b)) {
			t.Fatalf("the journal of one of %q, %q would replay the other's entries", a, b)
		}
		if bytes.HasPrefix(recordKey(b), recordKey(a)[:len(recordKey(a))-1]) {
			t.Fatalf("the record keys of %q and %q share an id prefix", a, b)
		}
	})
}

// FuzzMirrorScan feeds the journal mirror's reader any bytes after a few
// good frames: it never panics, the good frames always come back, and the
// valid length it reports ends on a frame boundary within the input.
func FuzzMirrorScan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0})
	f.Add(appendMirrorFrame(nil, "x", "inc", leasestore.EncodeEntry(leasestore.Entry{Seq: 9, Kind: leasestore.KindUpdate})))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tail []byte) {
		var good []byte
		for seq := uint64(1); seq <= 3; seq++ {
			good = appendMirrorFrame(good, "s\x00/", "inc", leasestore.EncodeEntry(leasestore.Entry{Seq: seq, Fence: seq, Kind: leasestore.KindUpdate, Payload: []byte("p")}))
		}
		input := append(append([]byte(nil), good...), tail...)
		var seqs []uint64
		var ends []int64
		var at int64
		valid, _, err := scanMirror(bytes.NewReader(input), func(fr mirrorFrame) error {
			seqs = append(seqs, fr.Seq)
			at += fr.Size
			ends = append(ends, at)
			if _, err := leasestore.DecodeEntry(fr.Entry); err != nil && len(seqs) <= 3 {
				t.Fatalf("good frame %d: its entry does not decode: %v", len(seqs), err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) < 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
			t.Fatalf("the good frames came back as %v", seqs)
		}
		if valid > int64(len(input)) || valid != ends[len(ends)-1] {
			t.Fatalf("valid length %d, frames end at %v, input is %d bytes", valid, ends, len(input))
		}
	})
}
