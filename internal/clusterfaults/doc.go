// Package clusterfaults is agenthost's cluster fault test, in the spirit of
// Jepsen: real etcd member processes (internal/etcdmember), real `agenthost
// serve --store etcd` processes with distinct host ids and state
// directories, real plugin processes (the scripted plugin), and clients
// that keep prompting every session through whichever host owns it, while
// a seeded random schedule SIGKILLs or SIGSTOPs (and later SIGCONTs) a host
// or an etcd member, for a bounded number of rounds. It has no production
// code.
//
// After each round, with every process back, it checks:
//
//   - no journal sequence number was written twice, and the fences of a
//     journal never go back (a deposed writer's late append would);
//   - every update a client saw acknowledged (a session/update it
//     received, which the host sends only once it is journaled) is in the
//     journal exactly once, and no update is there twice;
//   - no two hosts ever ran a plugin of one session at the same time, from
//     the hosts' own logs: "plugin admitted" (session, fence) opens a
//     host's interval and "plugin gone" closes it. A host SIGKILLed or
//     SIGSTOPped leaves its plugins running without heartbeats; they fence
//     themselves within the self-fence bound (host.Config.SelfFence,
//     LivenessTTL/2), so such an interval ends at the fault plus that bound
//     (a stopped host continued runs them on, if it is still live). A
//     host's "took over a lost host's session" line ends the lost host's
//     interval of that session at the takeover less the TTL and the drift
//     margin, the wait since the lost host's lease expired, by when its
//     plugins had fenced themselves; the lost host must later stop that
//     plugin and log its end (the round waits for it: a continued host
//     does so once it has registered again, which may come after the
//     session's client was acknowledged on the taker). Admissions of one
//     session must also carry growing fences, never one fence on two
//     hosts;
//   - every session is running somewhere or resumable: its client gets a
//     prompt acknowledged again after the round's faults healed.
//
// Quorum is kept by design: at most one etcd member and at most one host
// is down at a time, and each is back before the next round. The test
// logs the seed (AGENTHOST_CLUSTER_FAULTS_SEED replays one) and its
// figures: rounds, kills, stops, takeovers and the longest takeover (from
// the fault that lost a session's host to the admission on another).
// `make test` runs a small size; `make test-faults` sets
// AGENTHOST_CLUSTER_FAULTS=large.
//
// # Hazards
//
//   - etcd members run with --unsafe-no-fsync: the test kills processes,
//     not the machine, and the page cache survives a SIGKILL.
//   - Plugins outlive their SIGKILLed hosts by design; the test kills what
//     is left of every state directory's sessions when it ends.
//   - The clocks compared are one machine's: the hosts' log timestamps
//     and the test's fault times.
package clusterfaults
