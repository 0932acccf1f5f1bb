package localapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// The API's views of the host's and the store's types. The API answers
// with these, never with the types themselves, so a field renamed in the
// store or the host cannot change what clients receive.

func apiStatus(st host.Status) api.Status {
	out := api.Status{PID: st.PID, StateDir: st.StateDir, HostID: st.HostID, Agents: st.Agents, Running: st.Running,
		Sessions: st.Sessions, Recovery: st.Recovery, Latched: st.Latched, Reconciling: st.Reconciling}
	if st.IdleTimeout > 0 {
		// Omitted: sessions are never idle.
		out.IdleTimeout = st.IdleTimeout.String()
	}
	if st.Decisions != nil {
		out.Decisions = make(map[string]api.Decision, len(st.Decisions))
		for id, d := range st.Decisions {
			out.Decisions[id] = api.Decision{Action: string(d.Action), Reason: d.Reason}
		}
	}
	if st.Decided != nil {
		out.Decided = make(map[string]int, len(st.Decided))
		for act, n := range st.Decided {
			out.Decided[string(act)] = n
		}
	}
	out.DiskBytes = st.DiskBytes
	out.Owners = st.Owners
	if c := st.Cluster; c != nil {
		cs := &api.ClusterStatus{Live: c.Live, ValidUntil: c.ValidUntil, Epoch: c.Epoch, LivenessTTL: c.LivenessTTL.String(),
			SelfFence: c.SelfFence.String(), DriftMargin: c.DriftMargin.String(), Hosts: []api.ClusterHost{}, Takeovers: c.Takeovers}
		for _, r := range c.Hosts {
			cs.Hosts = append(cs.Hosts, api.ClusterHost{HostID: r.HostID, Address: r.Address, PID: r.PID, Registered: r.Registered})
		}
		out.Cluster = cs
	}
	return out
}

// where is what the host knows of a session beyond its record: whether it
// runs in this host (host.Session), whether it runs on another live host
// of the cluster (host.Elsewhere), whether it is portable.
type where struct {
	running, elsewhere, portable bool
}

// state is the session's api.Session.State.
func (w where) state(s leasestore.Session) string {
	if !w.running && w.elsewhere {
		return api.StateElsewhere
	}
	return host.StateOf(s, w.running)
}

// ownerHost is the host holding the session's lease, "" when none does.
func ownerHost(s leasestore.Session) string {
	if !s.Lease.Held() {
		return ""
	}
	return s.Lease.OwnerHost()
}

// apiSession is s as the API shows it; w says where it runs, which its
// State says first.
func apiSession(s leasestore.Session, w where) api.Session {
	out := api.Session{ID: s.ID, Agent: s.Agent, Workspace: s.Workspace, Options: s.Options, Lease: apiLease(s.Lease),
		Incarnation: s.Incarnation, Deleting: s.Deleting, State: w.state(s), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Title: s.Title, AllowedScopes: s.AllowedScopes, OwnerHost: ownerHost(s)}
	for _, m := range s.MCPServers {
		out.MCPServers = append(out.MCPServers, api.MCPServer{Name: m.Name, Transport: m.Transport, Command: m.Command, Args: m.Args, URL: m.URL})
	}
	if s.Handles != nil {
		out.Handles = make([]api.HandleLink, len(s.Handles))
		for i, h := range s.Handles {
			out.Handles[i] = api.HandleLink{Handle: h.Handle, Origin: string(h.Origin), Fence: h.Fence, ObservedAt: h.ObservedAt}
		}
	}
	return out
}

func apiLease(l leasestore.Lease) api.Lease {
	out := api.Lease{Fence: l.Fence, Claim: string(l.Claim), Stage: string(l.Stage), ReservedSpawnToken: l.ReservedSpawnToken,
		ProcesslessAt: l.ProcesslessAt, MinNextFence: l.MinNextFence, ClaimKeyID: l.ClaimKeyID,
		Unreconciled: l.Unreconciled, LatchReason: l.LatchReason, ReservedBy: l.ReservedBy}
	if o := l.Owner; o != nil {
		out.Owner = &api.ProcessIdentity{HostID: o.HostID, PID: o.PID, StartTicks: o.StartTicks, BootID: o.BootID,
			StartTime: o.StartTime, SpawnToken: o.SpawnToken, InstanceID: o.InstanceID}
	}
	if r := l.Reattach; r != nil {
		out.Reattach = &api.Reattach{Network: r.Network, Address: r.Address, ProtocolVersion: r.ProtocolVersion,
			PluginPath: r.PluginPath, LogPath: r.LogPath}
	}
	if e := l.DeathEvidence; e != nil {
		out.DeathEvidence = &api.DeathEvidence{Kind: string(e.Kind), Detail: e.Detail, ObservedAt: e.ObservedAt}
	}
	return out
}

// listedMeta is _meta.agenthost of a session in a session/list result;
// w says where it runs.
func listedMeta(s leasestore.Session, w where) map[string]any {
	return map[string]any{api.MetaKey: api.ListedSessionMeta{
		Agent: s.Agent, Claim: string(s.Lease.Claim), Fence: s.Lease.Fence, Handle: s.Handle(), Stage: string(s.Lease.Stage),
		State: w.state(s), OwnerHost: ownerHost(s), Portable: w.portable,
	}}
}

// updateMeta is _meta.agenthost of a session/update notification.
func updateMeta(seq uint64, turnID string) map[string]any {
	return map[string]any{api.MetaKey: api.UpdateMeta{Seq: seq, TurnID: turnID}}
}

// listCursor is where a session/list page ended: the last session's
// creation time and id, in the list's order (newest first, then by id).
// It travels as opaque base64 JSON.
type listCursor struct {
	CreatedAt time.Time `json:"c"`
	ID        string    `json:"i"`
}

func (c listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return listCursor{}, fmt.Errorf("cursor %q is not one session/list gave", s)
	}
	return c, nil
}

// listedBefore reports whether a comes before b in the list.
func listedBefore(a, b leasestore.Session) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.ID < b.ID
}

// pageSessions returns the page of sessions (of workspace cwd, when set)
// after the cursor, at most size, and the cursor of the next page when
// more follow.
func pageSessions(all []leasestore.Session, cwd *string, after *listCursor, size int) ([]leasestore.Session, *string) {
	var sel []leasestore.Session
	for _, s := range all {
		if cwd != nil && *cwd != s.Workspace {
			continue
		}
		if after != nil && !listedBefore(leasestore.Session{CreatedAt: after.CreatedAt, ID: after.ID}, s) {
			continue
		}
		sel = append(sel, s)
	}
	slices.SortFunc(sel, func(a, b leasestore.Session) int {
		switch {
		case listedBefore(a, b):
			return -1
		case listedBefore(b, a):
			return 1
		}
		return 0
	})
	if len(sel) <= size {
		return sel, nil
	}
	last := sel[size-1]
	next := listCursor{CreatedAt: last.CreatedAt, ID: last.ID}.encode()
	return sel[:size], &next
}

// turnFailureCode is the code of a failed turn: auth required when the
// agent's provider refused for want of credentials.
func turnFailureCode(r host.TurnResult) int {
	if r.AuthRequired {
		return api.CodeAuthRequired
	}
	return api.CodeTurnFailed
}
