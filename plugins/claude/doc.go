// Package claude is the reference agenthost plugin for Claude Code: it
// drives the `claude` command line agent the way Anthropic's Agent SDKs do,
// as one long-lived process per session speaking stream-json on stdin and
// stdout plus the SDKs' control protocol. It is built only on plugin/sdk
// and its cliproc package, which owns the CLI's process; command
// agenthost-plugin-claude serves it as "claude". It mirrors claude 2.1.332
// and needs 2.0.0 or later. The session options are the Opt constants;
// Capabilities is what the plugin declares (sdk.WithCapabilities).
//
// # The model
//
// Opening a session runs the readiness checks, each failing with what to
// do: the binary (OptCLIPath, EnvCLIPath, PATH, the usual install
// locations; an explicit path that does not work is an error, never a
// reason to look elsewhere), its version (`claude --version`), and a
// credential the CLI will find. Then the plugin starts, in the workspace,
//
//	claude -p --output-format stream-json --input-format stream-json --verbose
//	       --include-partial-messages --permission-prompt-tool stdio [options]
//	       [--mcp-config=<the client's MCP servers>] --session-id=<uuid>|--resume=<id>
//
// and sends the control protocol's initialize request, whose answer names
// the CLI's slash commands (reported as available commands when the
// session opens, outside any turn) and models (the model config option's
// values, each with its effort levels). The handle is the
// Claude session id: a new session gets a pre-assigned UUID (or
// OptSessionID), a resumed one passes the handle to --resume, and a CLI
// that cannot open it answers with an error result whose text the
// session's error quotes.
//
// # The session surface
//
// Options: every option is acknowledged as given and accepted again on
// resume; one the plugin does not know, a renamed one (permission_mode is
// now mode) or a bad value is an *sdk.InvalidOptionError naming it. The
// modes are the permission modes (mode, --permission-mode);
// bypassPermissions only where the CLI allows it. SetMode sends
// set_permission_mode, SetConfigOption set_model (model) or
// apply_flag_settings' effortLevel (effort); with no CLI running the
// next one's argv carries the change. The CLI prints a system/status line
// carrying permissionMode whenever the mode changes: one the plugin did
// not set (the agent leaving plan mode) is reported as current_mode and
// config_options, inside a turn or, between turns, through the Reporter
// before the next prompt. A /clear starts a new conversation
// (conversation_reset, then a new session id), reported as a handle of
// origin "created" so every later resume continues it.
//
// Prompt writes one user line and maps stdout until the turn's result
// line: the model's text and thinking deltas (stream_event lines, which
// --include-partial-messages asks for) become message chunks and thoughts
// as they arrive, and the assistant line that completes each block adds
// only what the deltas did not carry; text blocks that were not streamed
// become message chunks, thinking blocks thoughts,
// tool_use blocks tool calls (TodoWrite also a plan) with their kind,
// title, locations and, for the file-editing tools, a diff from the input;
// tool_result blocks tool call updates with the line's tool_use_result as
// rawOutput and, for Edit, MultiEdit and Write, the diffs of its
// structuredPatch; the result's usage a usage update. A can_use_tool
// control request becomes turn.RequestPermission with the whole tool call
// and four answers (allow, allow_always, reject, reject_always) and the
// scope "allow always" covers (below); ExitPlanMode's offers the modes
// to go on in instead. Its answer is the control
// response; a control_cancel_request withdraws it. Cancelling a turn sends the
// interrupt control request; a CLI that has not ended the turn 1.5 s
// later is stopped and the turn ends cancelled all the same, inside the
// 2 s a cancel promises. A CLI that died or was stopped is replaced at the
// next turn, on the same conversation; one that turns out to have died before it
// took the prompt (it printed nothing of the turn) is replaced and given
// the prompt again, once. Close stops the CLI under cliproc's rule
// (stdin EOF, on which the CLI flushes its transcript; SIGTERM; SIGKILL;
// the waits sharing the Close deadline, each at most OptStopGrace).
//
// # What an allow-always covers
//
// The host remembers an allow_always answer per PermissionRequest.AlwaysScope,
// durably, and answers every later request of that scope itself, unseen
// by the user; so a scope covers only what the user saw (tools.go's
// alwaysScope, the rules of plugins/internal/allowscope):
//   - Bash: the exact command, "Bash(git status)"; `git status -s` is
//     another scope. A command with ; & | < > $ ` ( ) or a line break, a
//     quote that does not parse, a first word that assigns (X=1 make) or
//     may expand, or a shell or wrapper as its program (sh, bash, env,
//     sudo, xargs, nohup, timeout, npx, eval, source …) has no scope.
//   - Edit, MultiEdit, Write, NotebookEdit: "edit", shared, only for a file
//     inside the workspace or an add_dirs directory (symbolic links
//     resolved); an edit elsewhere (~/.bashrc) has no scope.
//   - Any other tool: its name.
//
// A request without a scope offers only allow and reject; an "always"
// answer to it counts once. allow_always also passes the CLI's own rule
// suggestions back (never a mode switch), which the CLI applies itself.
//
// # Portable state
//
// The agent is an sdk.StateExporter and sdk.StateImporter (state.go), so
// a host on another machine can continue a session. The state is
// plugins/internal/portable's envelope holding what claude 2.1.332 keeps
// of the conversation under its config directory:
// projects/<project>/<id>.jsonl (the transcript) and everything under
// projects/<project>/<id>/ (sub-agents' transcripts and meta files,
// large tool outputs in tool-results/), paths relative to the config
// directory. ExportState first waits (at most 5 s) for the transcript to
// hold the last assistant or user line the CLI printed, matched by its
// uuid: the CLI writes the transcript behind its output. ImportState
// refuses another agent's or another session's state, any other file, a
// transcript naming another session, and never overwrites a file at the
// target that is another conversation's; a copy of this conversation
// with turns the import lacks is kept as <id>.jsonl.displaced-<time>.
//
// What the live CLI did (2.1.332, against the scripted model server): a
// transcript placed in ANY project directory is found by --resume from
// any cwd, and the CLI keeps appending to it there; the model then gets
// the earlier turns replayed (the first turn's environment block with
// the old cwd included) followed by an "Environment update" block:
// "Primary working directory: <new> (was <old>)". So the import keeps
// the exporting machine's project directory name (or this machine's
// existing copy of the session, so there is one copy), and no workspace
// path is rewritten. What is rewritten is the session directory's own
// absolute path, which the CLI writes into the conversation for a large
// tool output ("Full output saved to: <config>/projects/…/tool-results/…")
// and does not update on resume: in the .jsonl files, the exporting
// machine's <config>/projects/<project>/<id>/ becomes this machine's.
// The todos live in the transcript (2.1.332 writes no todos directory);
// file-history/<id> (file checkpoints for rewinding) is not moved, since
// it would restore another machine's files. ImportState runs before a
// session opens and so finds the config directory in the plugin's own
// environment (CLAUDE_CONFIG_DIR, else HOME), not a session's env
// option.
//
// # Hazards
//
//   - An API or authentication failure arrives as a result of subtype
//     "success" with is_error true: is_error is always checked, and an
//     authentication failure says how to log in.
//   - Claude Code 1.x mints a new session id on every print-mode resume.
//     The CLI reports its id in system/init and every result; one that
//     differs from the handle is reported with turn.HandleChanged and
//     resumed from thereafter.
//   - A replacement CLI must --resume once a turn has reached the CLI (its
//     transcript exists) and reuse --session-id before that; a CLI that
//     died inside its first turn may have written the transcript already,
//     so the plugin looks for it.
//   - The CLI waits forever on a control request nobody answers: those the
//     plugin does not serve (hooks, SDK MCP servers, which it never
//     registers) are answered with an error.
//   - Stdout lines are capped (OptMaxLineBytes); a longer line fails the
//     turn. Lines that are not JSON objects ("[SandboxDebug] …"), unknown
//     message types and unknown fields are skipped.
//   - Credentials in the plugin's environment (CredentialVariables) are
//     removed from the CLI's unless OptAllowCredentials, so a key in a
//     developer's shell never overrides the user's login; the agenthost
//     binary strips the same list before the plugin starts. CLAUDECODE is
//     always removed: it would make the CLI think it runs nested.
//   - Claude Code 2.1.332 offers its newer models no TodoWrite by
//     default, only the task tools (TaskCreate, TaskGet, TaskList,
//     TaskUpdate, TaskStop), or neither. TodoWrite's todos are the ACP
//     plan; the task tools have no plan form (each call touches one task),
//     so a client would never see a plan. The plugin therefore sets
//     CLAUDE_CODE_ENABLE_TASKS=false and CLAUDE_CODE_ENABLE_TODO_TOOLS=true
//     in the CLI's environment (env.go's planVars), each only as a default:
//     a session's env.NAME option wins, then the plugin's own environment
//     (the operator's), so env.CLAUDE_CODE_ENABLE_TASKS=true brings the
//     task tools back. 2.1.332 defers TodoWrite behind ToolSearch (the
//     model request does not list it), yet the model can call it.
//   - The credential check cannot see a login kept in the macOS keychain:
//     OptSkipAuthCheck skips it, and a session without credentials after
//     all fails its first turn with an authentication error.
//   - Unlike the Python SDK the plugin does not pass --system-prompt "":
//     an agenthost session is a Claude Code session, with Claude Code's
//     own system prompt, settings and CLAUDE.md files.
//   - A Task call's sub-agent speaks in lines whose parent_tool_use_id
//     names the call. 2.1.332 prints stream events only for the main
//     agent, and of a sub-agent only the messages that open with a
//     tool_use or tool_result, unless the initialize request sets
//     forwardSubagentText (the plugin does not). The plugin reports a
//     sub-agent's lines and stream events like the main agent's, each
//     text once; only a sub-agent's usage is left out of the context
//     the usage update reports.
//   - Permission requests of 2.1.332 carry no title (the plugin makes one
//     from the tool and its subject, "Write /path"); a Write in the
//     workspace asks in the default permission mode, and so does a Bash
//     command that writes, while a read-only one (echo, ls) runs unasked.
//   - What 2.1.332 does differently from what the captured transcripts or
//     Zed's adapter suggest: set_model of a model its list lacks asks the
//     provider (a model request) before answering check_rejected, so the
//     config option takes only listed values; MCP tools are deferred behind
//     ToolSearch (the model request names them in a system reminder, not in
//     its tools) unless ENABLE_TOOL_SEARCH=false; ExitPlanMode's permission
//     request carries an empty input (the plan is in the tool call) and no
//     suggestions; an Edit's "always" suggestion is to switch to
//     acceptEdits, which the plugin does not pass back (the host remembers
//     the "edit" scope instead); a Bash command prints nothing until it
//     ends (no output deltas; its output arrives with the result); the
//     flags that skip or allow skipping permissions, and so the
//     bypassPermissions mode, are refused to root unless IS_SANDBOX=1,
//     and set_permission_mode to bypassPermissions needs a launch with the
//     flag that allows it; /clear's new session id is the
//     one of the lines after conversation_reset (not its
//     new_conversation_id), and its transcript exists at once.
//
// Tests run the plugin binary against a faithful fake CLI
// (testdata/fakeclaude), which follows what the live CLI was seen doing;
// tests against the real CLI are behind the build tag realclis and read
// its path from AGENTHOST_REAL_CLAUDE, and internal/realcli drives the
// pinned CLI through whole turns of `agenthost serve` against a scripted
// model server.
package claude
