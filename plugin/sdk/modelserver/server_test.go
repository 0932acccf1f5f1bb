package modelserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

func TestListensOnLoopbackOnly(t *testing.T) {
	srv := start(t)
	u, err := url.Parse(srv.URL())
	if err != nil || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "0" {
		t.Errorf("URL %q", srv.URL())
	}
	if srv.OpenAIBaseURL() != srv.URL()+"/v1" {
		t.Errorf("OpenAIBaseURL %q", srv.OpenAIBaseURL())
	}
}

// apis are the two wire formats, for tests that run against both.
var apis = []struct {
	name, path string
	body       func() map[string]any
}{
	{"anthropic", "/v1/messages?beta=true", func() map[string]any { return anthropicBody(true, "hi") }},
	{"openai", "/v1/responses", func() map[string]any { return openaiBody("hi") }},
}

func TestFailureStatuses(t *testing.T) {
	cases := []struct {
		status                  int
		retryAfter              time.Duration
		wantAnthropic, wantCode string
		wantRetry               string
	}{
		{401, 0, "authentication_error", "invalid_api_key", ""},
		{429, 1500 * time.Millisecond, "rate_limit_error", "rate_limit_exceeded", "2"},
		{500, 0, "api_error", "server_error", ""},
		{529, 3 * time.Second, "overloaded_error", "server_is_overloaded", "3"},
	}
	for _, api := range apis {
		for _, tc := range cases {
			t.Run(api.name+"/"+http.StatusText(tc.status), func(t *testing.T) {
				srv := start(t, modelserver.Reply{Status: tc.status, Message: "scripted failure", RetryAfter: tc.retryAfter})
				resp := post(t, ctxT(t), client(t), srv.URL()+api.path, api.body())
				var body struct {
					Type  string
					Error struct{ Type, Code, Message string }
				}
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.status || body.Error.Message != "scripted failure" {
					t.Errorf("status %d, body %+v", resp.StatusCode, body)
				}
				if api.name == "anthropic" && (body.Type != "error" || body.Error.Type != tc.wantAnthropic) {
					t.Errorf("anthropic error %+v, want type %s", body, tc.wantAnthropic)
				}
				if api.name == "openai" && body.Error.Code != tc.wantCode {
					t.Errorf("openai error %+v, want code %s", body, tc.wantCode)
				}
				if got := resp.Header.Get("Retry-After"); got != tc.wantRetry {
					t.Errorf("retry-after %q, want %q", got, tc.wantRetry)
				}
				if tc.retryAfter > 0 && resp.Header.Get("Retry-After-Ms") != strconv.FormatInt(tc.retryAfter.Milliseconds(), 10) {
					t.Errorf("retry-after-ms %q", resp.Header.Get("Retry-After-Ms"))
				}
				if r := srv.Requests()[0]; r.Kind != modelserver.Turn || r.Reply != 0 {
					t.Errorf("recorded %+v", r)
				}
			})
		}
	}
}

func TestExhaustedScriptSaysSo(t *testing.T) {
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			srv := start(t, modelserver.Text("only one"))
			c, ctx := client(t), ctxT(t)
			if _, err := readEvents(t, post(t, ctx, c, srv.URL()+api.path, api.body()).Body); err != nil {
				t.Fatal(err)
			}
			resp := post(t, ctx, c, srv.URL()+api.path, api.body())
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "script exhausted: model request 2") ||
				!strings.Contains(string(b), "1 replies were scripted") {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
			reqs := srv.ModelRequests()
			if len(reqs) != 2 || reqs[1].Kind != modelserver.Exhausted || reqs[1].Reply != -1 {
				t.Errorf("recorded %+v", reqs)
			}
		})
	}
}

func TestDropCutsTheStreamAfterCutAfterDeltas(t *testing.T) {
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			srv := start(t, modelserver.Reply{Text: "a long reply that is cut", ChunkSize: 1, Cut: modelserver.Drop, CutAfter: 4})
			evs, err := readEvents(t, post(t, ctxT(t), client(t), srv.URL()+api.path, api.body()).Body)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read ended with %v, want an unexpected EOF", err)
			}
			var deltas int
			for _, e := range evs {
				if strings.HasSuffix(e.name, "delta") && e.name != "message_delta" {
					deltas++
				}
				if e.name == "message_stop" || e.name == "response.completed" {
					t.Errorf("a dropped stream ended with %s", e.name)
				}
			}
			if deltas != 4 {
				t.Errorf("%d deltas before the drop, want 4", deltas)
			}
		})
	}
}

func TestDropBeforeTheEndOfAShortReply(t *testing.T) {
	// CutAfter beyond the reply's deltas still cuts before its last events.
	srv := start(t, modelserver.Reply{Text: "ab", Cut: modelserver.Drop, CutAfter: 100})
	evs, err := readEvents(t, post(t, ctxT(t), client(t), srv.URL()+apis[0].path, apis[0].body()).Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) || names(evs)[len(evs)-1] != "content_block_stop" {
		t.Errorf("events %v, err %v", names(evs), err)
	}
}

