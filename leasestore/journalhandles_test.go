package leasestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// flakyJournal is a Journal whose first fails Closes fail.
type flakyJournal struct {
	leasestore.Journal
	name          string
	fails, closes int
}

func (j *flakyJournal) Name() string { return j.name }

func (j *flakyJournal) Close(context.Context) error {
	j.closes++
	if j.fails > 0 {
		j.fails--
		return errors.New("not yet")
	}
	return nil
}

// A handle closed by its owner is forgotten; the ones left are closed by
// CloseAll, and one that would not close is named, kept and closed by the
// next CloseAll.
func TestJournalHandlesCloseWhatNobodyClosed(t *testing.T) {
	ctx := context.Background()
	var reg leasestore.JournalHandles
	retries := &leasestore.CloseRetries{}
	closed, left, stuck := &flakyJournal{name: "closed"}, &flakyJournal{name: "left"}, &flakyJournal{name: "stuck", fails: 2}
	h := reg.Track(closed)
	reg.Track(left)
	reg.Track(stuck)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := reg.CloseAll(ctx, retries)
	if err == nil || !strings.Contains(err.Error(), `"stuck"`) || strings.Contains(err.Error(), `"left"`) {
		t.Fatalf("CloseAll with a handle that would not close: %v, want it named alone", err)
	}
	if closed.closes != 1 || left.closes != 1 {
		t.Errorf("closes: the owner-closed handle %d, the left one %d; want 1 each", closed.closes, left.closes)
	}
	if err := reg.CloseAll(ctx, retries); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if stuck.closes != 3 || left.closes != 1 || len(retries.Pending()) != 0 {
		t.Errorf("after the retry: stuck closed %d times (want 3), left %d (want 1), pending %q", stuck.closes, left.closes, retries.Pending())
	}
}
