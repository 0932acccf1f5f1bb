package codex

import "encoding/json"

// The app-server v2 shapes this plugin reads and writes, after the schema
// `codex app-server generate-json-schema` prints for 0.171.0. Only the
// fields used are declared; unknown fields are ignored when decoding.

type clientInfo struct {
	Name    string  `json:"name"`
	Title   *string `json:"title"`
	Version string  `json:"version"`
}

type initializeCapabilities struct {
	ExperimentalAPI           bool     `json:"experimentalApi"`
	RequestAttestation        bool     `json:"requestAttestation"`
	OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
}

type initializeParams struct {
	ClientInfo   clientInfo             `json:"clientInfo"`
	Capabilities initializeCapabilities `json:"capabilities"`
}

type initializeResult struct {
	UserAgent string `json:"userAgent"`
	CodexHome string `json:"codexHome"`
}

// threadParams are the fields thread/start and thread/resume share.
type threadStartParams struct {
	Model          string         `json:"model,omitempty"`
	Cwd            string         `json:"cwd,omitempty"`
	ApprovalPolicy string         `json:"approvalPolicy,omitempty"`
	Sandbox        string         `json:"sandbox,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	Ephemeral      bool           `json:"ephemeral,omitempty"`
}

type threadResumeParams struct {
	ThreadID       string         `json:"threadId"`
	Model          string         `json:"model,omitempty"`
	Cwd            string         `json:"cwd,omitempty"`
	ApprovalPolicy string         `json:"approvalPolicy,omitempty"`
	Sandbox        string         `json:"sandbox,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	ExcludeTurns   bool           `json:"excludeTurns"`
}

type thread struct {
	ID        string  `json:"id"`
	Ephemeral bool    `json:"ephemeral"`
	Path      *string `json:"path"`
}

// threadResult is the result of thread/start and thread/resume.
type threadResult struct {
	Thread         thread          `json:"thread"`
	Model          string          `json:"model"`
	ModelProvider  string          `json:"modelProvider"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
}

// userInput is one UserInput: {type:"text",text,text_elements:[]},
// {type:"image",url} or {type:"localImage",path}.
type userInput map[string]any

type turnStartParams struct {
	ThreadID string      `json:"threadId"`
	Input    []userInput `json:"input"`
}

type turnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

type turnError struct {
	Message           string          `json:"message"`
	CodexErrorInfo    json.RawMessage `json:"codexErrorInfo"`
	AdditionalDetails *string         `json:"additionalDetails"`
}

type turnInfo struct {
	ID     string     `json:"id"`
	Status string     `json:"status"`
	Error  *turnError `json:"error"`
}

// turnResult is the result of turn/start.
type turnResult struct {
	Turn turnInfo `json:"turn"`
}

// turnNotification is turn/started and turn/completed.
type turnNotification struct {
	ThreadID string   `json:"threadId"`
	Turn     turnInfo `json:"turn"`
}

// threadItem is a ThreadItem: its type tag and the fields of the variants
// the plugin maps.
type threadItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// agentMessage, plan
	Text string `json:"text"`
	// reasoning
	Summary []string        `json:"summary"`
	Content json.RawMessage `json:"content"` // strings for reasoning, blocks for userMessage
	// commandExecution
	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	Status           string  `json:"status"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
	DurationMs       *int64  `json:"durationMs"`
	// fileChange
	Changes []fileChange `json:"changes"`
	// mcpToolCall, dynamicToolCall
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
	// webSearch
	Query string `json:"query"`
}

type fileChange struct {
	Path string          `json:"path"`
	Kind json.RawMessage `json:"kind"`
	Diff string          `json:"diff"`
}

// itemNotification is item/started and item/completed.
type itemNotification struct {
	ThreadID string     `json:"threadId"`
	TurnID   string     `json:"turnId"`
	Item     threadItem `json:"item"`
}

// deltaNotification is item/agentMessage/delta, item/reasoning/*Delta and
// item/commandExecution/outputDelta.
type deltaNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

type tokenUsageBreakdown struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

type tokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total tokenUsageBreakdown `json:"total"`
		Last  tokenUsageBreakdown `json:"last"`
		// ModelContextWindow is null when the model's window is unknown.
		ModelContextWindow int64 `json:"modelContextWindow"`
	} `json:"tokenUsage"`
}

type errorNotification struct {
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
	Error     turnError `json:"error"`
	WillRetry bool      `json:"willRetry"`
}

type planNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Plan     []struct {
		Step   string `json:"step"`
		Status string `json:"status"`
	} `json:"plan"`
}

type serverRequestResolved struct {
	ThreadID  string          `json:"threadId"`
	RequestID json.RawMessage `json:"requestId"`
}

// approvalParams covers item/commandExecution/requestApproval,
// item/fileChange/requestApproval and item/permissions/requestApproval.
type approvalParams struct {
	ThreadID    string          `json:"threadId"`
	TurnID      string          `json:"turnId"`
	ItemID      string          `json:"itemId"`
	Reason      *string         `json:"reason"`
	Command     *string         `json:"command"`
	Cwd         *string         `json:"cwd"`
	GrantRoot   *string         `json:"grantRoot"`
	Permissions json.RawMessage `json:"permissions"`
}

// legacyApprovalParams covers execCommandApproval and applyPatchApproval,
// which 0.171.0 still lists among its server requests.
type legacyApprovalParams struct {
	ConversationID string          `json:"conversationId"`
	CallID         string          `json:"callId"`
	Command        []string        `json:"command"`
	Cwd            string          `json:"cwd"`
	Reason         *string         `json:"reason"`
	FileChanges    json.RawMessage `json:"fileChanges"`
}
