// Package sdk is what a third-party agent plugin imports. A plugin is a
// program whose main calls Serve with a Factory; agenthost starts one such
// process per session (over hashicorp go-plugin and gRPC) and drives it
// through a small protocol shaped after the Agent Client Protocol.
//
// An Agent has three required methods — NewSession, ResumeSession and
// Prompt — and optional interfaces (Closer, Describer, ModeSetter,
// ConfigOptionSetter, StateExporter, StateImporter); embed UnimplementedAgent to grow one step by step. Prompt reports a turn's
// progress through a Turn: message and thought chunks, tool calls and their
// updates, plans, usage, provider handle changes, and permission requests
// that wait for the user's answer. Returning StopCancelled when the turn's
// context is cancelled is how cancellation works; returning an error fails
// the turn with that message.
//
// # The ACP session surface
//
// What a desktop client expects beyond text is opt-in, one piece at a
// time; an agent that declares nothing is a text-only agent and still
// conforms.
//
//   - Declare what the agent can do with WithCapabilities: prompt content
//     beyond text (Image, Audio, EmbeddedContext, ResourceLink: decode
//     such blocks with ContentBlock.Image and friends and hand them to the
//     CLI, never drop them), MCP transports (MCPServers arrive in
//     NewSessionRequest and ResumeSessionRequest), AuthMethods, the
//     session Options the agent accepts, and Modes / ConfigOptions.
//   - Modes: return SessionInfo.Modes from NewSession and ResumeSession,
//     implement ModeSetter, and declare Capabilities.Modes. The SDK reports
//     a successful SetMode as a current_mode update; a mode the agent moved
//     to itself (leaving plan mode) it reports with
//     Environment.Reporter.CurrentMode. Config options (model, reasoning
//     effort) work the same way with SessionInfo.ConfigOptions,
//     ConfigOptionSetter and Reporter.ConfigOptions; an option's ID is the
//     session option that carries its value, so accept it on resume.
//   - Refuse a bad setting with *InvalidOptionError naming it; wrap a
//     provider's credential failure with ErrAuthRequired (from an open or a
//     turn): the host answers each with its own ACP error.
//   - Slash commands, a title, a handle change outside a turn (after a
//     /clear): Environment.Reporter.Commands, .Title, .HandleChanged. They
//     are journaled without a turn id, between turns or during one.
//   - Diffs and locations: give ToolCall.Content a DiffContent per file
//     changed (old text nil for a new file) and Locations the paths and
//     lines; ToolCallUpdate.ToolContent replaces the content, and
//     OutputDelta streams a running command's output.
//   - Permission requests: offer allow_once, allow_always, reject_once and
//     reject_always where the CLI can honour them, and set AlwaysScope to
//     what "always" covers (a tool, a command prefix): the host then
//     remembers the answer for the session and answers later requests of
//     that scope itself.
//
// The conformance kit checks every capability a plugin declares.
//
// Every update is numbered and kept in an outbox until the host confirms it
// is in its journal. A host that crashes or restarts reattaches, asks again
// from its last journaled update, and gets the rest: nothing is lost and
// nothing is written twice. The outbox keeps a bounded amount in memory and
// spills the oldest updates to a file in the session's directory.
//
// A turn runs at most once. The SDK remembers the turn ids it started
// (the newest 1024, for the life of the process) and refuses a prompt
// naming one of them, running or ended, with reason TURN_ALREADY_STARTED
// instead of running it again: a host that restarted between journaling
// a prompt and learning its fate re-sends it, and that refusal tells it
// the turn is the plugin's, its stop in the outbox. A prompt naming
// another turn while one runs is refused as busy (TURN_RUNNING).
//
// Every call from a host carries its lease fence. The plugin remembers the
// highest fence it was attached at and refuses lower ones, so a host that
// lost the session can never drive the plugin again. The protocol's whole
// contract, which this package meets for an Agent, is docs/protocol.md in the
// repository.
//
// # Across machines: provider state and self-fencing
//
// A session whose host is lost can be continued by a host on another
// machine, which does not have the provider's files (claude's transcript,
// codex's rollout). An agent that implements StateExporter hands them over:
// after every turn the host calls ExportState and keeps the bytes with the
// session, and a resume of that handle anywhere carries them back, which
// the SDK puts in place with the agent's StateImporter before its
// ResumeSession runs (a resume carrying state to an agent that is no
// StateImporter is refused, reason STATE_NOT_IMPORTABLE). Identify's
// exports_state tells the host; an agent that exports nothing is resumed
// only on its own machine.
//
// On one machine a plugin outlives its host and keeps its turn running
// until the host comes back: nothing else can drive the session. In a
// cluster that plugin would be a second writer once another host takes the
// session over, so the host (cluster mode) spawns it with EnvSelfFence, a
// bound d shorter than its liveness TTL, and the plugin fences itself:
//
//   - It keeps a deadline, process start + d at first (when Serve began),
//     then, at each Heartbeat at its current fence, receipt + min(valid_for,
//     d), and no later than the heartbeat's valid_until_boot_ns (the
//     grant's end on the machine's boot clock, which host and plugin
//     share). A heartbeat whose valid_until_boot_ns has passed when it is
//     read (written before host and plugin froze, read on waking) grants
//     nothing. A heartbeat at another fence is refused like any call and
//     moves nothing.
//   - From the deadline on it is self-fenced: Prompt is refused
//     (FAILED_PRECONDITION, reason SELF_FENCED) and the running turn is
//     cancelled; it ends with stop reason cancelled and an error saying the
//     plugin fenced itself because no live host was heard from, and the
//     plugin's log says so too. The next heartbeat lifts it; one arriving
//     past the deadline first cancels the running turn, even if the timer
//     has not fired yet, so a late grant never rescues a turn that
//     outlived its deadline.
//   - The deadline is on the boot clock on Linux (CLOCK_BOOTTIME, which
//     counts time suspended: a plugin waking from a machine's sleep is
//     past a deadline that passed during it; its timer wakes every
//     fencePoll to notice, since Go's timers stop with the monotonic
//     clock), on the monotonic clock elsewhere (where a suspend pushes the
//     deadline out by its length). Stepping the wall clock moves nothing.
//
// The bound (the Chubby lease argument). A host sends a heartbeat only
// while its membership is valid, until some time U that is no later than
// the expiry E of its liveness lease in the cluster, and with valid_for at
// most U - send time. So every deadline a plugin ever holds is at most a
// send time before E, plus d, plus the message's transit (receipt is later
// than send): no later than E + d + transit; and the first deadline, for a
// plugin the host spawned while valid, no later than E + d + the time the
// process took to start. Another host takes the session over only after
// observing the loss (at E or later) and waiting TTL + drift margin on its
// own clock, at E + TTL + drift or later. Since d < TTL, the plugin has
// stopped taking turns, and has been told to cancel its running one, with
// TTL - d + drift to spare for transit, a late timer, clock rate error and
// the turn's cancellation. Nothing in this relies on the plugin reaching
// any host: it decides alone, from its own clock.
//
// Without EnvSelfFence (one machine) nothing changes, and a Heartbeat is
// accepted and changes nothing. A value that is not a positive Go duration
// makes Serve log the reason and refuse to serve: a plugin that cannot keep
// the bound must not run in a cluster. The timer belongs to the plugin's
// server and stops when it shuts down.
//
// Rules for plugin code: never write to stdout (it carries the go-plugin
// handshake); log through Environment.Logger, which writes hclog JSON to the
// session's log file. Serve handles SIGPIPE (a plugin whose host died must
// not die writing to a broken pipe) and SIGTERM (cancel the turn, close the
// agent, stop).
//
// The package stays light for plugin authors: it imports neither the host,
// the lease store, Badger, gopsutil nor the testing package (a test in
// internal/archtest enforces this). Package sdktest tests a plugin: its
// harness drives an agent in-process (served with ServeListener, over real
// gRPC), and its conformance kit checks a plugin binary against the
// protocol.
package sdk
