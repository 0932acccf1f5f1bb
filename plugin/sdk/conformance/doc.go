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
// In this order (Names lists them; RunCheck runs one alone), each with
// plugin processes of its own: handshake, identify, attach-binds-session,
// new-session, prompt-streams-updates, cancel-yields-cancelled,
// stale-fence-refused, outbox-replay-after-reattach,
// open-refuses-another-process (version 2 only), graceful-stop,
// kill-on-ignored-shutdown, and the capability checks set-mode,
// set-config-option, unknown-option-refused and prompt-capabilities, and
// the checks of running across machines (version 2 only): export-state (a
// capability check: when the identity says exports_state, ExportState after
// a turn answers the session's handle and a non-empty state, and a second
// process resumes with it as provider_state and takes a turn) and
// self-fence (spawned with AGENTHOST_SELF_FENCE=1s and never heartbeated,
// the plugin refuses a prompt with SELF_FENCED once the bound has passed; a
// heartbeat lifts it, and the held turn that follows is cancelled at the
// deadline; skipped for a plugin whose Heartbeat is UNIMPLEMENTED, which
// cannot run in cluster mode).
// docs/protocol.md ("What the conformance kit
// checks") maps every rule of the plugin protocol to the check that
// verifies it, and names the rules no check covers; each check's function
// in checks.go says exactly what it does.
//
// Two of them hold plugins not built on plugin/sdk to more than the gRPC
// codes: stale-fence-refused wants the STALE_FENCE reason on its
// FAILED_PRECONDITION (a google.rpc.ErrorInfo detail, domain
// agenthost.agent.v1), because that reason is what tells a host a newer
// host took the plugin over; and kill-on-ignored-shutdown fails a plugin
// whose children leave its process group, which a host's group SIGKILL
// could then not end.
//
// A capability check checks one optional capability the plugin declares
// in Identify (sdk.Capabilities) and fails when a declared capability does
// not work: modes offered and set (with a current_mode update), config
// options set and reported, an undeclared session option refused as an
// invalid setting, and a prompt with each declared kind of content
// accepted and its turn ending by itself. A capability the plugin does
// not declare skips its check: the Result has Skipped set and no Err, and
// sdktest.Run skips the subtest. Every check tolerates session-level
// updates (no turn id) anywhere in the stream.
//
// A check whose setup fails (a plugin that cannot attach cannot be
// prompted) fails with an error that begins "setup:". If the handshake
// check fails, Check reports the others as not run (their Err wraps
// ErrNotRun) and sdktest.Run skips them.
//
// # Prompts
//
// The default prompts work for both example plugins: "count 3" streams
// three chunks of the scripted agent (examples/scripted) and two of an
// agent that echoes its prompt word by word (examples/minimal-plugin);
// "wait" holds the turn of both until it is cancelled; "count 20 10ms"
// streams twenty chunks of the scripted agent over 200 ms, and three
// words of the echo. Any other plugin passes prompts of its own with
// WithPrompts. A failure a prompt the plugin does not understand could
// explain names the agenthost conformance flag that sets it and the field
// of sdktest.Prompts (--prompt-stream (sdktest.Prompts.Stream), likewise
// --prompt-hold and Hold, --prompt-replay and Replay).
//
// The agenthost command line runs the kit too:
//
//	agenthost conformance /path/to/my-plugin --prompt-stream "say hello" --prompt-hold wait
//
// # How the kit starts plugins
//
// Like the host: go-plugin with a custom runner, gRPC only, its own process
// group, stdin on /dev/null, stderr in a file whose last lines error
// messages quote, and the caller's environment plus a spawn token of the
// kit's (AGENTHOST_SPAWN_TOKEN_VAR=SDKTEST_SPAWN_TOKEN) and a private
// AGENTHOST_SESSION_DIR. Every process is stopped and reaped when its check
// ends, and a process left behind, found by its spawn token, fails the
// check. The kit relies on Unix process groups and, for some checks, on
// Linux's /proc.
package conformance
