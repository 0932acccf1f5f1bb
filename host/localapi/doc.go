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
//
// The session surface an agent declares (its plugin's capabilities,
// learned once per host, see host.Capabilities) shapes every method:
//
//   - initialize declares promptCapabilities and mcpCapabilities for the
//     server's default agent (`agenthost acp --agent NAME`), or, on a
//     socket serving several agents without one, what every agent
//     supports; each agent's own are under _meta.agenthost.agents
//     (api.InitializeMeta). authMethods lists every agent's (ids prefixed
//     "<agent>:" when the connection serves several); authenticate accepts
//     those and tells the plugin nothing (see Authenticate).
//   - session/new takes mcpServers (stdio, http, sse: only the transports
//     the agent declares) and the agent's options in
//     _meta.agenthost.options (only those it declares, when it declares
//     any). The host stores them as the plugin acknowledged them, and
//     every resume (session/load and session/resume, which may name other
//     MCP servers, a prompt after the plugin died, a restart) passes them
//     again. A refused setting is -32602 with data.setting naming it.
//   - session/new, load and resume answer with the session's modes and
//     configOptions; session/set_mode and session/set_config_option work
//     between turns and during one, and their values, and a mode the agent
//     switches to itself, are stored as the session's "mode" option and the
//     option named by the config option's id.
//   - session/prompt passes every block to the plugin (image, audio,
//     resource, resource_link as their ACP JSON); a block type the agent
//     does not declare refuses the prompt with -32602 naming it. load
//     replays a prompt as one user_message_chunk per block.
//   - session/request_permission carries the whole tool call (kind, title,
//     rawInput, content with diffs, locations) and every option. Only a
//     request the plugin still waits on is asked: one that arrived while no
//     client followed is asked of the next that follows, one resolved is
//     never asked again, and one nobody answers is cancelled by the host
//     after host.Config.PermissionTimeout. An allow_always answer to a
//     request with an always-scope is stored, and the host answers later
//     requests of that scope itself.
//   - session-level updates (available_commands_update,
//     session_info_update, current_mode_update, config_option_update) are
//     sent as they are journaled, between turns too. A session without a
//     title gets the first line of its first prompt.
//   - session/list pages newest first (api.ListPageSize, nextCursor) with
//     each session's title.
//
// Errors carry the codes of package api: -32000 only for auth required,
// one code of its own for every other failure (see apiError).
//
// agenthost's own methods use the _agenthost/ prefix: subscribe to a
// session's journal from a sequence number (entries arrive as
// _agenthost/journal notifications; a client that reconnects with the last
// seq it saw misses nothing), stop a session or all of them, remove one
// or prune the old stopped ones (tidy.go), read one session's record and
// state, the host's status, and the configured agents. Package api owns this
// contract (method names, params, results, error codes, the journal entry
// shape); this package serves it, converting the host's and the store's
// types to the API's, and reads journal payloads with package journal.
//
// Every request line passes a filter first: a line that is not JSON gets a
// parse error, one that is not a JSON-RPC 2.0 object, or has no method and
// is no response, or an empty method, an invalid-request error, and one
// over MaxRequestBytes an error naming the limit; none of them reaches the
// host. Served on a unix socket, only peers running as the host's user are
// accepted.
//
// # Bounds
//
// One client must not pin the host's memory, nor lose its connection to
// the protocol library's limits, so each connection is bounded (Server's
// Max fields), and a client over a bound is told with api.CodeOverLimit:
//
//   - subscriptions and followed sessions together (MaxSubscriptions):
//     each is a goroutine and a chunk of journal entries read ahead of the
//     socket; the next subscribe, session/new, load or resume is refused
//     (session/new before a plugin starts), the ones held go on, and all
//     end with the connection.
//   - bytes waiting to be written (MaxQueuedBytes): writes block on a
//     client that does not read (backpressure, nothing is dropped), and
//     while more than the bound waits no subscription is added.
//   - notifications waiting to be handled (MaxQueuedNotifications): the
//     library queues 1024 and closes the connection, without a word, when
//     the queue overflows. The filter admits session/cancel only while
//     fewer than the bound wait (agent.Cancel releases each); past it one
//     is dropped and logged, and the client is told once per run with an
//     api.MethodOverLimit notification, as a notification has no answer.
//     Other notifications are dropped in the filter, as the library would
//     drop them (ACP ignores unknown ones), so every admitted one is
//     released.
//   - requests being served (MaxRequests): the library serves each in a
//     goroutine of its own as it is read; past the bound the filter
//     answers CodeOverLimit itself. The library's writer (answerCounter)
//     counts each answer off, and the library answers every request it
//     is handed.
//
// Serve outlives a shortage of descriptors: a failed accept is retried
// with backoff, as net/http does.
package localapi
