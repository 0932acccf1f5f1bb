// Package conformance is the conformance kit for agenthost agent plugins:
// it starts a plugin binary as a host does and checks, over the real
// go-plugin handshake and gRPC protocol, that it behaves as the host
// expects. It treats the plugin as a black box, so it checks plugins built
// on plugin/sdk and plugins that implement the protocol themselves.
//
// Check runs every check and returns one Result per check; it needs no
// testing package, so production tools can link it: the agenthost
// conformance command prints its results as a table.
//
//	results := conformance.Check(ctx, "/path/to/my-plugin",
//		conformance.WithPrompts(conformance.Prompts{Stream: "say hello", Hold: "wait"}))
//	for _, r := range results {
//		fmt.Println(r.Name, r.Err)
//	}
//
// In a plugin's Go tests, package plugin/sdk/sdktest wraps the same checks
// as subtests: sdktest.Run(t, bin, opts...).
//
// # Checks
//
// In this order (Names lists them); each starts plugin processes of its
// own, and RunCheck runs one alone:
//
//   - handshake: the process completes go-plugin's handshake over gRPC at
//     the agenthost protocol version (wire.Handshake).
//   - identify: Identify, before any Attach, reports the pid of the process
//     the kit started, the spawn token the kit passed, a non-empty instance
//     id and agent name, the protocol version, no session id and fence 0.
//   - attach-binds-session: Attach(fence 1) binds the process to the session
//     id "conformance\x00/session" (a NUL byte and a slash included), which
//     Identify reports byte for byte; Attach with another session id is
//     refused and changes nothing.
//   - new-session: NewSession at fence 1 returns a provider handle, which
//     Identify reports.
//   - prompt-streams-updates: the Stream prompt's turn arrives on
//     Updates(from 1) as seqs 1, 2, 3… with no gap or duplicate, with at
//     least one agent_message_chunk, ending with turn_stopped(end_turn); a
//     second Prompt (with a caller-chosen turn id, which must be echoed)
//     sent right after turn_stopped is accepted and continues the sequence.
//   - cancel-yields-cancelled: the Hold prompt's turn does not end by
//     itself; after Cancel it ends with stop reason "cancelled" (not
//     "failed") within 5 s.
//   - stale-fence-refused: after Attach(fence 2), every call carrying fence
//     1 (Prompt, Acknowledge, Updates, Cancel, AnswerPermission,
//     ResumeSession, Attach, Close) fails with FAILED_PRECONDITION carrying
//     the reason STALE_FENCE (a google.rpc.ErrorInfo detail, domain
//     agenthost.agent.v1; plugin/sdk attaches it), the Updates stream fence
//     1 had open ends the same way, and fence 2 still works. The reason is
//     what tells a host that a newer host took the plugin over.
//   - outbox-replay-after-reattach: the kit reads the first three updates
//     of the Replay prompt's turn, then drops its connection as a dying host
//     does (the process keeps running), stays away for half a second,
//     reattaches with go-plugin's ReattachConfig, checks that Identify
//     reports the same pid, instance id and session id, attaches at fence 2
//     and asks for Updates from the last seq it received + 1: it must get
//     exactly the rest of the turn, no gap, no duplicate, ending with
//     turn_stopped(end_turn). After it acknowledges the last seq, Updates
//     from 1 must start after the acknowledged seq.
//   - graceful-stop: Close(fence) succeeds, then SIGTERM makes the process
//     exit within 5 s, leaving no live process in its process group and no
//     process carrying its spawn token.
//   - kill-on-ignored-shutdown: with a held turn running, a stop with a
//     300 ms deadline (SIGTERM to the plugin, then SIGKILL to its process
//     group) leaves no process behind, whether the plugin honours SIGTERM
//     or ignores it. It fails for a plugin whose children leave its process
//     group.
//
// A check whose setup fails (a plugin that cannot attach cannot be
// prompted) fails with an error that begins "setup:". If the handshake
// check fails, Check reports the others as not run (their Err wraps
// ErrNotRun) and sdktest.Run skips them.
//
// # Prompts
//
// The default prompts are those of the scripted example plugin
// (examples/scripted): "count 3" streams three chunks, "sleep 30s" holds
// the turn, "count 20 10ms" streams twenty chunks over 200 ms. Any other
// plugin passes prompts of its own with WithPrompts.
//
// The agenthost command line runs the kit too:
//
//	agenthost conformance /path/to/my-plugin --prompt-stream "say hello" --prompt-hold wait
//
// # How the kit starts plugins
//
// Like the host: go-plugin's NewClient with a custom runner, gRPC only,
// wire.Handshake and wire.PluginSets. The process runs in its own process
// group with stdin on /dev/null, the arguments WithArgs gives, and stderr
// in a file, whose last lines error messages quote. Its environment is the
// caller's, plus
// AGENTHOST_SPAWN_TOKEN_VAR=SDKTEST_SPAWN_TOKEN, SDKTEST_SPAWN_TOKEN=<a
// random token per process> and AGENTHOST_SESSION_DIR=<a private directory
// per process>. Every process the kit starts is stopped (SIGTERM, then
// SIGKILL to its process group after a deadline) and reaped when its check
// ends, every go-plugin client is killed and every directory removed; a
// process left behind, found by its spawn token, fails the check. The kit
// relies on Unix process groups and, for some checks, on Linux's /proc.
package conformance
