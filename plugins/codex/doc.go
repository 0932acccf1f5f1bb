// Package codex is the reference agenthost plugin for OpenAI's codex CLI.
// It drives `codex app-server`, the JSON-RPC interface codex's own IDE
// extension uses, one long-lived app-server per session. It is built only
// on plugin/sdk and its cliproc package, which owns the app-server's
// process; command agenthost-plugin-codex serves it as "codex". It mirrors
// codex-cli 0.171.0 (MinVersion, the oldest accepted). The session options
// are the Opt constants (OptionSpecs).
//
// # The model
//
// Opening a session runs the readiness checks, each failing with what to
// install, set or run: the binary (OptCLIPath, EnvCodexPath, PATH, the
// usual install locations), its version (`codex --version`), and a
// credential (an auth.json in $CODEX_HOME, written by `codex login`, or a
// key variable that reaches codex, a model provider's env_key included).
// It then starts `codex app-server` in the workspace and opens the thread:
// initialize, initialized, model/list, then thread/start for NewSession or
// thread/resume for ResumeSession. The handle is the thread id.
//
// The session's settings (Capabilities declares them): the options model,
// mode (an approval preset, Presets: read-only, auto, full-access, each an
// approval policy and a sandbox), effort, system_prompt
// (baseInstructions), append_system_prompt (developerInstructions),
// add_dirs (sandbox_workspace_write.writable_roots), env.NAME (the
// app-server's environment), and the ACP MCP servers (stdio and http, as
// mcp_servers.NAME config overrides) go to thread/start and again to
// every thread/resume; an unknown option or a bad value is an
// *sdk.InvalidOptionError. SessionInfo acknowledges every option given,
// with the model, effort and mode as they stand, and carries the modes
// and the config options mode, model (model/list's models) and effort
// (the model's supported efforts). SetMode and SetConfigOption change the
// settings turn/start carries (model, effort, approvalPolicy,
// sandboxPolicy): a change applies from the next turn, one made while a
// turn runs included, since codex cannot change a running turn.
//
// The slash commands (Commands, reported through the Reporter as the
// session opens) run instead of a model turn when a prompt is exactly
// one: /new starts a fresh thread with the session's settings and names
// it (thread/name/set), which makes codex save it at once, then reports
// it as the session's new handle (HandleChanged "created"), so a restart
// resumes the new conversation; /compact runs thread/compact/start, and
// /review [instructions] review/start (the uncommitted changes, or what
// the instructions say), whose turn/started names an inner turn with the
// review's as its rootTurnId. A
// thread name codex reports (thread/name/updated) is the session's title.
//
// Prompt sends turn/start and maps the turn's notifications until
// turn/completed: message and reasoning deltas become message and thought
// chunks, tool items (commands, file changes, MCP and dynamic tool calls,
// web searches) tool calls at item/started and their updates at
// item/completed, turn/plan/updated a plan, thread/tokenUsage/updated
// usage (its "last" breakdown, so a turn's updates add up), and the
// turn's status its end. A command's output streams as OutputDelta
// updates (item/commandExecution/outputDelta) and its final update
// carries the whole output and, in rawOutput, its exit code; a file
// change's tool call carries each file's diff (whole old and new text)
// and location. Approval requests become permission requests, each asked
// in its own goroutine so the turn keeps streaming, carrying the whole
// tool call (a file change's diffs included); their options are codex's
// decisions (accept, acceptForSession, decline), and their AlwaysScope
// (below) is "exec:<command>" for a command and "patch" for a file change. A
// command's tool call and permission request carry a CommandInput as
// rawInput, a file change's a PatchInput. Image, embedded-resource and
// resource-link prompt blocks become codex's image (a data URL) and text
// input items; audio and binary resources are refused.
// Cancelling the turn sends turn/interrupt and ends with StopCancelled
// when codex confirms it, or 1.5 s later, inside the 2 s session/cancel
// promises. Close stops the app-server under cliproc's rule (stdin EOF,
// SIGTERM, SIGKILL, each wait at most 2 s and sharing the Close
// deadline).
//
// # What an allow-always covers
//
// The host remembers an allow_always answer per PermissionRequest.AlwaysScope,
// durably, and answers every later request of that scope itself, unseen
// by the user; so a scope covers only what the user saw (turn.go's
// commandScope and patchScope, the rules of plugins/internal/allowscope):
//   - A command: "exec:<the exact command>", once codex's shell wrapper
//     (`/bin/bash -lc '…'`, or "…" without expansions; the legacy
//     execCommandApproval's ["bash","-lc",…]) is undone; `git status -s`
//     is another scope than `git status`. A wrapper that does not parse, a
//     command with ; & | < > $ ` ( ) or a line break, a quote that does
//     not parse, a first word that assigns (X=1 make) or may expand, or a
//     shell or wrapper as its program (sh, bash, env, sudo, xargs, nohup,
//     timeout, npx, eval, source …) has no scope. Its acceptForSession is
//     still offered: codex applies it to that exact command only.
//   - A file change: "patch", shared, only when every file it names lies
//     inside the workspace or add_dirs (symbolic links resolved) and it
//     asks for no grantRoot. Otherwise it has no scope and acceptForSession
//     is not offered (for a grantRoot it would grant codex that root for
//     the session); sent anyway, it is answered to codex as accept.
//
// # Portable state
//
// The agent is an sdk.StateExporter and sdk.StateImporter (state.go), so
// a host on another machine can continue a thread. The state is
// plugins/internal/portable's envelope holding the thread's rollout,
// sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl, its path relative
// to CODEX_HOME. ExportState first waits (at most 5 s) for the rollout
// to record the end (task_complete, turn_aborted) of the last turn codex
// reported completed: codex writes the rollout behind its notifications.
// ImportState puts the rollout at the same relative path under this
// machine's CODEX_HOME, or over this machine's own copy of the thread if
// it has one elsewhere (one copy); it refuses another agent's or thread's
// state, any file but the one rollout, a rollout whose session_meta
// names another thread, and never overwrites a file that is another
// thread's; a copy of this thread with turns the import lacks is kept as
// <name>.displaced-<time>.
//
// What the live CLI did (0.171.0, against the scripted model server): a
// CODEX_HOME holding only the rollout (none of the state_5, thread_history
// or other sqlite databases of the exporting machine) resumes the thread,
// from another workspace path too; the model gets the earlier turns and
// then a new environment_context with the new cwd and a new skills
// message naming the new CODEX_HOME, so nothing in the rollout is
// rewritten. Threads a thread spawned (sub-agents) have rollouts of their
// own and are not exported.
//
// # Hazards
//
//   - The wire is JSON-RPC 2.0 without the "jsonrpc" member, one object a
//     line; the plugin's small client (conn) is written by hand because no
//     maintained Go library frames it that way, caps a message's size and
//     answers server requests in so little code. A line over
//     OptMaxMessageBytes ends the connection with an error saying so, and
//     the plugin stops that app-server; non-JSON lines, unknown fields,
//     notifications, items and methods are skipped.
//   - Codex waits forever on a server request nobody answers: those the
//     plugin does not serve get error -32601, MCP elicitations a decline.
//   - Codex saves a thread only when its first turn starts; until then
//     thread/resume answers "no rollout found". NewSession returns the
//     thread id at once, and the plugin reports it again (HandleChanged,
//     origin "created") at the first turn/started, the moment it becomes
//     resumable. A session closed before its first prompt cannot be
//     resumed, and ephemeral threads (OptEphemeral) never can.
//   - A resume must answer with the thread it was asked for; any other
//     thread fails the resume rather than continue another conversation.
//   - The npm launcher (bin/codex.js) is a Node script that spawns the
//     real binary: the plugin runs the native binary of the platform
//     package beside it instead, so signals and the parent-death signal
//     reach the process that does the work.
//   - Offline, codex retries its model forever (error notifications with
//     willRetry). OptModelRetryTimeout fails a turn that only retried for
//     that long with "codex could not reach its model …".
//   - A provider's failure reaches the plugin only once codex's own
//     retries are spent (its provider's request_max_retries and
//     stream_max_retries; a 401 is retried too). The turn's error leads
//     with what codexErrorInfo means: a refused key (401, 403) is
//     "authentication failed" with what to configure; overload, rate
//     limits and server errors say so. Codex drops a 5xx's body and
//     reports a text of its own, so the provider's message is lost.
//   - A command approval lists availableDecisions (0.171.0: accept,
//     acceptWithExecpolicyAmendment, cancel). The plugin offers accept,
//     acceptForSession and decline whatever the list says, as codex
//     honours them all; it never offers the execpolicy amendment, which
//     would write a lasting rule into the user's codex configuration.
//     Its title is the command without codex's /bin/bash -lc wrapper.
//   - A stream codex retries mid-message leaves that message's deltas
//     with the client: codex abandons the item (no item/completed) and
//     streams the retry as a new one, and ACP cannot take chunks back.
//   - Credentials in the plugin's environment (CredentialVariables, and
//     the env_key of every model provider in $CODEX_HOME/config.toml) are
//     removed from the app-server's unless OptAllowCredentials, so a key
//     does not silently override the login the user chose; the agenthost
//     binary strips the fixed list before the plugin starts.
//   - A fileChange item reports an updated file as hunks without file
//     headers, an added file as its text, a deleted one as its old text.
//     The diff a client shows is rebuilt from the file on disk: before
//     codex writes (item/started, the approval) it holds the old text and
//     the hunks are applied; after, they are undone. A file that matches
//     neither shows only the hunks' lines.
//   - Codex has no "reject always" decision, so none is offered; "allow
//     always" is codex's acceptForSession, which covers that exact
//     command, as the host's AlwaysScope does.
//   - Codex 0.171.0 offers the model no update_plan tool by default, and
//     update_plan is what codex reports as turn/plan/updated, the ACP
//     plan: without it a client never sees a plan. The plugin therefore
//     passes the config override tools.update_plan.enabled=true to every
//     thread/start and thread/resume unless the session's config option
//     decides update_plan itself ({"tools.update_plan.enabled":false}
//     turns it off; a "tools" table gains update_plan unless it names it).
//     The override also beats a setting in config.toml, so the session
//     option is the way to turn it off.
//   - Codex keeps the thread's last effort when the model changes: a
//     model that does not support it gets its default effort, sent.
//   - Approval policy and sandbox options matching no preset are the mode
//     "custom", which a resume given it defers to those options.
//   - An app-server that exits mid-turn fails the turn with its exit
//     status and last stderr lines; later turns fail with the same cause
//     until the session is closed and resumed.
//
// Tests run the plugin binary against a faithful fake CLI
// (testdata/fakecodex); tests against the real CLI are behind the build
// tag realclis and read its path from AGENTHOST_REAL_CODEX.
package codex
