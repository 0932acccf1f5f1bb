package api

import acp "github.com/coder/acp-go-sdk"

// agenthost's own methods.
const (
	// MethodSubscribe: Params{SessionID, FromSeq} → SubscribeResult; then
	// every entry from FromSeq on arrives as a MethodJournal notification,
	// until the connection ends. A client that reconnects with the seq
	// after the last it saw misses nothing.
	MethodSubscribe = "_agenthost/subscribe"
	// MethodJournal: notification, params JournalEntry.
	MethodJournal = "_agenthost/journal"
	// MethodStop: Params{SessionID} → StopResult; the session's plugin is
	// stopped and its lease released. A session the host knows that does
	// not run is no error: the result says it was stopped already.
	MethodStop = "_agenthost/stop"
	// MethodStopAll: no params → StopAllResult; every session running in
	// the host is stopped, as MethodStop stops one.
	MethodStopAll = "_agenthost/stopAll"
	// MethodRemove: Params{SessionID, Force} → RemoveResult; the session's
	// record, journal and session directory are removed. A running
	// session is refused (CodeSessionRunning) unless Force, which stops it
	// first; a session latched or held elsewhere is refused
	// (CodeSessionHeld) even with Force: nobody can say its plugin is
	// gone.
	MethodRemove = "_agenthost/remove"
	// MethodPrune: Params{OlderThan, DryRun} → PruneResult; removes, as
	// MethodRemove does, every session that does not run (stopped, idle,
	// or failed at its first start) not updated for OlderThan, and
	// finishes every interrupted removal whatever its age. Running,
	// latched and held sessions are never pruned. DryRun lists what would
	// be removed and removes nothing.
	MethodPrune = "_agenthost/prune"
	// MethodStatus: no params → StatusResult.
	MethodStatus = "_agenthost/status"
	// MethodAgents: no params → AgentsResult.
	MethodAgents = "_agenthost/agents"
	// MethodSession: Params{SessionID} → SessionResult.
	MethodSession = "_agenthost/session"
	// MethodOverLimit: notification to the client, params
	// OverLimitParams: the server dropped notifications the client sent
	// (a notification has no answer to carry the error), because more
	// than its bound of them waited to be handled. One is sent when the
	// dropping starts; every notification after it is dropped until the
	// queue has room again.
	MethodOverLimit = "_agenthost/overLimit"
)

// OverLimitParams are the params of a MethodOverLimit notification.
type OverLimitParams struct {
	// Method is the method of the first notification dropped.
	Method string `json:"method"`
	// Code is CodeOverLimit.
	Code int `json:"code"`
	// Message names the bound and what to do.
	Message string `json:"message"`
}

// The ACP methods the local API serves (and the ones it sends to the
// client), as the ACP library names them.
const (
	MethodInitialize        = acp.AgentMethodInitialize
	MethodSessionNew        = acp.AgentMethodSessionNew
	MethodSessionLoad       = acp.AgentMethodSessionLoad
	MethodSessionResume     = acp.AgentMethodSessionResume
	MethodSessionPrompt     = acp.AgentMethodSessionPrompt
	MethodSessionCancel     = acp.AgentMethodSessionCancel
	MethodSessionList       = acp.AgentMethodSessionList
	MethodSessionClose      = acp.AgentMethodSessionClose
	MethodSessionUpdate     = acp.ClientMethodSessionUpdate
	MethodRequestPermission = acp.ClientMethodSessionRequestPermission
)

// Error codes the local API answers with. ACP reserves -32000 for "auth
// required"; every other failure has a code of its own, each from -32002
// down. A client tells them apart by code; the message says what happened
// and what to do.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	// CodeInvalidParams: the request is malformed or names a setting the
	// agent refuses (an option, an MCP transport, a mode, a config option,
	// a prompt block type): data.error names it.
	CodeInvalidParams = -32602
	// CodeInternalError: the host failed in a way none of the codes below
	// describes (a bug: report it with the message).
	CodeInternalError = -32603
	// CodeAuthRequired: the agent's provider needs authentication (the
	// plugin reported it at start, at resume or at the end of a turn).
	// The user logs in (one of initialize's authMethods) or the operator
	// provides a key, then retries.
	CodeAuthRequired = -32000
	// CodeNotFound: no such session, or it does not run in this host.
	CodeNotFound = -32002
	// CodeTurnRunning: the session is running a turn, so the prompt was
	// refused (and not journaled): wait for the turn's end or cancel it.
	CodeTurnRunning = -32003
	// CodeAgentFailed: the agent's plugin could not be started, or it
	// could not open or resume the conversation (the message carries the
	// plugin's words and its log's path).
	CodeAgentFailed = -32004
	// CodeTurnFailed: the turn ran and failed (the agent's message
	// follows); the session goes on.
	CodeTurnFailed = -32005
	// CodeStoreFailed: the state store refused or failed the write or the
	// read (a full disk, a damaged store, a host closing).
	CodeStoreFailed = -32006
	// CodeSessionHeld: the session's lease is held elsewhere, latched
	// until its previous owner is proven gone, or not decided yet since the
	// host opened, or the request kept meeting the session's idle stop:
	// retry later, or see _agenthost/status.
	CodeSessionHeld = -32007
	// CodeAgentRefused: the running plugin refused or failed a call other
	// than a prompt (set_mode, set_config_option, cancel, a permission
	// answer); an agent without the feature answers this too.
	CodeAgentRefused = -32008
	// CodeOverLimit: this connection is over one of its bounds (how many
	// subscriptions it holds, how many bytes wait to be sent to it, how
	// many requests wait to be served): the message names the bound.
	// Nothing the connection already had is lost: unsubscribe, read what
	// is queued, or slow down, then retry.
	CodeOverLimit = -32009
	// CodeSessionRunning: the request needs a session that does not run
	// (removing one): stop it first, or pass force.
	CodeSessionRunning = -32010
	// CodeSessionElsewhere: the session runs on another host of the
	// cluster (its owner host is registered there): this host does not
	// touch it. data (ElsewhereData) names the host and its local API
	// address; connect there, or wait until that host stops it.
	CodeSessionElsewhere = -32011
	// CodeSessionNotPortable: the session's conversation is on another
	// host's machine (the host that ran it last) and its provider state
	// is not stored with the session (its agent does not export state, or
	// no turn exported it yet), so this host cannot resume it. data
	// (NotPortableData) names that host, "" when its record predates
	// naming hosts: resume the session there.
	CodeSessionNotPortable = -32012
)

// NotPortableData is the data member of a CodeSessionNotPortable error.
type NotPortableData struct {
	// HostID is the host whose machine holds the conversation.
	HostID string `json:"hostId"`
}

// ElsewhereData is the data member of a CodeSessionElsewhere error.
type ElsewhereData struct {
	// HostID is the host the session runs on.
	HostID string `json:"hostId"`
	// Address is that host's local API address on its machine (its
	// socket path), when it published one.
	Address string `json:"address,omitempty"`
}

// ErrorData is the data member of a CodeInvalidParams error: what was
// wrong with the params, for the user.
type ErrorData struct {
	Error string `json:"error"`
	// Setting names the refused setting: a session option, "mode", a
	// config option's id, "mcpServers.<name>"; empty for other errors.
	Setting string `json:"setting,omitempty"`
}

// ListPageSize is how many sessions one session/list page holds; a page
// that is not the last carries nextCursor, an opaque cursor that asks for
// the next. Sessions are listed newest first (by creation, then id), an
// order later changes do not disturb: a session created while a client
// pages appears before the first page, never twice.
const ListPageSize = 100
