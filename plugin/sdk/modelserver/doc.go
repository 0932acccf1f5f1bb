// Package modelserver is a scripted model server for tests of coding-agent
// CLIs. It speaks the Anthropic Messages API as the claude CLI uses it and
// the OpenAI Responses API as codex uses it, on a loopback port it opens
// itself (127.0.0.1, a free port; never another address), so a test can
// drive a real CLI through whole turns with no network and no credentials.
//
// A test starts a Server, scripts its replies turn by turn and points the
// CLI at it:
//
//	srv, err := modelserver.Start(modelserver.Config{})
//	...
//	defer srv.Close()
//	srv.Script(
//		modelserver.Tool("Bash", `{"command":"echo hi"}`),
//		modelserver.Text("done"),
//	)
//	// claude: ANTHROPIC_BASE_URL=srv.URL(), ANTHROPIC_API_KEY=anything
//	// codex:  a model provider with base_url = srv.OpenAIBaseURL(),
//	//         wire_api = "responses" and an env_key set to anything
//
// Every model request (a POST to /v1/messages or /v1/responses, streaming
// or not) takes the next Reply, whichever API it uses. A Reply streams
// thinking, text and tool calls, in that order, each in many small deltas
// (ChunkSize runes, default 3), optionally Delay apart; or it fails: an
// HTTP Status with the API's error body and retry-after, a connection
// dropped after CutAfter deltas (Drop), a stream that stops sending
// (Stall), or no answer at all (Hang). When the script has run out, the
// request is answered 400 with a message that says so ("modelserver:
// script exhausted: ...") and recorded as Exhausted: a test sees the CLI's
// error rather than a hang.
//
// Every request is recorded before it is answered: path and query,
// headers, the raw body, and decoded from it the model, the stream flag,
// the system prompt, the offered tool names and the conversation as
// Messages of Parts (text, thinking, tool calls, tool results), so a test
// asserts what the CLI really sent: Requests, ModelRequests, and
// WaitModelRequests, which waits for the CLI's n-th model request. Other
// requests are answered without the script: count_tokens with an
// estimate, GET /v1/models with an empty list, anything else 404 (Kind
// Unmatched, logged at warn level), so a CLI that starts calling something
// new shows up in the record instead of failing obscurely.
//
// Every wait ends with the request's context or with Close; Close ends
// open streams by dropping their connections and returns once every
// handler has returned. The package imports neither the testing package
// nor anything of the host, so a third party wrapping a CLI can use it in
// its own tests.
//
// # Checked against
//
// claude 2.1.332 (@anthropic-ai/claude-code, `claude -p --output-format
// stream-json --verbose --include-partial-messages`) and codex 0.171.0
// (@openai/codex, `codex exec --json`, a responses provider), each through
// a text turn, tool-call turns whose results come back in the next request
// (claude: thinking, Bash, Write; codex: exec_command as a function call
// and, for its default model, the code-mode custom tool exec calling
// exec_command and apply_patch), 401, 429 and 529 with retry-after, a
// dropped stream and an exhausted script. What the CLIs did:
//
//   - claude sends one streaming POST /v1/messages?beta=true per model
//     call, x-api-key set, with "system" role entries inside messages
//     (they decode as Messages with Role "system"). After a failed
//     streaming request it may retry without streaming, so non-streaming
//     requests take a reply too.
//   - claude retries 401, 429, 5xx and 529 up to 10 times with
//     exponential backoff, honouring retry-after (its stream-json shows
//     system/api_retry lines); CLAUDE_CODE_MAX_RETRIES lowers that. It also
//     retried the exhausted script's 400 several times, quickly. Script
//     one failure per attempt (Repeat) or a success after the failures.
//   - codex retries a dropped stream and 401, 429 and 5xx ("Reconnecting...
//     n/5", plus request-level retries its provider's request_max_retries
//     and stream_max_retries control); a 400 fails the turn at once with
//     the error body as its message.
//   - codex's tools depend on the model: for its default model it offers
//     no top-level tools but an "additional_tools" input item whose
//     namespaces hold a custom (freeform) tool "exec" that runs JavaScript
//     calling tools.exec_command and tools.apply_patch; for other model
//     names (which it warns have no metadata) it offers exec_command
//     ({"cmd": "..."}) as a function tool. There is no "shell" tool.
//
// # Hazards
//
//   - One script, shared by both APIs and every client of the server:
//     two CLIs on one server race for replies. Use a server per CLI.
//   - Retries take replies. A CLI's retry of a failure, or its
//     non-streaming fallback, is a model request like any other.
//   - It is a fake: no tokenizer (usage, when not scripted, is a quarter
//     of the bytes), no validation of the request beyond decoding it, no
//     prompt caching, no mid-stream error events (a failure is a status or
//     a cut), no WebSocket transport, and of compressed request bodies
//     only gzip. A real API rejects much of what it accepts.
//   - Wire formats drift with CLI releases. The versions above are what
//     it was checked with; a new CLI version may call new endpoints (they
//     are recorded as Unmatched) or need new events.
package modelserver
