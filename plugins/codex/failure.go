package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// A failed turn's error is codex's message, led by what it means when
// codex says why (its codexErrorInfo): the provider refusing the
// credentials, overloaded, rate limiting or failing. Codex reports these
// only once its own retries are spent (its model provider's
// request_max_retries and stream_max_retries), as a final error
// notification and the turn's error, e.g. for a 401:
//
//	{"message":"unexpected status 401 Unauthorized: Incorrect API key provided, url: …, request id: …",
//	 "codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}}}
//
// for a 500, whose body codex drops, its own text and
// "codexErrorInfo":"internalServerError"; a 400 (a model the provider
// does not know, say) is not retried, and its message is the provider's
// whole JSON error body, "codexErrorInfo":"other".

// errorInfo is codexErrorInfo decoded: its variant and the HTTP status it
// carries, if any. The variant is a bare string ("internalServerError",
// "unauthorized") or an object with one member
// ({"httpConnectionFailed":{"httpStatusCode":401}}).
type errorInfo struct {
	kind   string
	status int
}

func decodeErrorInfo(raw json.RawMessage) errorInfo {
	var kind string
	if json.Unmarshal(raw, &kind) == nil {
		return errorInfo{kind: kind}
	}
	var obj map[string]struct {
		HTTPStatusCode *int `json:"httpStatusCode"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return errorInfo{}
	}
	for k, v := range obj {
		info := errorInfo{kind: k}
		if v.HTTPStatusCode != nil {
			info.status = *v.HTTPStatusCode
		}
		return info
	}
	return errorInfo{}
}

// turnFailure is the error of a turn codex failed with e.
func (a *agent) turnFailure(e *turnError) error {
	msg := e.Message
	// A 400 comes through as the provider's whole error body: say its
	// message.
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if strings.HasPrefix(msg, "{") && json.Unmarshal([]byte(msg), &body) == nil && body.Error.Message != "" {
		msg = "the model provider refused the request: " + body.Error.Message
	}
	if e.AdditionalDetails != nil && *e.AdditionalDetails != "" && !strings.Contains(msg, *e.AdditionalDetails) {
		msg += " (" + *e.AdditionalDetails + ")"
	}
	info := decodeErrorInfo(e.CodexErrorInfo)
	switch {
	case info.kind == "unauthorized" || info.status == 401 || info.status == 403:
		return fmt.Errorf("codex: authentication failed: the model provider refused codex's credentials (%s); %s: %w", msg, a.credentialAdvice(), sdk.ErrAuthRequired)
	case info.kind == "serverOverloaded" || info.status == 529 || info.status == 503:
		return fmt.Errorf("codex: the model provider is overloaded and still was after codex's retries: %s", msg)
	case info.kind == "rateLimitExceeded" || info.kind == "usageLimitExceeded" || info.status == 429:
		return fmt.Errorf("codex: the model provider is rate limiting codex (its retries are spent): %s", msg)
	case info.kind == "internalServerError" || info.status >= 500:
		return fmt.Errorf("codex: the model provider failed with a server error (HTTP 5xx) after codex's retries: %s", msg)
	}
	return errors.New(msg)
}

// credentialAdvice says what to configure for codex to send a key its
// provider accepts: the login, or the variable it reads the key from and
// the agenthost setting that lets it through.
func (a *agent) credentialAdvice() string {
	where := "OPENAI_API_KEY"
	var keys []string
	for _, k := range providerEnvKeys(codexHome(a.env)) {
		if k != "OPENAI_API_KEY" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		where += " or the env_key of codex's model provider in config.toml (" + strings.Join(keys, ", ") + ")"
	}
	return fmt.Sprintf("configure a key it accepts: run `codex login` as the user agenthost runs as, or put a valid key in %s "+
		"and let it through to codex with \"credentials\": \"inherit\" on the codex entry of agenthost.json (or the session option %s=true)",
		where, OptAllowCredentials)
}
