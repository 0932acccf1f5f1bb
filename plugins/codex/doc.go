// Package codex is the reference agenthost plugin for OpenAI's codex CLI.
// It drives `codex app-server`, the JSON-RPC interface codex's own IDE
// extension uses, one long-lived app-server per session. It is built only
// on plugin/sdk and its cliproc package, which owns the app-server's
// process; command agenthost-plugin-codex serves it as "codex". It mirrors
// codex-cli 0.171.0 (MinVersion, the oldest accepted). The session options
// are the Opt constants.
//
// # The model
//
// Opening a session runs the readiness checks, each failing with what to
// install, set or run: the binary (OptCLIPath, EnvCodexPath, PATH, the
// usual install locations), its version (`codex --version`), and a
// credential (an auth.json in $CODEX_HOME, written by `codex login`, or a
// key variable that reaches codex, a model provider's env_key included).
// It then starts `codex app-server` in the workspace and opens the thread:
// initialize, initialized, then thread/start for NewSession or
// thread/resume for ResumeSession. The handle is the thread id.
//
// Prompt sends turn/start and maps the turn's notifications until
// turn/completed: message and reasoning deltas become message and thought
// chunks, tool items (commands, file changes, MCP and dynamic tool calls,
// web searches) tool calls at item/started and their updates at
// item/completed, turn/plan/updated a plan, thread/tokenUsage/updated
// usage (its "last" breakdown, so a turn's updates add up), and the
// turn's status its end. Approval requests become permission requests,
// each asked in its own goroutine so the turn keeps streaming; their
// options are codex's decisions (accept, acceptForSession, decline).
// Cancelling the turn sends turn/interrupt and ends with StopCancelled
// when codex confirms it, or 3 s later. Close stops the app-server under
// cliproc's rule (stdin EOF, SIGTERM, SIGKILL, each wait at most 2 s and
// sharing the Close deadline).
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
//   - An app-server that exits mid-turn fails the turn with its exit
//     status and last stderr lines; later turns fail with the same cause
//     until the session is closed and resumed.
//
// Tests run the plugin binary against a faithful fake CLI
// (testdata/fakecodex); tests against the real CLI are behind the build
// tag realclis and read its path from AGENTHOST_REAL_CODEX.
package codex
