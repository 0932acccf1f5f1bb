package leasestore

import (
	"crypto/rand"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxSessionIDLen bounds a session id in bytes, so that every backend can
// embed an id in its keys (Badger's are limited to 65000 bytes) with a wide
// margin.
const MaxSessionIDLen = 16 << 10

// ValidateSessionID checks that id can be stored and round-trips: non-empty,
// valid UTF-8 (it travels in JSON), and at most MaxSessionIDLen bytes. NUL and
// every other code point are allowed.
func ValidateSessionID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty session id", ErrInvalidArgument)
	case len(id) > MaxSessionIDLen:
		return fmt.Errorf("%w: session id is %d bytes, the limit is %d", ErrInvalidArgument, len(id), MaxSessionIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: session id is not valid UTF-8 (it must survive JSON)", ErrInvalidArgument)
	}
	return nil
}

// Prepare returns spec as Create stores it: an empty ID is replaced by a
// generated UUIDv7 (so generated ids sort by creation), and the id and the
// agent name are checked (ErrInvalidArgument). A backend calls it once per
// Create, before its transaction, so that a retried transaction keeps the
// id.
func (spec SessionSpec) Prepare() (SessionSpec, error) {
	if spec.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return SessionSpec{}, fmt.Errorf("generate session id: %w", err)
		}
		spec.ID = u.String()
	}
	if err := ValidateSessionID(spec.ID); err != nil {
		return SessionSpec{}, err
	}
	if spec.Agent == "" {
		return SessionSpec{}, fmt.Errorf("%w: a session needs an agent name", ErrInvalidArgument)
	}
	return spec, nil
}

// NewSession returns the record Create writes for a prepared spec at now
// (a released lease at fence 0 and a fresh incarnation) and the journal
// entry that records the creation, the journal's first.
func NewSession(spec SessionSpec, now time.Time) (Session, EntryInput) {
	s := Session{
		ID: spec.ID, Agent: spec.Agent, Workspace: spec.Workspace, Options: spec.Options, MCPServers: spec.MCPServers,
		Lease:       Lease{Claim: ClaimReleased},
		Incarnation: rand.Text(),
		CreatedAt:   now, UpdatedAt: now,
	}
	return s, LifecycleEntry(s, LifecycleEvent{Event: "created"})
}
