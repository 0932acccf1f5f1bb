package clusterfaults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// fenceEvent is a "plugin admitted" or "plugin gone" line of a host's log.
type fenceEvent struct {
	host     string
	life     int // which serve process of the host logged it
	at       time.Time
	admitted bool // false: gone
	session  string
	fence    uint64
	detached bool
}

// fenceLine matches hclog's text format, as serve writes it:
//
//	2026-12-02T12:00:00.123Z [INFO]  host: plugin admitted: session=s0 fence=3 pid=1234
var fenceLine = regexp.MustCompile(`^(\S+) \[INFO\]\s+(?:[\w.-]+: )*plugin (admitted|gone): (.*)$`)

// hclogTime is hclog's default time format.
const hclogTime = "2006-01-02T15:04:05.000Z0700"

// parseFenceEvents reads the fence lines of one host's logs (one per life).
func parseFenceEvents(hostID string, logs []string) ([]fenceEvent, error) {
	var out []fenceEvent
	for life, log := range logs {
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := fenceLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			at, err := time.Parse(hclogTime, m[1])
			if err != nil {
				return nil, fmt.Errorf("host %s: time of %q: %w", hostID, sc.Text(), err)
			}
			ev := fenceEvent{host: hostID, life: life, at: at, admitted: m[2] == "admitted"}
			for _, kv := range strings.Fields(m[3]) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "session":
					ev.session = v
				case "fence":
					ev.fence, err = strconv.ParseUint(v, 10, 64)
				case "detached":
					ev.detached = v == "true"
				}
				if err != nil {
					return nil, fmt.Errorf("host %s: %q: %w", hostID, sc.Text(), err)
				}
			}
			if ev.session == "" || ev.fence == 0 {
				return nil, fmt.Errorf("host %s: fence line without session or fence: %q", hostID, sc.Text())
			}
			out = append(out, ev)
		}
	}
	return out, nil
}

// takeover is a host's "took over a lost host's session" line: the
// fenced transaction that released a lost host's session for any host to
// resume.
type takeover struct {
	host, session, lost string
	at                  time.Time
}

var takeoverLine = regexp.MustCompile(`^(\S+) \[INFO\]\s+(?:[\w.-]+: )*took over a lost host's session: (.*)$`)

// parseTakeovers reads the takeover lines of one host's logs.
func parseTakeovers(hostID string, logs []string) ([]takeover, error) {
	var out []takeover
	for _, log := range logs {
		for _, line := range strings.Split(log, "\n") {
			m := takeoverLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			at, err := time.Parse(hclogTime, m[1])
			if err != nil {
				return nil, fmt.Errorf("host %s: time of %q: %w", hostID, line, err)
			}
			tk := takeover{host: hostID, at: at}
			for _, kv := range strings.Fields(m[2]) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "session":
					tk.session = v
				case "host":
					tk.lost = v
				}
			}
			out = append(out, tk)
		}
	}
	return out, nil
}

// faultKind is what was done to a process.
type faultKind string

const (
	faultKill faultKind = "SIGKILL"
	faultStop faultKind = "SIGSTOP"
	faultCont faultKind = "SIGCONT"
	faultUp   faultKind = "restart"
)

// fault is one signal sent to a host (or a restart of one).
type fault struct {
	host string
	kind faultKind
	at   time.Time
}

// interval is a span in which a host ran a plugin of a session at a fence.
type interval struct {
	host      string
	session   string
	fence     uint64
	from, to  time.Time
	open      bool // no end known yet (the host runs it now)
	suspended bool // the host is stopped: [from, to] is over, and it may run on at SIGCONT
}

// intervals builds every host's writer intervals from its fence lines, the
// takeovers the hosts logged and the faults sent to them:
//
//   - "plugin admitted" opens an interval, "plugin gone" closes it (plus
//     bound when the host only let go of the plugin: it runs on until it
//     fences itself);
//   - a SIGKILL of the host closes its intervals at the kill plus bound,
//     the self-fence bound of a plugin that hears no heartbeat;
//   - a SIGSTOP suspends them the same way, and the SIGCONT resumes them
//     (the host heartbeats its plugins again if it is still live);
//   - a takeover of a session from a host closes that host's interval of
//     it at the takeover less wait (the liveness TTL plus the drift
//     margin): the taker waited that long since it saw the host's lease
//     expire, and a host whose lease expired sent its plugins no
//     heartbeat since (its membership was not valid), so they had fenced
//     themselves by then. A host must then stop that plugin and log its
//     end; stale lists those that never did.
//
// now closes what still runs.
func intervals(events []fenceEvent, tks []takeover, faults []fault, bound, wait time.Duration, now time.Time) (done []interval, stale []string) {
	type key struct {
		host, session string
		fence         uint64
	}
	type item struct {
		at    time.Time
		ev    *fenceEvent
		tk    *takeover
		fault *fault
	}
	var items []item
	for i := range events {
		items = append(items, item{at: events[i].at, ev: &events[i]})
	}
	for i := range tks {
		items = append(items, item{at: tks[i].at, tk: &tks[i]})
	}
	for i := range faults {
		items = append(items, item{at: faults[i].at, fault: &faults[i]})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].at.Before(items[j].at) })
	open := map[key]*interval{}      // running now (or suspended: host stopped)
	takenOver := map[key]*interval{} // taken over, the host's end not logged yet
	closeAt := func(k key, iv *interval, to time.Time) {
		if !iv.suspended && to.After(iv.from) {
			iv.to, iv.open = to, false
			done = append(done, *iv)
		}
		delete(open, k)
	}
	for _, it := range items {
		switch {
		case it.ev != nil && it.ev.admitted:
			e := it.ev
			k := key{e.host, e.session, e.fence}
			if iv, ok := open[k]; ok && !iv.suspended {
				continue
			}
			open[k] = &interval{host: e.host, session: e.session, fence: e.fence, from: e.at, open: true}
		case it.ev != nil:
			e := it.ev
			k := key{e.host, e.session, e.fence}
			delete(takenOver, k)
			if iv, ok := open[k]; ok {
				to := e.at
				if e.detached {
					to = e.at.Add(bound)
				}
				closeAt(k, iv, to)
			}
		case it.tk != nil:
			tk := it.tk
			for k, iv := range open {
				if k.host == tk.lost && k.session == tk.session {
					closeAt(k, iv, tk.at.Add(-wait))
					takenOver[k] = iv
				}
			}
		default:
			f := it.fault
			for k, iv := range open {
				if k.host != f.host {
					continue
				}
				switch f.kind {
				case faultKill:
					closeAt(k, iv, f.at.Add(bound))
				case faultStop:
					if !iv.suspended {
						iv.to, iv.open = f.at.Add(bound), false
						done = append(done, *iv)
						iv.suspended = true
					}
				case faultCont:
					if iv.suspended {
						open[k] = &interval{host: k.host, session: k.session, fence: k.fence, from: f.at, open: true}
					}
				}
			}
			if f.kind == faultKill {
				for k := range takenOver {
					if k.host == f.host {
						// A killed host logs nothing more; its plugin
						// stays fenced (no host heartbeats it).
						delete(takenOver, k)
					}
				}
			}
		}
	}
	for _, iv := range open {
		if !iv.suspended {
			iv.to = now
			done = append(done, *iv)
		}
	}
	for k := range takenOver {
		stale = append(stale, fmt.Sprintf("session %s: host %s never stopped its plugin at fence %d after the session was taken over", k.session, k.host, k.fence))
	}
	slices.Sort(stale)
	return done, stale
}

