package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

func listed(id, state, owner string, portable bool, updated time.Time) api.ListedSession {
	u := updated.Format(time.RFC3339Nano)
	title := "t-" + id
	s := api.ListedSession{SessionID: id, Cwd: "/w", Title: &title, UpdatedAt: &u}
	s.Meta.Agenthost = api.ListedSessionMeta{Agent: "scripted", State: state, Fence: 2, OwnerHost: owner, Portable: portable}
	return s
}

// One machine's table is as it always was (the README's transcript shows
// it); a host on a cluster adds HOST and PORTABLE after STATE.
func TestSessionsTableShowsTheOwnerHostOnACluster(t *testing.T) {
	now := time.Now()
	sessions := func() []api.ListedSession {
		return []api.ListedSession{
			listed("s1", api.StateStopped, "", true, now.Add(-30*time.Second)),
			listed("s2", api.StateElsewhere, "host-b", false, now),
		}
	}
	var one bytes.Buffer
	if err := printSessions(&one, sessions(), api.StatusResult{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(one.String()), "\n")
	if strings.Join(strings.Fields(lines[0]), " ") != "SESSION AGENT STATE FENCE UPDATED WORKSPACE TITLE" || strings.Contains(one.String(), "host-b") {
		t.Errorf("one machine's table:\n%s", one.String())
	}
	var st api.StatusResult
	st.Host.HostID = "host-a"
	st.Host.Running = []string{"s1"}
	st.Host.Cluster = &api.ClusterStatus{Live: true}
	var cl bytes.Buffer
	if err := printSessions(&cl, sessions(), st); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(cl.String()), "\n")
	want := [][]string{
		{"SESSION", "AGENT", "STATE", "HOST", "PORTABLE", "FENCE", "UPDATED", "WORKSPACE", "TITLE"},
		{"s2", "scripted", "elsewhere", "host-b", "no", "2", "just", "now", "/w", "t-s2"},
		{"s1", "scripted", "running", "-", "yes", "2", "30s", "ago", "/w", "t-s1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("cluster table:\n%s", cl.String())
	}
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), " "); got != strings.Join(want[i], " ") {
			t.Errorf("line %d: %q, want %q", i, got, strings.Join(want[i], " "))
		}
	}
	// The columns line up: HOST starts where the header's does.
	if h, r := strings.Index(lines[0], "HOST"), strings.Index(lines[1], "host-b"); h != r {
		t.Errorf("HOST at column %d, host-b at %d:\n%s", h, r, cl.String())
	}
}

func TestStatusShowsTheCluster(t *testing.T) {
	var st api.StatusResult
	st.Version = "devel"
	st.Host.HostID = "host-a"
	st.Host.Owners = map[string]string{"s1": "host-a", "s2": "host-b"}
	st.Host.Cluster = &api.ClusterStatus{Live: true, Epoch: 1, LivenessTTL: "5s", SelfFence: "2.5s", DriftMargin: "1s",
		Hosts:     []api.ClusterHost{{HostID: "host-a", PID: 10, Address: "/a/agenthost.sock"}, {HostID: "host-b", PID: 11, Address: "/b/agenthost.sock"}},
		Takeovers: map[string]time.Time{"host-c": time.Now().Add(3 * time.Second)}}
	var out bytes.Buffer
	printStatus(&out, st)
	have := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		have[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"cluster live, epoch 1; liveness TTL 5s, self-fence 2.5s, drift margin 1s",
		"hosts host-a (this host), pid 10, /a/agenthost.sock",
		"host-b, pid 11, /b/agenthost.sock",
		"elsewhere s2 on host-b",
	} {
		if !have[want] {
			t.Errorf("status lacks the line %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "the sessions of lost host host-c at ") {
		t.Errorf("status lacks the takeover:\n%s", out.String())
	}
	if strings.Contains(out.String(), "s1 on") {
		t.Errorf("this host's own session is listed elsewhere:\n%s", out.String())
	}
	var one bytes.Buffer
	st.Host.Cluster, st.Host.Owners = nil, nil
	printStatus(&one, st)
	if strings.Contains(one.String(), "cluster") || strings.Contains(one.String(), "hosts") {
		t.Errorf("one machine's status shows cluster rows:\n%s", one.String())
	}
}

// A client asking a host for a session another host runs is told which
// host and where its clients reach it.
func TestElsewhereErrorNamesTheHostAndItsSocket(t *testing.T) {
	data, _ := json.Marshal(api.ElsewhereData{HostID: "host-a", Address: "/srv/ah-a/agenthost.sock"})
	err := sessionError("s1", &apiclient.Error{Code: api.CodeSessionElsewhere, Message: "session runs elsewhere", Data: data})
	want := "session s1 runs on host host-a, not this one: use it there: its socket is /srv/ah-a/agenthost.sock on that host's machine (agenthost --state-dir /srv/ah-a … there)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s", err, want)
	}
	data, _ = json.Marshal(api.ElsewhereData{HostID: "host-a"})
	err = sessionError("s1", &apiclient.Error{Code: api.CodeSessionElsewhere, Message: "m", Data: data})
	if err == nil || !strings.Contains(err.Error(), "runs on host host-a, not this one: ask that host") {
		t.Errorf("without an address: %v", err)
	}
}
