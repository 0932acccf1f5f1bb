package leasestore

import (
	"encoding/json"
	"fmt"
)

// recordSchema is the version of the stored session record. A record with a
// newer schema is refused, never rewritten by an older build.
const recordSchema = 1

type storedRecord struct {
	Schema  int     `json:"schema"`
	Session Session `json:"session"`
}

var errBadRecord = fmt.Errorf("%w: malformed session record", ErrDamaged)

// EncodeRecord encodes a session record as the store keeps it.
func EncodeRecord(s Session) ([]byte, error) {
	b, err := json.Marshal(storedRecord{Schema: recordSchema, Session: s})
	if err != nil {
		return nil, fmt.Errorf("encode session record %q: %w", s.ID, err)
	}
	return b, nil
}

// DecodeRecord decodes a stored session record, refusing one written by a
// newer schema or one whose content breaks the lease model's invariants.
func DecodeRecord(b []byte) (Session, error) {
	var r storedRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return Session{}, fmt.Errorf("%w: %v", errBadRecord, err)
	}
	if r.Schema != recordSchema {
		return Session{}, fmt.Errorf("%w: schema %d, this build reads schema %d (was it written by a newer agenthost?)",
			errBadRecord, r.Schema, recordSchema)
	}
	if err := checkInvariants(r.Session); err != nil {
		return Session{}, err
	}
	return r.Session, nil
}

// checkInvariants rejects records whose fields are outside the model. It is
// deliberately no stricter than that: a record that is merely inconsistent
// (say, a reservation that lost its token) must still load, so that the
// probe can answer "indeterminate" for it and the host can latch it, rather
// than the whole store refusing to open.
func checkInvariants(s Session) error {
	l := s.Lease
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: session %q: %s", errBadRecord, s.ID, fmt.Sprintf(format, args...))
	}
	if err := ValidateSessionID(s.ID); err != nil {
		return bad("%v", err)
	}
	switch l.Claim {
	case ClaimReleased, ClaimReserved, ClaimLive, ClaimConflicted:
	default:
		return bad("unknown claim %q", l.Claim)
	}
	switch l.Stage {
	case StageNone, StageProving, StageRecovering, StageManualRecovery:
	default:
		return bad("unknown stage %q", l.Stage)
	}
	if len(s.Handles) > MaxHandleLinks {
		return bad("%d handle links, the limit is %d", len(s.Handles), MaxHandleLinks)
	}
	return nil
}