// overlaps returns a description of every pair of intervals of one
// session on two hosts that overlap.
func overlaps(ivs []interval) []string {
	by := map[string][]interval{}
	for _, iv := range ivs {
		by[iv.session] = append(by[iv.session], iv)
	}
	var out []string
	for s, list := range by {
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				a, b := list[i], list[j]
				if a.host != b.host && a.from.Before(b.to) && b.from.Before(a.to) {
					out = append(out, fmt.Sprintf("session %s: host %s ran fence %d %s–%s while host %s ran fence %d %s–%s",
						s, a.host, a.fence, a.from.Format(time.StampMilli), a.to.Format(time.StampMilli),
						b.host, b.fence, b.from.Format(time.StampMilli), b.to.Format(time.StampMilli)))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// fenceOrder checks that admissions of each session carry growing
// fences in time order, and no fence is admitted by two hosts.
func fenceOrder(events []fenceEvent) []string {
	var out []string
	last := map[string]fenceEvent{}
	owner := map[string]string{} // session/fence → host
	evs := slices.Clone(events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	for _, e := range evs {
		if !e.admitted {
			continue
		}
		k := fmt.Sprint(e.session, "/", e.fence)
		if h, ok := owner[k]; ok && h != e.host {
			out = append(out, fmt.Sprintf("session %s: fence %d admitted by host %s and by host %s", e.session, e.fence, h, e.host))
		}
		owner[k] = e.host
		if p, ok := last[e.session]; ok && p.host != e.host && e.fence <= p.fence {
			out = append(out, fmt.Sprintf("session %s: host %s admitted fence %d after host %s admitted fence %d", e.session, e.host, e.fence, p.host, p.fence))
		}
		last[e.session] = e
	}
	return out
}

// echo matches the text of a worker's prompt, as the journal holds it in
// the prompt and in the agent's echo.
var echo = regexp.MustCompile(`jepsen s\d+ n\d+`)

// echoOf returns the text of an agent message chunk the entry journals,
// if it is a worker's echo (a session's title, also taken from its first
// prompt, is an update too, and not an echo).
func echoOf(e leasestore.Entry) (string, bool) {
	if e.Kind != leasestore.KindUpdate {
		return "", false
	}
	var rec struct {
		Update struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	if json.Unmarshal(e.Payload, &rec) != nil || rec.Update.SessionUpdate != "agent_message_chunk" || rec.Update.Content.Type != "text" {
		return "", false
	}
	return rec.Update.Content.Text, echo.MatchString(rec.Update.Content.Text)
}

// checkJournal checks one session's journal: seqs 1, 2, 3… each once,
// fences never going back, no echo journaled twice, and every acked echo
// journaled exactly once. It returns the problems found.
func checkJournal(id string, es []leasestore.Entry, acked map[string]bool) []string {
	var out []string
	updates := map[string]int{}
	var fence uint64
	for i, e := range es {
		if e.Seq != uint64(i+1) {
			out = append(out, fmt.Sprintf("session %s: journal entry #%d has seq %d, want %d (a seq written twice, or one skipped)", id, i+1, e.Seq, i+1))
			break
		}
		if e.Fence < fence {
			out = append(out, fmt.Sprintf("session %s: seq %d written at fence %d after fence %d (a deposed writer's append)", id, e.Seq, e.Fence, fence))
		}
		fence = max(fence, e.Fence)
		if text, ok := echoOf(e); ok {
			updates[text]++
		}
	}
	for text, n := range updates {
		if n > 1 {
			out = append(out, fmt.Sprintf("session %s: the echo %q is journaled %d times", id, text, n))
		}
	}
	for text := range acked {
		if !echo.MatchString(text) {
			continue
		}
		if updates[text] != 1 {
			out = append(out, fmt.Sprintf("session %s: the acknowledged echo %q is journaled %d times, want once", id, text, updates[text]))
		}
	}
	slices.Sort(out)
	return out
}
