package localapi

import (
	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// The API's views of the host's and the store's types. The API answers
// with these, never with the types themselves, so a field renamed in the
// store or the host cannot change what clients receive.

func apiStatus(st host.Status) api.Status {
	out := api.Status{PID: st.PID, StateDir: st.StateDir, HostID: st.HostID, Agents: st.Agents, Running: st.Running,
		Sessions: st.Sessions, Recovery: st.Recovery, Latched: st.Latched}
	if st.Decided != nil {
		out.Decided = make(map[string]int, len(st.Decided))
		for act, n := range st.Decided {
			out.Decided[string(act)] = n
		}
	}
	return out
}

func apiSession(s leasestore.Session) api.Session {
	out := api.Session{ID: s.ID, Agent: s.Agent, Workspace: s.Workspace, Options: s.Options, Lease: apiLease(s.Lease),
		Incarnation: s.Incarnation, Deleting: s.Deleting, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
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
		Unreconciled: l.Unreconciled, LatchReason: l.LatchReason}
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

// listedMeta is _meta.agenthost of a session in a session/list result.
func listedMeta(s leasestore.Session) map[string]any {
	return map[string]any{api.MetaKey: api.ListedSessionMeta{
		Agent: s.Agent, Claim: string(s.Lease.Claim), Fence: s.Lease.Fence, Handle: s.Handle(), Stage: string(s.Lease.Stage),
	}}
}

// updateMeta is _meta.agenthost of a session/update notification.
func updateMeta(seq uint64, turnID string) map[string]any {
	return map[string]any{api.MetaKey: api.UpdateMeta{Seq: seq, TurnID: turnID}}
}
