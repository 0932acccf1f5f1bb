// Package localapi serves a host's local API: JSON-RPC 2.0 over
// newline-delimited JSON, compatible with the Agent Client Protocol, so a
// desktop app, the agenthost CLI, or any editor that speaks ACP can drive
// the host's sessions.
//
// The ACP methods map onto the host: initialize; session/new starts a
// session (the agent is named in _meta.agenthost.agent, or the server's
// default agent); session/load replays the session's journal as
// session/update notifications and then follows it; session/resume
// follows without replaying; session/prompt runs a turn and answers with its
// stop reason once the turn's updates were sent (on a connection that has
// the session open, a session whose plugin is gone is resumed first, so
// the conversation goes on after a plugin crash); session/cancel;
// session/list; session/close stops a session and stops following it.
// session/new takes the agent's session options in
// _meta.agenthost.options. A plugin's permission
// request reaches the client as session/request_permission and the answer
// goes back to the plugin.
//
// agenthost's own methods use the _agenthost/ prefix: subscribe to a
// session's journal from a sequence number (entries arrive as
// _agenthost/journal notifications; a client that reconnects with the last
// seq it saw misses nothing), stop a session, read one session's record,
// the host's status, and the configured agents. Package api owns this
// contract (method names, params, results, error codes, the journal entry
// shape); this package serves it, converting the host's and the store's
// types to the API's, and reads journal payloads with package journal.
//
// Every request line passes a filter first: a line that is not JSON gets a
// parse error, one that is not a JSON-RPC 2.0 object an invalid-request
// error, and one over MaxRequestBytes an error naming the limit; none of
// them reaches the host. Served on a unix socket, only peers running as the
// host's user are accepted.
package localapi
