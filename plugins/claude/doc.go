// Package claude is the reference agenthost plugin for Claude Code: it
// drives the `claude` command line agent the way Anthropic's Agent SDKs do,
// as one long-lived process per session speaking stream-json on stdin and
// stdout plus the SDKs' control protocol. It is built only on package
// plugin/sdk; command agenthost-plugin-claude serves it as "claude". It
// mirrors claude 2.1.332 and needs 2.0.0 or later.
//
// # Opening a session
//
// NewSession and ResumeSession run the readiness checks, in order, and fail
// with a message that says what to do:
//
//   - the binary: the session option cli_path, else AGENTHOST_CLAUDE_PATH,
//     else claude on PATH, else the usual install locations
//     (~/.claude/local/claude, ~/.local/bin/claude, ~/.npm-global/bin/claude,
//     ~/node_modules/.bin/claude, ~/.yarn/bin/claude, /usr/local/bin/claude,
//     /opt/homebrew/bin/claude). An explicit path that does not work is an
//     error, never a reason to look elsewhere.
//   - the version: `claude --version` ("2.1.332 (Claude Code)") must be
//     2.0.0 or later, the official SDKs' minimum: 1.x mints a new session
//     id on every print-mode resume and lacks parts of the control protocol.
//   - credentials: one of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
//     CLAUDE_CODE_OAUTH_TOKEN (or a Bedrock/Vertex/Foundry selection) that
//     the session passes on (allow_credentials=true), a login in
//     $CLAUDE_CONFIG_DIR/.credentials.json (default ~/.claude), or an
//     apiKeyHelper in its settings.json. A login kept in the macOS keychain
//     is invisible to this check: skip it with skip_auth_check=true. A
//     session whose credentials are missing after all still fails its first
//     turn with a clear authentication error.
//
// Then the plugin starts, in the session's workspace,
//
//	claude -p --output-format stream-json --input-format stream-json --verbose
//	       --permission-prompt-tool stdio [options] --session-id=<uuid>|--resume=<id>
//
// and sends the control protocol's initialize request. A new session gets
// a pre-assigned random UUID (or the session option session_id), which is
// its handle. A resumed one passes the handle to --resume; a CLI that does
// not know it answers with an error result instead of initializing, and
// ResumeSession fails with the CLI's own "No conversation found with
// session ID: …". The CLI reports its session id in the system/init line
// of the first turn and in every result; if it differs from the handle
// (1.x mints one per resume) the plugin reports it with turn.HandleChanged
// and resumes from it thereafter.
//
// The CLI stays in the plugin's process group (the host signals and kills
// the whole group) and, on Linux, gets SIGKILL as its parent-death signal,
// so it dies with a plugin that is SIGKILLed. Its stdin, stdout and stderr
// are pipes of the plugin's own; the end of stderr is quoted in errors.
//
// # Environment
//
// The CLI inherits the plugin's environment less CLAUDECODE (which would
// make it think it runs nested in Claude Code) and, unless the session
// option allow_credentials is "true", less the provider credential,
// cloud-credential and routing variables of agent-clis.md §1.8
// (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN,
// AWS_*, ANTHROPIC_BASE_URL, CLAUDE_CODE_USE_BEDROCK, …). The host strips
// its own list before the plugin starts; this is defence in depth. PWD is
// set to the workspace.
//
// # Turns
//
// Prompt writes one user line,
//
//	{"type":"user","message":{"role":"user","content":"…"},"parent_tool_use_id":null,"session_id":"default"}
//
// (content is an array of Anthropic blocks when the prompt has images or
// resources) and maps stdout until the turn's result line: assistant text
// blocks become message chunks, thinking blocks thoughts, tool_use blocks
// tool calls (TodoWrite also a plan), tool_result blocks in user lines tool
// call updates, and the result's usage a usage update. The result's
// is_error is always checked, because an API or authentication failure
// arrives as subtype "success" with is_error true: an authentication
// failure fails the turn with "claude could not authenticate (…): run
// `claude auth login`, or …", any other error with the CLI's own text.
// error_max_turns ends the turn with max_turn_requests, a max_tokens or
// refusal stop reason with the matching stop reason.
//
// A can_use_tool control request becomes turn.RequestPermission with the
// options allow, allow_always (when the CLI suggests permission rules,
// which the answer then applies) and reject; the answer goes back as the
// control response ({"behavior":"allow","updatedInput":…} or
// {"behavior":"deny","message":…}). A control_cancel_request withdraws it.
// Other control requests (hooks, SDK MCP servers, which the plugin never
// registers) are answered with an error so the CLI never waits.
//
// Cancelling a turn sends the control request interrupt; the CLI prints an
// interrupt marker and an error_during_execution result, and the turn ends
// with StopCancelled. A CLI that has not ended the turn 3 s later is
// stopped.
//
// Stdout is read line by line with an explicit cap (64 MiB, session option
// max_line_bytes); a longer line fails the turn. Lines that are not JSON
// objects (e.g. "[SandboxDebug] …"), unknown message types and unknown
// fields are ignored. When the CLI exits during a turn the turn fails with
// its exit status and the end of its stderr; when a CLI died or had to be
// stopped, the next turn starts a new one on the same conversation
// (--resume once a turn has reached the CLI, else the same --session-id).
//
// # Closing
//
// Close closes the CLI's stdin (the CLI flushes its transcript and exits),
// waits up to the grace (session option stop_grace, default 5 s, shortened
// to fit the Close deadline), sends SIGTERM, waits again, then SIGKILLs it;
// it always reaps it.
//
// # Session options
//
//	cli_path              the claude binary (path, or name on PATH)
//	model                 --model
//	permission_mode       --permission-mode
//	allowed_tools         --allowedTools (e.g. "Read,Bash(git log:*)")
//	disallowed_tools      --disallowedTools
//	max_turns             --max-turns
//	system_prompt         --system-prompt (replaces Claude Code's)
//	append_system_prompt  --append-system-prompt
//	session_id            the UUID of a new session (default: random)
//	allow_credentials     "true": pass provider credentials to the CLI
//	skip_auth_check       "true": skip the credential readiness check
//	stop_grace            Close's wait after EOF and after SIGTERM (5s)
//	max_line_bytes        cap of one stdout line (64 MiB)
//
// Unlike the Python SDK, the plugin does not pass --system-prompt "" by
// default: an agenthost session is a Claude Code session, with Claude
// Code's own system prompt, settings and CLAUDE.md files.
//
// Tests run the plugin binary against a faithful fake CLI
// (testdata/fakeclaude); tests against the real CLI are behind the build
// tag realclis and read its path from AGENTHOST_REAL_CLAUDE.
package claude
