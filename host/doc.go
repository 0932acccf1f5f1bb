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
// # Embedding
//
// A host is Linux-only (pidfds). Plugins inherit every descriptor of the
// host's process that is not close-on-exec, and they outlive it: a program
// that embeds a host and was itself handed descriptors it does not mark
// close-on-exec passes them to long-lived plugins. Go opens its own
// descriptors close-on-exec; the agenthost binary marks inherited ones so
// at start.
package host
