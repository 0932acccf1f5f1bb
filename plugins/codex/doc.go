// Package codex is the reference agenthost plugin for OpenAI's codex CLI.
// It drives `codex app-server`, the JSON-RPC interface codex's own IDE
// extension uses, one long-lived app-server per session. It is built only
// on package plugin/sdk; command agenthost-plugin-codex serves it as
// "codex". It mirrors codex-cli 0.171.0 (MinVersion, the oldest accepted).
//
// # The process
//
// When the session opens, the plugin finds the CLI: the session option
// cli_path, else the environment variable AGENTHOST_CODEX_PATH, else PATH,
// else ~/.local/bin, ~/.npm-global/bin, /usr/local/bin and /opt/homebrew/bin.
// When that is the npm launcher (bin/codex.js, a Node script that spawns
// the real binary), the native binary of the platform package beside it is
// run instead, so that signals reach the process that does the work. `codex
// --version` must report MinVersion or later. Unless the session option
// skip_auth_check=true, codex must have a credential: an auth.json in
// $CODEX_HOME (default ~/.codex), written by `codex login`, or a key
// variable (OPENAI_API_KEY, CODEX_API_KEY, CODEX_ACCESS_TOKEN) that reaches
// it. Each failure is the session's readiness error and says what to
// install, set or run.
//
// `codex app-server` runs in the session's workspace with explicit pipes
// on stdin, stdout and stderr (whose last lines error messages quote). It
// stays in the plugin's process group, which the host signals as a whole,
// and on Linux it gets Pdeathsig SIGKILL, so it dies with a plugin that is
// SIGKILLed (it is started from a locked OS thread that lives until it is
// reaped: Pdeathsig follows the thread, not the process). Its environment
// is the plugin's, less the provider credential variables (OPENAI_API_KEY,
// CODEX_API_KEY, CODEX_ACCESS_TOKEN, OPENAI_BASE_URL, OPENAI_ORGANIZATION,
// AZURE_OPENAI_API_KEY and the env_key of every model provider in
// $CODEX_HOME/config.toml) unless the session option allow_credentials=true:
// a key in the plugin's environment does not silently override the login
// the user chose. Close closes its stdin, waits, sends SIGTERM, waits, then
// SIGKILLs it (the waits are 2 s each, cut to a third of what is left of
// the Close call's deadline) and always reaps it.
//
// # The protocol
//
// app-server speaks JSON-RPC 2.0 over stdio, one JSON object per line,
// without the "jsonrpc" member; so does the plugin's small client (rpc.go),
// written by hand because no maintained Go library frames JSON-RPC that
// way, caps message size and answers server requests in so little code.
// Lines longer than the session option max_message_bytes (default 64 MiB)
// end the connection with an error saying so, and the plugin stops that
// app-server; non-JSON lines are skipped, unknown fields, notifications,
// items and methods ignored, and server requests the plugin does not serve
// answered with error -32601 (MCP elicitations with a decline), so codex
// never waits on them.
//
// Opening a session is initialize ({clientInfo: {name: "agenthost", title,
// version}, capabilities: {experimentalApi: false, requestAttestation:
// false, optOutNotificationMethods}}), the initialized notification, then
// thread/start ({cwd, model, approvalPolicy, sandbox, config, ephemeral}
// from the session options model, approval_policy, sandbox, config (a JSON
// object of config.toml overrides) and ephemeral) for NewSession, or
// thread/resume ({threadId, cwd, …, excludeTurns: true}) for
// ResumeSession. A resume must answer with the thread it was asked for;
// any other thread fails the resume rather than continue another
// conversation.
//
// # The handle
//
// The handle is the thread id (a UUIDv7). Codex saves a thread, in
// $CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl, only when its first
// turn starts; until then thread/resume answers "no rollout found for
// thread id <id>". The SDK needs a handle when the session opens, so
// NewSession returns the thread id at once (the host records it then), and
// the plugin reports it again, as a HandleChanged update with origin
// "created", when turn/started arrives for the thread's first turn: that
// is the moment the handle becomes resumable. A session closed before its
// first prompt cannot be resumed: ResumeSession fails with "codex has no
// saved conversation for thread <id> … start a new session", and nothing
// is created or overwritten. Resumed threads are saved already and report
// nothing; ephemeral threads (ephemeral=true) are never saved, so they
// never report their handle as resumable.
//
// # Turns
//
// Prompt sends turn/start ({threadId, input}: text blocks as {type:
// "text", text, text_elements: []}, ACP images as image or localImage
// inputs, resource links as their URI) and maps the turn's notifications
// until turn/completed:
//
//   - item/agentMessage/delta → message chunks (an agentMessage item that
//     completes without deltas → one chunk of its text);
//   - item/reasoning/summaryTextDelta and textDelta → thought chunks;
//   - commandExecution, fileChange, mcpToolCall, dynamicToolCall and
//     webSearch items → a tool call at item/started (kinds execute, edit,
//     other, other, fetch) and a tool call update at item/completed
//     (completed, or failed for failed and declined), with the command's
//     output or the diffs as content;
//   - turn/plan/updated → plan;
//   - thread/tokenUsage/updated → usage, from its "last" breakdown (the
//     tokens of the model request that just finished), so a turn's usage
//     updates add up to the turn's usage;
//   - turn/completed's status completed, interrupted, failed → end_turn,
//     cancelled, or a failed turn whose error is turn.error's message (and
//     additionalDetails).
//
// Cancelling the turn's context sends turn/interrupt; the turn ends with
// StopCancelled when codex confirms it with turn/completed, or after 3 s
// if it does not. error notifications with willRetry are codex retrying
// its model: they are logged, and with the session option
// model_retry_timeout (a duration; default 0, wait as long as codex
// retries, which offline is forever) a turn that makes no progress but
// retries for that long is interrupted and failed with "codex could not
// reach its model …". An app-server that exits mid-turn fails the turn
// with its exit status and last stderr lines; later turns fail with the
// same cause, until the session is closed and resumed.
//
// # Approvals
//
// item/commandExecution/requestApproval, item/fileChange/requestApproval
// and item/permissions/requestApproval (and the legacy execCommandApproval
// and applyPatchApproval) become permission requests on the item's tool
// call, each asked in its own goroutine so the turn keeps streaming. The
// options are codex's decisions: accept (allow_once), acceptForSession
// (allow_always) and decline (reject_once); a request cancelled (the turn
// was cancelled) is answered "cancel", which also interrupts codex's turn.
// The answer is the JSON-RPC response {"decision": …}; for permissions it
// is {"permissions": <what was asked>, "scope": "turn"|"session"}, or no
// permissions when denied; legacy requests get approved,
// approved_for_session, denied or abort. When codex withdraws a request
// (serverRequest/resolved), the user is no longer asked. Whether codex
// asks at all is the session option approval_policy (untrusted,
// on-request, never; unset: codex's configured default).
package codex
