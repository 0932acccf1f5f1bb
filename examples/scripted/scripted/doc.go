// Package scripted is a deterministic agent for testing hosts: it needs no
// network and no provider, and the prompt text says what the turn does. It
// is written the way a third-party plugin is, on package plugin/sdk alone;
// command agenthost-plugin-scripted serves it.
//
// The prompt, trimmed, is one of these commands (keywords are lower case):
//
//	count N [INTERVAL]  stream N message chunks "1" … "N", INTERVAL apart
//	                    (a Go duration; default 0), then end the turn
//	sleep DURATION      hold the turn for DURATION, then end it
//	fail MESSAGE        fail the turn with MESSAGE as its error
//	tool                report a tool call "list files" (pending, then
//	                    in_progress, then completed with its output) and a
//	                    message chunk
//	ask                 ask the user for permission (allow or reject) and
//	                    report the answer as a message chunk,
//	                    "permission: selected allow" or "permission: cancelled"
//	usage USED SIZE     report usage: USED tokens in context of a SIZE-token
//	                    window (and USED input tokens), then end the turn
//
// Any other prompt is echoed back as one message chunk. A command with
// malformed arguments ("count x") fails the turn with a message that gives
// the expected syntax. When the host cancels the turn, count, sleep and ask
// stop at once and end it as cancelled.
//
// Sessions have handles "scripted-<random id>"; resuming returns the given
// handle unchanged, and the session options are echoed back. To let hosts
// test a readiness failure, opening a session fails with "scripted: no model
// configured: set the model option" when the option require_model is "true"
// and the option model is empty or missing.
package scripted
