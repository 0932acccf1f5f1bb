package sdk

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/agenthost/agenthost/internal/agentpb"
)

// DefaultOutboxMemory is how many bytes of unacknowledged updates the outbox
// keeps in memory before it spills the oldest to a file.
const DefaultOutboxMemory = 4 << 20

// outbox keeps every update, numbered, until the host acknowledges that it is
// in the journal. A host that dies mid-turn loses nothing: the next host asks
// again from its last journaled seq and the outbox replays the rest. Memory
// is bounded: past memLimit the oldest updates move to a spill file in the
// session directory and are read back from there on replay.
type outbox struct {
	log       hclog.Logger
	spillPath string
	memLimit  int

	mu       sync.Mutex
	next     uint64 // seq of the next update; seqs start at 1
	acked    uint64 // every seq <= acked is durable at the host
	entries  []outboxEntry
	memBytes int
	spill    *os.File
	spillEnd int64
	changed  chan struct{} // closed and replaced on every append and ack
}

type outboxEntry struct {
	seq  uint64
	data []byte // nil once spilled
	off  int64
	n    int
}

func newOutbox(sessionDir string, memLimit int, log hclog.Logger) *outbox {
	if memLimit <= 0 {
		memLimit = DefaultOutboxMemory
	}
	path := ""
	if sessionDir != "" {
		path = filepath.Join(sessionDir, "outbox.spill")
	}
	return &outbox{log: log, spillPath: path, memLimit: memLimit, next: 1, changed: make(chan struct{})}
}

// append numbers u and keeps it. It returns the seq.
func (o *outbox) append(u *agentpb.Update) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	u.Seq = o.next
	o.next++
	data, err := proto.Marshal(u)
	if err != nil {
		// An Update holds only strings and numbers; Marshal cannot fail.
		panic(fmt.Sprintf("sdk: encode update: %v", err))
	}
	o.entries = append(o.entries, outboxEntry{seq: u.Seq, data: data, n: len(data)})
	o.memBytes += len(data)
	if o.memBytes > o.memLimit {
		o.spillOldest()
	}
	o.notify()
	return u.Seq
}

// spillOldest moves in-memory updates, oldest first, to the spill file until
// half the memory budget is free. A spill that fails keeps the updates in
// memory: running out of memory later is better than losing them now.
func (o *outbox) spillOldest() {
	if o.spillPath == "" {
		return
	}
	if o.spill == nil {
		f, err := os.OpenFile(o.spillPath, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			o.log.Error("outbox cannot spill; keeping updates in memory", "error", err)
			o.spillPath = ""
			return
		}
		o.spill, o.spillEnd = f, 0
	}
	for i := range o.entries {
		if o.memBytes <= o.memLimit/2 {
			return
		}
		e := &o.entries[i]
		if e.data == nil {
			continue
		}
		if _, err := o.spill.WriteAt(e.data, o.spillEnd); err != nil {
			o.log.Error("outbox spill write failed; keeping updates in memory", "error", err)
			return
		}
		e.off, e.data = o.spillEnd, nil
		o.spillEnd += int64(e.n)
		o.memBytes -= e.n
	}
}

// read returns up to max updates with seq >= from, and a channel that is
// closed when the outbox changes after this read.
func (o *outbox) read(from uint64, max int) ([]*agentpb.Update, <-chan struct{}, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*agentpb.Update
	for _, e := range o.entries {
		if e.seq < from {
			continue
		}
		if len(out) == max {
			break
		}
		data := e.data
		if data == nil {
			data = make([]byte, e.n)
			if _, err := o.spill.ReadAt(data, e.off); err != nil {
				return nil, nil, fmt.Errorf("read spilled update %d: %w", e.seq, err)
			}
		}
		u := &agentpb.Update{}
		if err := proto.Unmarshal(data, u); err != nil {
			return nil, nil, fmt.Errorf("decode update %d: %w", e.seq, err)
		}
		out = append(out, u)
	}
	return out, o.changed, nil
}

// ack forgets every update with seq <= seq.
func (o *outbox) ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq <= o.acked {
		return
	}
	o.acked = min(seq, o.next-1)
	i := 0
	for i < len(o.entries) && o.entries[i].seq <= o.acked {
		if o.entries[i].data != nil {
			o.memBytes -= o.entries[i].n
		}
		i++
	}
	o.entries = append(o.entries[:0:0], o.entries[i:]...)
	if o.spill != nil && !o.anySpilled() {
		// Nothing left in the file: start it over.
		if err := o.spill.Truncate(0); err == nil {
			o.spillEnd = 0
		}
	}
	o.notify()
}

func (o *outbox) anySpilled() bool {
	for _, e := range o.entries {
		if e.data == nil {
			return true
		}
	}
	return false
}

// lastSeq returns the newest seq produced, 0 before any.
func (o *outbox) lastSeq() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next - 1
}

func (o *outbox) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.spill != nil {
		_ = o.spill.Close()
		_ = os.Remove(o.spillPath)
		o.spill = nil
	}
}
