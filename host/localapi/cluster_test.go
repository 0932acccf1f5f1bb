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
		Agents: map[string]host.AgentPlugin{"scripted": {Path: scripted}}, Logger: logtest.New(t).Named(hostID),
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

	// A, which runs it with a plugin that exports its conversation, lists
	// it as its own and portable.
	var own api.ListSessionsResult
	ca.mustCall("session/list", map[string]any{}, &own)
	if len(own.Sessions) != 1 || own.Sessions[0].Meta.Agenthost.OwnerHost != "host-a" || own.Sessions[0].Meta.Agenthost.State != api.StateRunning ||
		!own.Sessions[0].Meta.Agenthost.Portable {
		t.Fatalf("A's session list: %+v", own)
	}
	var list api.ListSessionsResult
	cb.mustCall("session/list", map[string]any{}, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Meta.Agenthost.OwnerHost != "host-a" || list.Sessions[0].Meta.Agenthost.State != api.StateElsewhere {
		t.Fatalf("B's session list: %+v", list)
	}
}
