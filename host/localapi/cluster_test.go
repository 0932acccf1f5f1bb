package localapi_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/localapi"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
)

// serveCluster serves a host of cluster ec, as hostID with its own state
// directory and store client, on a socket it publishes as its address.
func serveCluster(t *testing.T, ec *etcdtest.Cluster, hostID string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-capi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	store, err := etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: ec.Endpoints(), Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(context.Background(), host.Config{
		StateDir: dir, Store: store, Cluster: store, HostID: hostID, Address: sock,
		LivenessTTL: 2 * time.Second, SelfFence: time.Second,
		Agents: map[string]host.AgentPlugin{
			"scripted": {Path: scripted},
			// The same plugin, told not to export its provider state.
			"local": {Path: scripted, Env: []string{"AGENTHOST_SCRIPTED_NO_EXPORT=1"}},
		}, Logger: logtest.New(t).Named(hostID),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &localapi.Server{Host: h, DefaultAgent: "scripted", Version: "test", Logger: logtest.New(t)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = h.Shutdown(context.Background())
	})
	return sock
}

// A client of host B asking for a session host A runs is told, with
// CodeSessionElsewhere, which host runs it and where to connect; B's
// session list names A as its owner.
func TestSessionOfAnotherHostIsElsewhere(t *testing.T) {
	ec := etcdtest.StartCluster(t, 1)
	sockA, sockB := serveCluster(t, ec, "host-a"), serveCluster(t, ec, "host-b")
	ca, cb := dial(t, sockA), dial(t, sockB)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	ca.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}, &created)
	// A turn, whose end stores the exporting plugin's provider state.
	ca.mustCall("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "echo one"}}}, nil)
	// And a session of the plugin that does not export.
	var local struct {
		SessionID string `json:"sessionId"`
	}
	ca.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}, "_meta": map[string]any{"agenthost": map[string]any{"agent": "local"}}}, &local)
	ca.mustCall("session/prompt", map[string]any{"sessionId": local.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "echo one"}}}, nil)

	for _, req := range []struct {
		method string
		params map[string]any
	}{
		{"session/load", map[string]any{"sessionId": created.SessionID, "cwd": t.TempDir(), "mcpServers": []any{}}},
		{"session/resume", map[string]any{"sessionId": created.SessionID, "cwd": t.TempDir()}},
		{"session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "echo hi"}}}},
	} {
		m := cb.call(req.method, req.params)
		if m.Error == nil || m.Error.Code != api.CodeSessionElsewhere {
			t.Fatalf("%s on host B: %+v", req.method, m)
		}
		var data api.ElsewhereData
		if err := json.Unmarshal(m.Error.Data, &data); err != nil || data.HostID != "host-a" || data.Address != sockA {
			t.Errorf("%s: data %s (%v)", req.method, m.Error.Data, err)
		}
		if !strings.Contains(m.Error.Message, "host-a") || !strings.Contains(m.Error.Message, sockA) {
			t.Errorf("%s: message %q does not say where to connect", req.method, m.Error.Message)
		}
	}

	// Both hosts list both sessions as A's; portable is the stored
	// session's, the same on both: the exporting plugin's session is, the
	// other one is not.
	for name, c := range map[string]*rpcClient{"A": ca, "B": cb} {
		var list api.ListSessionsResult
		c.mustCall("session/list", map[string]any{}, &list)
		want := map[string]bool{created.SessionID: true, local.SessionID: false}
		wantState := api.StateRunning
		if name == "B" {
			wantState = api.StateElsewhere
		}
		if len(list.Sessions) != 2 {
			t.Fatalf("%s's session list: %+v", name, list)
		}
		for _, s := range list.Sessions {
			m := s.Meta.Agenthost
			if p, ok := want[s.SessionID]; !ok || m.Portable != p || m.OwnerHost != "host-a" || m.State != wantState {
				t.Errorf("%s lists %s as %+v; want owner host-a, state %s, portable %v", name, s.SessionID, m, wantState, p)
			}
		}
	}
}
