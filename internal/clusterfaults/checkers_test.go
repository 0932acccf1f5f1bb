package clusterfaults

import (
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// The checkers are what the fault test's verdict rests on: each must
// catch the violation it is for, and pass the history that holds.

func TestParseFenceEventsReadsTheHostsLines(t *testing.T) {
	log := "2026-12-02T12:00:00.123Z [INFO]  agenthost: plugin admitted: session=s0 fence=3 pid=1234\n" +
		"2026-12-02T12:00:01.000Z [INFO]  agenthost: session reconciled: session=s1\n" +
		"2026-12-02T12:00:02.500Z [INFO]  plugin gone: session=s0 fence=3 pid=1234 detached=true\n"
	evs, err := parseFenceEvents("h0", []string{log})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !evs[0].admitted || evs[0].fence != 3 || evs[0].session != "s0" || evs[1].admitted || !evs[1].detached {
		t.Fatalf("parsed %+v", evs)
	}
	if got := evs[1].at.Sub(evs[0].at); got != 2377*time.Millisecond {
		t.Fatalf("the lines are %s apart, want 2.377s", got)
	}
	if _, err := parseFenceEvents("h0", []string{"2026-12-02T12:00:00.123Z [INFO]  plugin admitted: fence=3\n"}); err == nil {
		t.Fatal("a fence line without a session was accepted")
	}
}

func at(s float64) time.Time {
	return time.Unix(1_800_000_000, 0).Add(time.Duration(s * float64(time.Second)))
}

func TestIntervalsCatchASecondWriter(t *testing.T) {
	const bound, wait = time.Second, 3 * time.Second
	// h0 runs s0 at fence 1; h1 admits it at fence 2 while h0 still
	// runs it (no fault of h0, no takeover): an overlap.
	evs := []fenceEvent{
		{host: "h0", at: at(0), admitted: true, session: "s0", fence: 1},
		{host: "h1", at: at(5), admitted: true, session: "s0", fence: 2},
	}
	if got := overlaps(first(intervals(evs, nil, nil, bound, wait, at(10)))); len(got) != 1 {
		t.Fatalf("overlaps = %q, want one", got)
	}
	// h0 killed at 3: its plugin fences itself by 4; h1 admits at 5.
	kill := []fault{{host: "h0", kind: faultKill, at: at(3)}}
	if got := overlaps(first(intervals(evs, nil, kill, bound, wait, at(10)))); len(got) != 0 {
		t.Fatalf("a takeover after the self-fence bound: overlaps = %q", got)
	}
	// h0 killed at 4.5: its plugin may run until 5.5, past h1's admission.
	late := []fault{{host: "h0", kind: faultKill, at: at(4.5)}}
	if got := overlaps(first(intervals(evs, nil, late, bound, wait, at(10)))); len(got) != 1 {
		t.Fatalf("a takeover within the self-fence bound: overlaps = %q, want one", got)
	}
	// No fault of h0 (it lost its lease through its etcd member), taken
	// over at 4.5: its plugin fenced by 1.5, and h0 logs its end at 6.
	tks := []takeover{{host: "h1", session: "s0", lost: "h0", at: at(4.5)}}
	gone := append(evs, fenceEvent{host: "h0", at: at(6), session: "s0", fence: 1})
	ivs, stale := intervals(gone, tks, nil, bound, wait, at(10))
	if got := overlaps(ivs); len(got) != 0 || len(stale) != 0 {
		t.Fatalf("overlaps = %q, stale = %q", got, stale)
	}
	// Without its end logged, h0 left a stale plugin.
	if _, stale := intervals(evs, tks, nil, bound, wait, at(10)); len(stale) != 1 {
		t.Fatalf("stale = %q, want h0's plugin at fence 1", stale)
	}
}

func TestIntervalsOfAStoppedHost(t *testing.T) {
	const bound, wait = time.Second, 3 * time.Second
	// h0 stopped at 1, continued at 8; h1 took s0 over at 4.5 and
	// admitted it at 8.5. h0's plugin was fenced from 2 and never runs
	// again: no overlap, h0 logging its end at 9.
	evs := []fenceEvent{
		{host: "h0", at: at(0), admitted: true, session: "s0", fence: 1},
		{host: "h1", at: at(8.5), admitted: true, session: "s0", fence: 3},
		{host: "h0", at: at(9), session: "s0", fence: 1},
	}
	tks := []takeover{{host: "h1", session: "s0", lost: "h0", at: at(4.5)}}
	fs := []fault{{host: "h0", kind: faultStop, at: at(1)}, {host: "h0", kind: faultCont, at: at(8)}}
	ivs, stale := intervals(evs, tks, fs, bound, wait, at(10))
	if got := overlaps(ivs); len(got) != 0 || len(stale) != 0 {
		t.Fatalf("overlaps = %q, stale = %q", got, stale)
	}
	// The takeover in the moment between h0's SIGCONT and its new
	// registration: the same.
	late := []takeover{{host: "h1", session: "s0", lost: "h0", at: at(8.1)}}
	ivs, stale = intervals(evs, late, fs, bound, wait, at(10))
	if got := overlaps(ivs); len(got) != 0 || len(stale) != 0 {
		t.Fatalf("overlaps = %q, stale = %q", got, stale)
	}
	// Had h0 never logged the end of its plugin, it would have left a
	// stale plugin.
	if _, stale := intervals(evs[:2], tks, fs, bound, wait, at(10)); len(stale) != 1 {
		t.Fatalf("stale = %q, want h0's plugin at fence 1", stale)
	}
	// h0 stopped 1–2 (shorter than the TTL): nobody took over, and h0
	// runs s0 on; h1 admitting it at 8.5 is a second writer.
	short := []fault{{host: "h0", kind: faultStop, at: at(1)}, {host: "h0", kind: faultCont, at: at(2)}}
	if got := overlaps(first(intervals(evs[:2], nil, short, bound, wait, at(10)))); len(got) != 1 {
		t.Fatalf("overlaps = %q, want one", got)
	}
}

func TestFenceOrderCatchesAReusedOrOlderFence(t *testing.T) {
	evs := []fenceEvent{
		{host: "h0", at: at(0), admitted: true, session: "s0", fence: 2},
		{host: "h1", at: at(5), admitted: true, session: "s0", fence: 2},
		{host: "h0", at: at(6), admitted: true, session: "s1", fence: 4},
		{host: "h1", at: at(7), admitted: true, session: "s1", fence: 3},
		{host: "h1", at: at(8), admitted: true, session: "s2", fence: 1},
		{host: "h0", at: at(9), admitted: true, session: "s2", fence: 2},
	}
	got := fenceOrder(evs)
	if len(got) != 3 || !strings.Contains(strings.Join(got, "\n"), "fence 2 admitted by host h0 and by host h1") {
		t.Fatalf("fenceOrder = %q, want the reused fence of s0 and the older fence of s1 (twice: reused order)", got)
	}
}

func TestCheckJournalCatchesDuplicatesLossAndOldFences(t *testing.T) {
	up := func(seq, fence uint64, text string) leasestore.Entry {
		return leasestore.Entry{Seq: seq, Fence: fence, Kind: leasestore.KindUpdate,
			Payload: []byte(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}}`)}
	}
	good := []leasestore.Entry{up(1, 1, "jepsen s0 n1"), up(2, 2, "jepsen s0 n2")}
	if got := checkJournal("s0", good, map[string]bool{"jepsen s0 n1": true, "jepsen s0 n2": true}); len(got) != 0 {
		t.Fatalf("a journal that holds: %q", got)
	}
	for name, tc := range map[string]struct {
		es    []leasestore.Entry
		acked map[string]bool
	}{
		"seq twice":    {[]leasestore.Entry{up(1, 1, "jepsen s0 n1"), up(1, 1, "jepsen s0 n2")}, nil},
		"echo twice":   {[]leasestore.Entry{up(1, 1, "jepsen s0 n1"), up(2, 2, "jepsen s0 n1")}, nil},
		"fence back":   {[]leasestore.Entry{up(1, 2, "jepsen s0 n1"), up(2, 1, "jepsen s0 n2")}, nil},
		"acked absent": {good, map[string]bool{"jepsen s0 n3": true}},
	} {
		if got := checkJournal("s0", tc.es, tc.acked); len(got) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func TestParseTakeoversReadsTheHostsLines(t *testing.T) {
	log := "2026-12-02T12:00:03.500Z [INFO]  agenthost: took over a lost host's session: session=s2 host=h0 fence=4 observed=2026-12-02T12:00:02Z\n"
	got, err := parseTakeovers("h1", []string{log})
	if err != nil || len(got) != 1 || got[0].session != "s2" || got[0].lost != "h0" || got[0].host != "h1" {
		t.Fatalf("parseTakeovers = %+v, %v", got, err)
	}
}

func first(ivs []interval, _ []string) []interval { return ivs }
