package sdk

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/agentpb"
)

func chunk(i int) *agentpb.Update {
	return &agentpb.Update{Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{
		Content: &agentpb.ContentBlock{Type: "text", Text: fmt.Sprintf("update %04d", i)}}}}
}

func readAll(t *testing.T, o *outbox, from uint64) []*agentpb.Update {
	t.Helper()
	var out []*agentpb.Update
	for {
		batch, _, err := o.read(from, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, batch...)
		if len(batch) < 100 {
			return out
		}
		from = batch[len(batch)-1].Seq + 1
	}
}

func TestOutboxKeepsEverythingUntilAcknowledgedAndSpills(t *testing.T) {
	dir := t.TempDir()
	o := newOutbox(dir, 2048, hclog.NewNullLogger())
	defer o.close()
	const n = 1000
	for i := 1; i <= n; i++ {
		if seq := o.append(chunk(i)); seq != uint64(i) {
			t.Fatalf("update %d got seq %d", i, seq)
		}
	}
	if o.memBytes > 2048 {
		t.Errorf("%d bytes in memory, the budget is 2048", o.memBytes)
	}
	spill, err := os.Stat(filepath.Join(dir, "outbox.spill"))
	if err != nil || spill.Size() == 0 {
		t.Fatalf("nothing spilled: %v", err)
	}
	got := readAll(t, o, 1)
	if len(got) != n {
		t.Fatalf("replay returned %d updates, want %d", len(got), n)
	}
	for i, u := range got {
		if u.Seq != uint64(i+1) || u.GetAgentMessageChunk().GetContent().GetText() != fmt.Sprintf("update %04d", i+1) {
			t.Fatalf("replayed update %d: seq %d %q", i, u.Seq, u.GetAgentMessageChunk().GetContent().GetText())
		}
	}
	o.ack(600)
	if rest := readAll(t, o, 1); len(rest) != n-600 || rest[0].Seq != 601 {
		t.Fatalf("after ack 600: %d updates from seq %d", len(rest), rest[0].Seq)
	}
	o.ack(n)
	if rest := readAll(t, o, 1); len(rest) != 0 {
		t.Fatalf("after acking everything: %d updates left", len(rest))
	}
	if spill, err := os.Stat(filepath.Join(dir, "outbox.spill")); err != nil || spill.Size() != 0 {
		t.Errorf("the spill file was not emptied once everything was acknowledged: %v, %d bytes", err, spill.Size())
	}
	if o.append(chunk(n+1)) != n+1 {
		t.Error("numbering did not continue after acknowledgements")
	}
}

func TestOutboxWithoutSessionDirKeepsUpdatesInMemory(t *testing.T) {
	o := newOutbox("", 64, hclog.NewNullLogger())
	defer o.close()
	for i := 1; i <= 50; i++ {
		o.append(chunk(i))
	}
	if got := readAll(t, o, 25); len(got) != 26 || got[0].Seq != 25 {
		t.Fatalf("read from 25: %d updates", len(got))
	}
}

func TestOutboxReadSignalsChanges(t *testing.T) {
	o := newOutbox("", 0, hclog.NewNullLogger())
	_, changed, err := o.read(1, 10)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("changed before anything happened")
	default:
	}
	o.append(chunk(1))
	select {
	case <-changed:
	default:
		t.Fatal("an append did not signal readers")
	}
}
