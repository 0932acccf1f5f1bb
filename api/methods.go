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
	// stopped and its lease released.
	MethodStop = "_agenthost/stop"
	// MethodStatus: no params → StatusResult.
	MethodStatus = "_agenthost/status"
	// MethodAgents: no params → AgentsResult.
	MethodAgents = "_agenthost/agents"
	// MethodSession: Params{SessionID} → SessionResult.
	MethodSession = "_agenthost/session"
)

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

// Error codes the local API answers with.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	// CodeServerError: the host refused or failed the request; the
	// message says why.
	CodeServerError = -32000
	// CodeNotFound: no such session, or it does not run in this host.
	CodeNotFound = -32002
	// CodeTurnRunning: the session is running a turn, so the prompt was
	// refused (and not journaled): wait for the turn's end or cancel it.
	CodeTurnRunning = -32003
)

// ErrorData is the data member of a CodeInvalidParams error: what was
// wrong with the params, for the user.
type ErrorData struct {
	Error string `json:"error"`
}
