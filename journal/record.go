package journal

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/leasestore"
)

// Record is the payload of one journal entry. The set is closed: *Prompt,
// *Update, *Stop and *Lifecycle.
type Record interface {
	// EntryKind is the kind of the entry that carries the record.
	EntryKind() leasestore.EntryKind
	isRecord()
}

// Prompt is the payload of a KindPrompt entry, written before the prompt
// is dispatched to the plugin.
type Prompt struct {
	TurnID string    `json:"turnId"`
	Prompt []Content `json:"prompt"`
}

// Update is the payload of a KindUpdate entry: one agent update. The
// plugin's own sequence number travels along, so a host that restarts
// knows which updates are already journaled.
type Update struct {
	PluginSeq uint64 `json:"pluginSeq"`
	TurnID    string `json:"turnId,omitempty"`
	// PluginTime is when the plugin produced the update (Unix nanoseconds).
	PluginTime int64         `json:"pluginTime,omitempty"`
	Update     SessionUpdate `json:"update"`
}

// Stop is the payload of a KindStop entry: a turn ended. PluginSeq is 0
// when the host wrote it (a prompt it could not dispatch).
type Stop struct {
	PluginSeq  uint64 `json:"pluginSeq,omitempty"`
	TurnID     string `json:"turnId"`
	StopReason string `json:"stopReason"`
	Error      string `json:"error,omitempty"`
	// AuthRequired: the turn failed because the provider refused its
	// credentials (ACP's "auth required").
	AuthRequired bool `json:"authRequired,omitempty"`
}

// Lifecycle is the payload of a KindLifecycle or KindHandle entry: an
// event of the session's lease, which the store writes inside the
// transition that made it.
type Lifecycle struct {
	leasestore.LifecycleEvent
	// Entry is the kind of the entry: KindHandle for the transition that
	// recorded a new provider handle, KindLifecycle (or empty) for every
	// other.
	Entry leasestore.EntryKind `json:"-"`
}

func (*Prompt) EntryKind() leasestore.EntryKind { return leasestore.KindPrompt }
func (*Update) EntryKind() leasestore.EntryKind { return leasestore.KindUpdate }
func (*Stop) EntryKind() leasestore.EntryKind   { return leasestore.KindStop }

func (l *Lifecycle) EntryKind() leasestore.EntryKind {
	if l.Entry == leasestore.KindHandle {
		return leasestore.KindHandle
	}
	return leasestore.KindLifecycle
}

func (*Prompt) isRecord()    {}
func (*Update) isRecord()    {}
func (*Stop) isRecord()      {}
func (*Lifecycle) isRecord() {}

// UnmarshalJSON decodes the update member with DecodeUpdate.
func (u *Update) UnmarshalJSON(b []byte) error {
	var w struct {
		PluginSeq  uint64          `json:"pluginSeq"`
		TurnID     string          `json:"turnId"`
		PluginTime int64           `json:"pluginTime"`
		Update     json.RawMessage `json:"update"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	body, err := DecodeUpdate(w.Update)
	if err != nil {
		return err
	}
	*u = Update{PluginSeq: w.PluginSeq, TurnID: w.TurnID, PluginTime: w.PluginTime, Update: body}
	return nil
}

// ErrUnknownKind is returned by Decode for an entry of a kind it does not
// know.
var ErrUnknownKind = errors.New("journal: unknown entry kind")

// Encode returns the journal entry that records r. It fails only on a
// record that cannot be written: an Update without its update, or content
// or raw tool JSON that is not JSON.
func Encode(r Record) (leasestore.EntryInput, error) {
	if u, ok := r.(*Update); ok && u.Update == nil {
		return leasestore.EntryInput{}, errors.New("journal: encode an update record without its update")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return leasestore.EntryInput{}, fmt.Errorf("journal: encode a %s record: %w", r.EntryKind(), err)
	}
	return leasestore.EntryInput{Kind: r.EntryKind(), Payload: b}, nil
}

// Decode decodes the record an entry carries.
func Decode(e leasestore.Entry) (Record, error) {
	r, err := DecodePayload(e.Kind, e.Payload)
	if err != nil {
		return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
	}
	return r, nil
}

// DecodePayload decodes the payload of an entry of the given kind, as a
// client of the local API receives both in a _agenthost/journal
// notification.
func DecodePayload(kind leasestore.EntryKind, payload []byte) (Record, error) {
	var r Record
	switch kind {
	case leasestore.KindPrompt:
		r = &Prompt{}
	case leasestore.KindUpdate:
		r = &Update{}
	case leasestore.KindStop:
		r = &Stop{}
	case leasestore.KindLifecycle:
		r = &Lifecycle{Entry: leasestore.KindLifecycle}
	case leasestore.KindHandle:
		r = &Lifecycle{Entry: leasestore.KindHandle}
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownKind, kind)
	}
	if err := json.Unmarshal(payload, r); err != nil {
		if errors.Is(err, ErrMalformed) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, kind, err)
	}
	return r, nil
}

// PluginSeq returns the plugin's sequence number an update or stop entry
// records, reading that member alone: a host that resumes a plugin's
// stream must find where it left off even in an entry whose update it
// cannot decode (a kind or a member shape a newer build wrote). ok is
// false for other kinds, for a payload that is not a JSON object with a
// numeric pluginSeq, and for the stops the host wrote itself (seq 0).
func PluginSeq(e leasestore.Entry) (seq uint64, ok bool) {
	if e.Kind != leasestore.KindUpdate && e.Kind != leasestore.KindStop {
		return 0, false
	}
	var p struct {
		PluginSeq uint64 `json:"pluginSeq"`
	}
	if json.Unmarshal(e.Payload, &p) != nil || p.PluginSeq == 0 {
		return 0, false
	}
	return p.PluginSeq, true
}
