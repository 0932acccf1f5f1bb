package leasestore

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

func seedEntries() []Entry {
	return []Entry{
		{Seq: 1, Fence: 0, Time: time.Unix(0, 0).UTC(), Kind: KindLifecycle, Payload: []byte(`{"event":"created"}`)},
		{Seq: 1<<64 - 1, Fence: 1<<64 - 1, Time: time.Unix(0, -1).UTC(), Kind: KindUpdate, Payload: nil},
		{Seq: 300, Fence: 7, Time: time.Date(2026, 11, 29, 1, 2, 3, 4, time.UTC), Kind: KindPrompt, Payload: []byte("\x00\xff")},
	}
}

// FuzzEntryCodec feeds arbitrary bytes to the journal entry decoder: it must
// never panic, and whatever it accepts must re-encode to an equal entry.
func FuzzEntryCodec(f *testing.F) {
	for _, e := range seedEntries() {
		f.Add(EncodeEntry(e))
	}
	f.Add([]byte{})
	f.Add([]byte{2, 1, 1, 1})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			return
		}
		again, err := DecodeEntry(EncodeEntry(e))
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if !sameEntry(e, again) {
			t.Fatalf("entry changed across encode/decode: %+v vs %+v", e, again)
		}
	})
}

// FuzzEntryRoundTrip builds entries from arbitrary fields: every entry the
// store can write must decode to itself.
func FuzzEntryRoundTrip(f *testing.F) {
	for _, e := range seedEntries() {
		f.Add(e.Seq, e.Fence, e.Time.UnixNano(), string(e.Kind), e.Payload)
	}
	f.Fuzz(func(t *testing.T, seq, fence uint64, nanos int64, kind string, payload []byte) {
		if kind == "" || len(kind) > maxKindLen || !utf8.ValidString(kind) {
			return
		}
		e := Entry{Seq: seq, Fence: fence, Time: time.Unix(0, nanos).UTC(), Kind: EntryKind(kind), Payload: payload}
		got, err := DecodeEntry(EncodeEntry(e))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !sameEntry(e, got) {
			t.Fatalf("round trip changed %+v into %+v", e, got)
		}
	})
}

func sameEntry(a, b Entry) bool {
	return a.Seq == b.Seq && a.Fence == b.Fence && a.Time.Equal(b.Time) && a.Kind == b.Kind && bytes.Equal(a.Payload, b.Payload)
}

// FuzzDecodeRecord feeds arbitrary bytes to the session record decoder: it
// must never panic, and whatever it accepts must survive a rewrite.
func FuzzDecodeRecord(f *testing.F) {
	seed := Session{ID: "s\x00/1", Agent: "codex", Workspace: "/w", Options: map[string]string{"model": "m"},
		Handles: []HandleLink{{Handle: "thread-1", Origin: HandleCreated, Fence: 1, ObservedAt: time.Unix(1, 0).UTC(), HostID: "host-a"}},
		Lease: Lease{Fence: 1, Claim: ClaimLive, Owner: &ProcessIdentity{HostID: "local", PID: 3, StartTicks: 9, SpawnToken: "t"},
			Reattach: &Reattach{Network: "unix", Address: "/s", ProtocolVersion: 1}}}
	b, err := EncodeRecord(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"schema":2,"session":{}}`))
	f.Add([]byte(`{"schema":1,"session":{"id":"x","lease":{"claim":"borrowed"}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeRecord(b)
		if err != nil {
			return
		}
		enc, err := EncodeRecord(s)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		again, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("a re-encoded record does not decode: %v", err)
		}
		x, _ := json.Marshal(s)
		y, _ := json.Marshal(again)
		if !bytes.Equal(x, y) {
			t.Fatalf("record changed across a rewrite:\n%s\n%s", x, y)
		}
	})
}