func TestStallHoldsUntilTheClientGivesUp(t *testing.T) {
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			srv := start(t, modelserver.Reply{Text: "stalls after two", ChunkSize: 1, Cut: modelserver.Stall, CutAfter: 2})
			ctx, cancel := context.WithCancel(ctxT(t))
			resp := post(t, ctx, client(t), srv.URL()+api.path, api.body())
			// Read the two deltas, then give up: the stream has not ended.
			evs, err := readEventsUntil(t, resp.Body, 2, cancel)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("stalled stream ended with %v", err)
			}
			var deltas int
			for _, e := range evs {
				if strings.HasSuffix(e.name, "delta") && e.name != "message_delta" {
					deltas++
				}
			}
			if deltas > 2 {
				t.Errorf("%d deltas from a reply stalled after 2", deltas)
			}
		})
	}
}

func TestHangNeverAnswersAndEndsWithTheRequest(t *testing.T) {
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			srv := start(t, modelserver.Reply{Cut: modelserver.Hang})
			ctx, cancel := context.WithCancel(ctxT(t))
			errc := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+api.path, strings.NewReader(`{"model":"m","stream":true}`))
				resp, err := client(t).Do(req)
				if err == nil {
					_ = resp.Body.Close()
				}
				errc <- err
			}()
			if _, err := srv.WaitModelRequests(ctx, 1); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("hanging request ended with %v", err)
			}
		})
	}
}

func TestCloseEndsHangingAndStalledReplies(t *testing.T) {
	srv, err := modelserver.Start(modelserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Script(modelserver.Reply{Cut: modelserver.Hang}, modelserver.Reply{Text: "abc", Cut: modelserver.Stall}); err != nil {
		t.Fatal(err)
	}
	c, ctx := client(t), ctxT(t)
	errc := make(chan error, 2)
	for _, api := range apis {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+api.path, strings.NewReader(`{"model":"m","stream":true}`))
			resp, err := c.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			errc <- err
		}()
	}
	if _, err := srv.WaitModelRequests(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for range apis {
		if err := <-errc; err == nil {
			t.Error("a request ended cleanly by Close")
		}
	}
	if _, err := srv.WaitModelRequests(ctx, 3); !errors.Is(err, modelserver.ErrClosed) {
		t.Errorf("wait after Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSlowStreamSpacesItsDeltas(t *testing.T) {
	const delay = 20 * time.Millisecond
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			srv := start(t, modelserver.Reply{Text: "slowly", ChunkSize: 1, Delay: delay})
			evs, err := readEvents(t, post(t, ctxT(t), client(t), srv.URL()+api.path, api.body()).Body)
			if err != nil {
				t.Fatal(err)
			}
			var at []time.Time
			for _, e := range evs {
				if e.name == "content_block_delta" || e.name == "response.output_text.delta" {
					at = append(at, e.at)
				}
			}
			if len(at) != 6 {
				t.Fatalf("%d deltas", len(at))
			}
			// A timer never fires early, so the lower bound holds on any
			// machine; no upper bound is asserted.
			if got := at[len(at)-1].Sub(at[0]); got < 5*delay {
				t.Errorf("6 deltas spaced by %v span %v", delay, got)
			}
		})
	}
}

func TestWaitModelRequestsEndsWithItsContext(t *testing.T) {
	srv := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := srv.WaitModelRequests(ctx, 1); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "have 0") {
		t.Errorf("wait: %v", err)
	}
}

func TestScriptRefusesInvalidReplies(t *testing.T) {
	srv := start(t)
	for _, r := range []modelserver.Reply{
		{Tools: []modelserver.ToolCall{{Name: "Bash", Input: "not json"}}},
		{Tools: []modelserver.ToolCall{{Input: "{}"}}},
		{Status: 200},
		{Delay: -1},
		{Cut: modelserver.Hang + 1},
	} {
		if err := srv.Script(modelserver.Text("fine"), r); !errors.Is(err, modelserver.ErrInvalidReply) {
			t.Errorf("Script(%+v) = %v", r, err)
		}
	}
	if srv.Pending() != 0 {
		t.Errorf("a refused Script call scripted %d replies", srv.Pending())
	}
	// A custom tool's input is plain text.
	if err := srv.Script(modelserver.Reply{Tools: []modelserver.ToolCall{{Name: "apply_patch", Input: "*** Begin Patch", Custom: true}}}); err != nil {
		t.Error(err)
	}
	if got := modelserver.Repeat(3, modelserver.Failure(529, "")); len(got) != 3 || got[2].Status != 529 {
		t.Errorf("Repeat: %+v", got)
	}
}

func TestRepliesAreTakenInOrderAcrossAPIs(t *testing.T) {
	srv := start(t, modelserver.Text("first"), modelserver.Tool("Bash", `{"command":"ls"}`), modelserver.Text("third"))
	c, ctx := client(t), ctxT(t)
	for i, api := range []int{0, 1, 0} {
		if _, err := readEvents(t, post(t, ctx, c, srv.URL()+apis[api].path, apis[api].body()).Body); err != nil {
			t.Fatal(err)
		}
		if r := srv.ModelRequests()[i]; r.Reply != i || r.Seq != i+1 {
			t.Errorf("request %d took reply %d", r.Seq, r.Reply)
		}
	}
}
