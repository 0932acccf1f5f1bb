// Package journal owns the payload of every journal entry: what the host
// writes for a prompt, an agent update and a turn's end, and how every
// reader reads them back, the store's lifecycle events included.
//
// # The model
//
// A record is one entry's payload, decoded. The set is closed, as
// containerd's runtime events are: Decode turns an entry into a *Prompt,
// an *Update, a *Stop or a *Lifecycle (the lease's own events, which the
// store writes inside its transitions as leasestore.LifecycleEvent), and
// Encode is the only way back to bytes. A reader switches on the type and
// never parses a payload itself.
//
// An Update carries the agent's update in the Agent Client Protocol's
// session/update shape, as a SessionUpdate: one type per kind (Chunk,
// ToolCall, ToolCallUpdate, Plan, Usage, and the session-level
// CurrentMode, ConfigOptions, AvailableCommands and SessionInfo, which an
// agent reports between turns too, journaled without a turn id) and
// agenthost's own kinds under
// the "_agenthost/" prefix, which ACP reserves for extensions
// (HandleChanged, PermissionRequest, PermissionResolved, Unknown). ACP's
// usage_update carries what a client shows: Used tokens of a context
// window of Size, and the cost when it is known; the provider's raw token
// counts travel under _meta.agenthost. Other holds an update of a kind
// this build does not model, byte for byte, so a reader passes it on.
// Tool calls carry ACP's content (blocks and diffs) and locations; a
// running tool's output arrives as deltas, each journaled alone under
// codex-acp's _meta.terminal_output, so replaying the journal replays the
// output exactly.
// ACP converts an update to the ACP library's type for a session/update
// notification; DecodeUpdate reads the update object of such a
// notification.
//
// The plugin protocol is converted to records in package pluginclient;
// this package knows no protocol and no store backend, only the store's
// model types.
//
// # Hazards
//
// The bytes are the API. The local API sends stored payloads to clients
// raw (_agenthost/journal notifications) and builds session/update
// notifications from them, and journals outlive the binary that wrote
// them. So every record encodes exactly as the host has always written
// it: JSON objects whose members once came from maps are declared in
// sorted member order (encoding/json writes struct fields in declaration
// order), omitted members stay omitted, and content and raw tool input or
// output a plugin sent pass through as the JSON it sent (compacted, with
// <, > and & escaped, as encoding/json writes raw JSON). testdata/golden
// fixes the bytes of every kind; a change there is a change of the API.
//
// Decoding is strict about types and lenient about members: an unknown
// member is ignored, a member of the wrong type is an error, and a reader
// skips a record it cannot decode rather than guess at it.
package journal
