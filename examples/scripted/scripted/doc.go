// Package scripted is a deterministic agent for testing hosts and clients:
// it needs no network and no provider, and the prompt text says what the
// turn does. It is written the way a third-party plugin is, on package
// plugin/sdk alone, and shows every part of the SDK's session surface;
// command agenthost-plugin-scripted serves it, declaring Capabilities.
//
// The prompt's text, trimmed, is one of these commands (keywords are lower
// case; each may be written as a slash command, "/count 3"):
//
//	count N [INTERVAL]  stream N message chunks "1" … "N", INTERVAL apart
//	                    (a Go duration; default 0), then end the turn
//	sleep DURATION      hold the turn for DURATION, then end it
//	wait                hold the turn until it is cancelled (the
//	                    conformance kit's default hold prompt)
//	fail MESSAGE        fail the turn with MESSAGE as its error
//	auth                fail the turn as a provider refusing the
//	                    credentials (sdk.ErrAuthRequired)
//	tool                report a tool call "list files" (pending, then
//	                    in_progress, then completed with its output) and a
//	                    message chunk
//	ask                 ask the user for permission (allow or reject) and
//	                    report the answer as a message chunk,
//	                    "permission: selected allow" or "permission: cancelled"
//	edit PATH TEXT      write TEXT and a newline to PATH, a file of the
//	                    workspace, as a coding agent's edit goes: a tool call
//	                    of kind edit with the diff (old and new text) and the
//	                    file's location; in mode default a permission
//	                    request with the four ACP options and AlwaysScope
//	                    "edit"; the file written when allowed, then
//	                    "edited PATH"
//	usage USED SIZE     report usage: USED tokens in context of a SIZE-token
//	                    window (and USED input tokens), then end the turn
//	mcp                 one chunk per MCP server the session was opened
//	                    with, "mcp: NAME (stdio) COMMAND ARGS… ENV…", or
//	                    "mcp: no servers"
//	settings            one chunk: "mode M, model M, effort E"
//	title TEXT          report TEXT as the session's title
//	exitplan            leave plan mode for mode default, the agent's own
//	                    decision (as claude's ExitPlanMode): it reports the
//	                    new mode and config options itself
//	history             one chunk with the conversation's earlier prompts,
//	                    "history: 2 earlier prompts: count 3 | hello", or
//	                    "history: no earlier prompts"
//
// Any other text is echoed back as one message chunk. A command with
// malformed arguments ("count x") fails the turn with a message that gives
// the expected syntax. When the host cancels the turn, count, sleep, wait,
// ask and edit stop at once and end it as cancelled.
//
// # Rich prompts
//
// Before the command runs, each image, resource (embedded context) and
// resource_link block of the prompt is described in a chunk of its own,
// "received image image/png, 68 bytes", so a test sees what arrived. These
// are the blocks the agent declares; audio it does not, and a block it
// does not declare fails the turn rather than being dropped.
//
// # Settings
//
// Session options (all optional; any other is refused with an
// *sdk.InvalidOptionError naming it, as is a bad value):
//
//	mode               default (edits ask), acceptEdits (edits are made
//	                   without asking) or plan (edits are not made); named
//	                   after claude's permission modes
//	model              default, fast, smart or any other name
//	effort             low, medium (the default) or high
//	require_model      "true": opening fails with "scripted: no model
//	                   configured: set the model option" without a model
//	require_auth       "true": opening fails as auth required
//	report_commands    "true": the slash commands are reported when the
//	                   session opens (off by default, so the journals of
//	                   host tests hold only what their turns did)
//	allow_credentials  the host's; ignored
//
// The session's modes and its config options mode, model and effort come
// back from NewSession and ResumeSession; SetMode and SetConfigOption
// change them at any time, a turn running or not, and the config option
// "mode" and the mode are one setting. The slash commands (the command
// language above) are reported through the Reporter whenever a session
// opens with report_commands, the title when a title command runs.
//
// # Sessions
//
// Sessions have handles "scripted-<random id>"; resuming returns the given
// handle unchanged, and the session options are echoed back. MCP servers
// (stdio only, as declared) are recorded, not started. A reject_always
// answer to an edit refuses every later edit of the session, across plugin
// restarts (a file in the session directory); allow_always is the host's
// to remember, and the agent keeps no memory of it, so a test of a second
// edit not being asked shows the host's grant at work.
//
// # Provider state
//
// The conversation is the text of the session's prompts, every prompt
// (history included), oldest first. It is kept in the session directory
// per handle, so a plugin started again on the same machine resumes it,
// and the agent is an sdk.StateExporter and sdk.StateImporter: its export
// (versioned JSON naming the handle) resumed on another machine, in
// another session directory, continues the same conversation, which the
// history command shows. An import keeps this machine's copy when that
// already holds the imported prompts and more (a host's state can be a
// turn behind).
package scripted
