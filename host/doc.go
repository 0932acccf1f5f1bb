// Package host is the embeddable supervisor of agenthost: it owns the lease
// store, starts one plugin process per agent session, and reconciles every
// session when it is opened again after a crash or restart.
//
// # Writers
//
// The host is the only component that moves a lease. It admits a writer to a
// session only after the lease store has recorded a reservation, the spawned
// plugin's process identity and the provider handle the plugin proved, in
// that order and at one fence (see package leasestore). Process evidence
// comes from package probe; the host never declares an owner dead on a
// timeout. Evidence that is incomplete latches a session rather than
// freeing it: a wrong "dead" would put two writers on one provider
// conversation.
//
// Each step of a start (start.go: reserve, preflight, spawn, prove,
// openJournal, launch) undoes its own part when it fails, and a
// readoption (reconcile.go) runs the same tail on a plugin it adopted,
// which it detaches on failure and never stops. A rollback that fails is
// reported under [ReleaseScope]: it leaves a lease held for a plugin that
// is gone or never ran, until a restart proves that.
//
// # Plugins outlive the host
//
// Each plugin runs as the leader of its own session and process group, with
// stdin on /dev/null, its handshake on a pipe and its stderr in a file under
// the session's directory, so it survives the host's exit and never dies of
// SIGPIPE. The host watches it through a pidfd (signals reach exactly that
// process, never a recycled pid). [Host.Close] detaches: plugins keep
// running and keep their leases, and the next [Open] probes each recorded
// owner in one batch and readopts it ([ActionReadopted]), releases it with
// the evidence when it is proven gone ([ActionEvicted]), or latches it
// ([ActionLatched]); plugins carrying a spawn token no lease owns are
// stopped in the background. [Host.Shutdown] stops every session instead.
// [Host.RemoveSession] and [Host.Prune] delete sessions no plugin can hold
// (record, journal, session directories), under the session's start turn
// (see remove.go); [StateOf] says in one word what a session is doing.
// A turn whose plugin is gone ends: its stop, reason "failed" with the
// plugin's fate, is journaled by the host that saw the exit, or by the
// next one's reconciliation; a readopted plugin's open turn goes on if the
// plugin has it, and its prompt is dispatched if it never had it.
//
// # Updates
//
// A plugin numbers its updates and keeps them in an outbox until the host
// acknowledges them, and the host acknowledges an update only once it is in
// the session's journal. A reattached plugin replays what was not
// acknowledged, so no update is lost or journaled twice across a host crash.
// A plugin that breaks that protocol (a gap in the numbering, an update the
// journal can never hold) is stopped with [ErrProtocol].
//
// # The life of a prompt
//
// One prompt, from a local API client to the plugin and back:
//
//  1. host/localapi/agent.go, agent.Prompt: the session/prompt handler
//     finds the running [Session] and calls [Session.Prompt].
//  2. host/turn.go, Session.Prompt: the prompt's record (promptEntry,
//     host/journal.go) is appended to the journal before anything else,
//     then dispatched with Attachment.Prompt of internal/pluginclient
//     (client.go), which carries the fence bound at Attach. Prompt then
//     waits for the turn's end.
//  3. plugin/sdk/server.go, server.Prompt, in the plugin process: it
//     checks the fence and starts runTurn, which calls the agent's Prompt
//     with a *sdk.Turn (turn.go). Each update the agent emits goes to the
//     outbox (outbox.go), numbered; runTurn ends every turn with a
//     turn_stopped update.
//  4. server.Updates streams the outbox to the host from the sequence
//     number the host asks for; UpdateStream.Recv of internal/pluginclient
//     converts each update to its journal record (updateFromProto,
//     convert_update.go): a journal.Update, or a journal.Stop for
//     turn_stopped.
//  5. host/pump.go, Session.pump → stream → record: the pump checks a
//     batch's numbering (checkUpdates), records a provider handle change in
//     the lease, appends the batch with leasestore.Journal.Append (the
//     Badger backend group-commits it with other sessions' appends),
//     acknowledges it so the outbox may forget it, and on the turn's stop
//     calls finishTurn, which wakes Session.Prompt.
//  6. host/localapi/follow.go, follower.run: the connection's follower
//     tails the journal (Store.Tail), decodes each entry (journal.Decode)
//     and sends it as a session/update notification; on the turn's stop it
//     marks the turn ended. agent.Prompt answers session/prompt once
//     Session.Prompt returned and the follower has sent the stop.
//
// The journal is the only way back: a client is shown what is durable,
// never the plugin's stream itself, and one that reconnects from the last
// seq it saw misses nothing.
//
// # Settings, permissions, titles
//
// A session's settings (the options its agent acknowledged, its MCP
// servers, its modes and config options as the agent last reported them,
// its title, the permission scopes answered "allow always") are stored
// with its record by leasestore.RecordSettings at the session's fence, and
// the Session keeps them in memory (settings.go). Every start of a session
// that exists, a resume, a prompt after its plugin died, a start after a
// restart, passes the stored options and servers; a readopted plugin needs
// none, and the stored modes and config options answer for it. An agent's
// capabilities (capabilities.go) are learned from its plugin's Identify
// once per host; CheckSettings refuses settings it does not declare,
// checkContent prompt blocks. Permission requests (permission.go) are
// pending from before they are journaled until answered, so a client asks
// only those the plugin still waits on; the host answers a request of a
// scope allowed always itself, and one nobody answers within
// Config.PermissionTimeout with "cancelled".
//
// # Idle sessions
//
// With Config.IdleTimeout set, a session with no turn, no pending
// permission request and no follower for that long has its plugin
// stopped as Session.Stop stops it, its lease released with
// IdleStopDetail (IdleStopped reads it, in any later host too), and
// Host.ResumeIdle starts it again with its stored settings and provider
// handle on its next request. Each session owns its timer (idle.go, which
// also says how a request racing the stop is never lost).
//
// # Several machines
//
// With Config.Cluster set (a store shared by several machines,
// leasestore/etcdstore) the host runs in cluster mode (cluster.go); with it
// nil nothing here applies and one machine works as above. Every session
// has exactly one owner host, the one its lease names
// (leasestore.Lease.OwnerHost). At Open the host joins the cluster under
// Config.HostID with a liveness lease of Config.LivenessTTL that the store
// keeps alive (a second process with the same id is refused before it
// touches a lease), marks unreconciled only its own leases
// (MarkHostUnreconciled) and decides only those, as above. Another host's
// session is judged from the cluster, never from this machine's process
// table:
//
//   - remote-live while its owner host is registered: this host never
//     touches it, and a start, resume, load or prompt of it here is refused
//     with an *ElsewhereError naming the host and its Config.Address (the
//     local API answers -32011 with both);
//   - owner-lost once its owner host is not registered: this host notes
//     when it observed that (the newest HostLost of its watch of the
//     cluster's hosts, or, with none pending, a Hosts read that does not
//     name the host: a loss it never saw happen), and once LivenessTTL +
//     DriftMargin have passed since, with its watch running throughout
//     (a watch that was down may have missed the host's return and next
//     loss, so everything pending is timed afresh after it), it takes
//     each of that host's held
//     sessions over with Cluster.ApplyIfHostLost and an Evict carrying
//     EvidenceHostLost, then ends the session's open turn in its journal.
//     The session is released: the next request on any host resumes it.
//     The transaction compares the fence and requires the host still
//     unregistered, so of several hosts taking over one wins, and a host
//     that registered again in time keeps its sessions (its HostJoined
//     also cancels the pending takeover). Until then a request for the
//     session is refused as held (ErrOwnerHostLost), never served.
//
// Plugins outlive their host on one machine; across machines a plugin
// still running on a lost host while another host resumes its session
// would be a second writer to the provider conversation (the store refuses
// its journal writes by fence, but not what its CLI does). So in cluster
// mode every plugin is started with EnvSelfFence=Config.SelfFence and
// fences itself: it takes no new turn and cancels the running one once
// now >= deadline, where the deadline starts at the plugin's start +
// SelfFence and every heartbeat moves it to receipt + min(valid_for,
// SelfFence). Each running session's heartbeat loop sends one every
// SelfFence/5, only while Membership.Valid() is in the future, with
// valid_for = min(SelfFence, until - now). A plugin without the Heartbeat
// RPC cannot fence itself and is refused at start (ErrNoHeartbeat).
//
// The bound (the lease argument of Chubby, Burrows 2006, §2.8): let U be
// the host's Valid() until, its last answered keepalive's send time + TTL.
// The cluster expires the lease no earlier than U (the TTL counts from the
// keepalive's arrival); a host that observes the loss does so at O >= the
// expiry >= U, and takes over at O + TTL + drift. The lost host's last
// heartbeat was sent at h < U with valid_for <= U - h, so its plugins
// fence themselves by U + d, d the heartbeat's delivery delay on their own
// machine, and by h + d + SelfFence; a plugin started and never
// heartbeated, by its start (< U) + SelfFence. Every plugin of the lost
// host is therefore fenced more than TTL + drift - d before the takeover:
// the drift margin covers the machines' clocks running apart over that
// interval (rate, not offset: each bound is measured on one machine's
// clock), and TTL absorbs delivery delays, a paused plugin included, up to
// TTL. With the defaults (TTL 5s, SelfFence TTL/2 = 2.5s, drift 1s,
// heartbeat every 500ms) a plugin stops at most 2.5s after the last
// heartbeat it received, and a takeover comes no sooner than 6s after the
// loss was observed, itself no sooner than 5s after the lost host's last
// answered keepalive. Every host of one cluster must use the same TTL.
//
// A host paused or cut off past its TTL comes back with Valid() zero: it
// takes no turn (ErrNotLive, retryable) and starts nothing until the store
// registered it again under a new epoch. Then, before it heartbeats a
// running session again (and before that session's next prompt), it
// re-reads the session's lease: a fence that moved or an owner host that
// is not this one means the session was taken over, and its plugin,
// fenced already, is stopped, never readopted (ErrDeposed), and nothing is
// written at its old fence. Close detaches the plugins and then leaves the
// cluster (the lease is revoked, so other hosts see the loss at once); the
// plugins fence themselves within SelfFence. A host restarted after its
// sessions were taken over finds them released (or another host's), not
// its own: it does not decide them, and the orphan reaper stops its old
// plugins, whose spawn tokens no lease owns any more.
//
// # Embedding
//
// A host is Linux-only (pidfds). Plugins inherit every descriptor of the
// host's process that is not close-on-exec, and they outlive it: a program
// that embeds a host and was itself handed descriptors it does not mark
// close-on-exec passes them to long-lived plugins. Go opens its own
// descriptors close-on-exec; the agenthost binary marks inherited ones so
// at start.
package host
