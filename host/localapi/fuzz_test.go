package localapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/host"
)

// fuzzSmallMax is the request limit the fuzzer mostly works against: small
// enough that short mutated inputs cross it, large enough that the valid
// request seeds fit under it.
const fuzzSmallMax = 512

// fuzzSeeds are client streams: valid ACP and _agenthost/ requests, the
// malformed and hostile lines the filter exists to stop, and line-ending
// variants, alone and mixed in one stream.
func fuzzSeeds() [][]byte {
	valid := []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[],"_meta":{"agenthost":{"agent":"scripted"}}}}`,
		`{"jsonrpc":"2.0","id":"p-2","method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}}`,
		`{"jsonrpc":"2.0","id":3,"method":"_agenthost/subscribe","params":{"sessionId":"s1","fromSeq":42}}`,
		`{"jsonrpc":"2.0","id":4,"method":"_agenthost/subscribe","params":{"sessionId":"s1","fromSeq":18446744073709551615}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}`,
		// The client's answers to session/request_permission: responses
		// pass the filter too, and in an error response the SDK decodes an
		// "error" member, which the filter must then probe as well
		// (testdata/fuzz/FuzzFilterRequests/sdk-undecodable-error-member).
		`{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"denied","data":null}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":3}}`,
		// Notifications the filter drops: a cancel the SDK cannot decode,
		// one the host does not take, an extension one.
		`{"jsonrpc":"2.0","id":null,"method":"session/cancel","params":{"sessionId":5}}`,
		`{"jsonrpc":"2.0","method":"document/didOpen","params":{}}`,
		`{"jsonrpc":"2.0","method":"_agenthost/stop","params":{"sessionId":"s1"}}`,
	}
	var seeds [][]byte
	for _, v := range valid {
		seeds = append(seeds, []byte(v+"\n"))
	}
	seeds = append(seeds,
		// All the valid requests in one stream, as a session would send them.
		[]byte(strings.Join(valid, "\n")+"\n"),
		// CRLF endings, blank and whitespace-only lines, no final newline.
		[]byte("\r\n \t\n"+valid[0]+"\r\n\n"+valid[1]),
		[]byte(valid[0]+"\r\r\n\r"),
		// An oversized line, then a valid one: the filter carries on. (No
		// seed crosses bufio's 64 KiB buffer: the fuzzer stalls minimizing
		// inputs that large. FuzzReadLine covers lines joined from chunks.)
		[]byte(`{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{"pad":"`+strings.Repeat("x", fuzzSmallMax)+`"}}`+"\n"+valid[0]+"\n"),
		// A line of exactly the small limit, and one byte over it.
		[]byte(strings.Repeat(" ", fuzzSmallMax-2)+"{}\n"+strings.Repeat(" ", fuzzSmallMax-1)+"{}\n"),
		// Invalid UTF-8, inside and outside strings.
		[]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"initialize\"}\n"),
		[]byte("\xff\xfe\xfd\n"),
		// Truncated JSON.
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/`),
		[]byte(`{"jsonrpc":"2.0","id":1,"meth`+"\n"),
		// Wrong or missing version, a version of the wrong type.
		[]byte(`{"jsonrpc":"1.0","id":7,"method":"initialize"}`+"\n"),
		[]byte(`{"id":"x","method":"initialize"}`+"\n"),
		[]byte(`{"jsonrpc":2.0,"id":[1],"method":"initialize"}`+"\n"),
		// Batches, which the server does not support.
		[]byte(`[{"jsonrpc":"2.0","id":1,"method":"initialize"},{"jsonrpc":"2.0","id":2,"method":"session/list"}]`+"\n"),
		[]byte("[]\n"),
		// Nulls and other non-object values.
		[]byte("null\n"),
		[]byte(`{"jsonrpc":"2.0","id":null,"method":null,"params":null}`+"\n"),
		[]byte(`"jsonrpc" 2.0 true 1e999`+"\n"),
		// Method and params of the wrong types.
		[]byte(`{"jsonrpc":"2.0","id":5,"method":5}`+"\n"),
		[]byte(`{"jsonrpc":"2.0","id":6,"method":"_agenthost/subscribe","params":{"sessionId":1,"fromSeq":-1}}`+"\n"),
		[]byte(`{"jsonrpc":"2.0","id":6,"method":"_agenthost/subscribe","params":[1,2]}`+"\n"),
		// Key case and duplicate keys: encoding/json matches names
		// case-insensitively and keeps the last duplicate, in the filter
		// and in the SDK alike.
		[]byte(`{"JSONRPC":"2.0","ID":8,"Method":"initialize"}`+"\n"),
		[]byte(`{"jsonrpc":"2.0","jsonrpc":"1.0","id":8}`+"\n"),
		[]byte{},
		[]byte("\n\n\n"),
	)
	return seeds
}

// FuzzFilterRequests feeds arbitrary bytes to filterRequests as a client's
// whole stream. Besides never panicking, every line the client sends must
// have exactly one fate, in order: skipped if blank, answered with one
// well-formed JSON-RPC error, or forwarded unchanged as one line the ACP
// SDK can decode (the SDK silently drops a line it cannot decode, so such
// a line must be answered by the filter instead, or the client waits
// forever). Forwarded extension requests then go through the _agenthost/
// params decoder.
func FuzzFilterRequests(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The small limit lets mutations reach the size check; the default
		// one is what Serve uses.
		for _, max := range []int{fuzzSmallMax, DefaultMaxRequestBytes} {
			if err := checkFilter(t, data, max); err != nil {
				t.Fatalf("limit %d, input %q: %v", max, truncate(data), err)
			}
		}
	})
}

// FuzzReadLine feeds arbitrary bytes to readLine through a bufio.Reader of
// the smallest size, so that lines span many chunks (filterRequests' 64 KiB
// buffer hides that from short inputs), under limits around the chunk size.
// It must return every line exactly as the model splits it, flag exactly the
// lines over the limit without ever holding more than the limit of them, and
// end with io.EOF.
func FuzzReadLine(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	// "\r\n" straddling a chunk boundary, and runs of "\r".
	f.Add([]byte(strings.Repeat("a", 15) + "\r\n" + strings.Repeat("b", 31) + "\r\n"))
	f.Add([]byte(strings.Repeat("\r", 40) + "\n\r"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, max := range []int{0, 1, 15, 16, 17, 100} {
			if err := checkReadLine(data, max); err != nil {
				t.Fatalf("limit %d, input %q: %v", max, truncate(data), err)
			}
		}
	})
}

// sdkEnvelope mirrors the envelope acp-go-sdk decodes every line into
// (anyMessage in its connection.go): a line that does not decode into it is
// logged and dropped, unanswered.
type sdkEnvelope struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      *json.RawMessage  `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *acp.RequestError `json:"error,omitempty"`
}

// filterEvent is one write of filterRequests: to the SDK's side (forwarded)
// or to the client (an error answer).
type filterEvent struct {
	forwarded bool
	data      []byte
}

type eventWriter struct {
	events    *[]filterEvent
	forwarded bool
}

func (w eventWriter) Write(p []byte) (int, error) {
	*w.events = append(*w.events, filterEvent{forwarded: w.forwarded, data: bytes.Clone(p)})
	return len(p), nil
}

// checkFilter runs filterRequests over data and compares what it wrote with
// the fate model of each line.
func checkFilter(t *testing.T, data []byte, max int) error {
	var events []filterEvent
	err := filterRequests(bytes.NewReader(data), eventWriter{&events, true}, eventWriter{&events, false}, max, filterGates{notes: newNoteGate(DefaultMaxQueuedNotifications), reqs: &requestGate{max: DefaultMaxRequests}}, hclog.NewNullLogger())
	// A bytes.Reader ends only with io.EOF, which ServeConn hands on to the
	// SDK as a clean end of input.
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("filterRequests returned %v, want io.EOF", err)
	}
	lines := splitLines(data)
	i := 0
	for n, line := range lines {
		want := lineFate(line, max)
		if want == fateSkip {
			continue
		}
		if i >= len(events) {
			return fmt.Errorf("line %d (%q): no output, want %s", n, truncate(line), want)
		}
		ev := events[i]
		i++
		// Each write must be one whole line: lockedWriter keeps writes,
		// not lines, from interleaving with the SDK's.
		if len(ev.data) == 0 || ev.data[len(ev.data)-1] != '\n' || bytes.IndexByte(ev.data, '\n') != len(ev.data)-1 {
			return fmt.Errorf("line %d: write %q is not one newline-terminated line", n, truncate(ev.data))
		}
		out := ev.data[:len(ev.data)-1]
		if ev.forwarded {
			if want != fateForward {
				return fmt.Errorf("line %d (%q) was forwarded, want %s", n, truncate(line), want)
			}
			if err := checkForwarded(t, out, max); err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			if same := bytes.TrimRight(line, "\r"); !bytes.Equal(out, same) {
				return fmt.Errorf("line %d forwarded as %q, want %q", n, truncate(out), truncate(same))
			}
			continue
		}
		if want == fateForward {
			return fmt.Errorf("line %d (%q) was refused with %q, want it forwarded", n, truncate(line), out)
		}
		if err := checkErrorLine(out, line, want, max); err != nil {
			return fmt.Errorf("line %d (%q): %w", n, truncate(line), err)
		}
	}
	if i != len(events) {
		return fmt.Errorf("%d writes for %d lines; first extra: %q", len(events), i, truncate(events[i].data))
	}
	return nil
}

type fate int

const (
	fateSkip    fate = iota // blank, or a notification the host does not take: no answer, nothing forwarded
	fateForward             // handed to the SDK
	fateTooLong             // -32600 naming the limit, id null
	fateParse               // -32700, id null
	fateInvalid             // -32600 with the request's id
)

func (f fate) String() string {
	return [...]string{"skipped", "forwarded", "too-large error", "parse error", "invalid-request error"}[f]
}

// lineFate says what the filter's contract does with one line. The length
// is the line's as read (without its "\r\n" or "\n"); blank follows
// bytes.TrimSpace, the SDK's own rule for skipping lines.
func lineFate(line []byte, max int) fate {
	switch {
	case len(line) > max:
		return fateTooLong
	case len(bytes.TrimSpace(line)) == 0:
		return fateSkip
	case !json.Valid(line):
		return fateParse
	}
	var env sdkEnvelope
	if json.Unmarshal(line, &env) != nil || env.JSONRPC != "2.0" {
		return fateInvalid
	}
	// An empty method, or no method on a line that is no response, is
	// something the SDK drops unanswered. A "method":null is no method.
	var method struct {
		Method *string `json:"method"`
	}
	_ = json.Unmarshal(line, &method)
	if method.Method != nil && *method.Method == "" || method.Method == nil && len(env.Result) == 0 && env.Error == nil {
		return fateInvalid
	}
	// Of the notifications, only $/cancel_request and a session/cancel
	// whose params the SDK decodes go on (the inputs hold fewer than the
	// gate's bound of them).
	if env.ID == nil && env.Method != "" && env.Method != "$/cancel_request" {
		var p acp.CancelNotification
		if env.Method != acp.AgentMethodSessionCancel || json.Unmarshal(env.Params, &p) != nil || p.Validate() != nil {
			return fateSkip
		}
	}
	return fateForward
}

// splitLines splits a stream as bufio.Reader.ReadLine does: on "\n", the
// "\r" of a "\r\n" dropped, a final line without "\n" kept, nothing after a
// final "\n".
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, data)
			break
		}
		lines = append(lines, bytes.TrimSuffix(data[:i], []byte("\r")))
		data = data[i+1:]
	}
	return lines
}

// checkForwarded checks a forwarded line on its own: within the limit, a
// JSON object the SDK decodes, with "jsonrpc":"2.0". An _agenthost/ request
// also goes through the extension params decoder.
func checkForwarded(t *testing.T, line []byte, max int) error {
	if len(line) > max {
		return fmt.Errorf("forwarded %d bytes over the limit %d", len(line), max)
	}
	if trimmed := bytes.TrimLeft(line, " \t\r"); len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("forwarded %q, which is not a JSON object", truncate(line))
	}
	var env sdkEnvelope
	if err := json.Unmarshal(line, &env); err != nil {
		return fmt.Errorf("forwarded %q, which the SDK cannot decode: %w", truncate(line), err)
	}
	if env.JSONRPC != "2.0" {
		return fmt.Errorf("forwarded %q with jsonrpc %q", truncate(line), env.JSONRPC)
	}
	if strings.HasPrefix(env.Method, "_agenthost/") {
		if err := checkExtensionParams(t, env.Params); err != nil {
			return fmt.Errorf("params %q: %w", truncate(env.Params), err)
		}
	}
	return nil
}

// checkExtensionParams runs params through HandleExtensionMethod's decoder.
// The method is one no case serves, so the host is never reached (the agent
// has none): the answer is -32602 when the params do not decode, else
// -32601. Absent or null params are no params; a non-object never decodes;
// an object with no sessionId or fromSeq member decodes (unknown members
// are ignored, for forward compatibility). Either error must marshal, as
// the SDK sends it to the client.
func checkExtensionParams(t *testing.T, params json.RawMessage) error {
	a := &agent{srv: &Server{}}
	res, err := a.HandleExtensionMethod(t.Context(), "_agenthost/fuzz-no-such-method", params)
	var re *acp.RequestError
	if res != nil || !errors.As(err, &re) {
		return fmt.Errorf("got %v, %v; want a *acp.RequestError", res, err)
	}
	if _, err := json.Marshal(re); err != nil {
		return fmt.Errorf("the error %v does not marshal: %w", re, err)
	}
	if re.Message == "" {
		return fmt.Errorf("error %d with no message", re.Code)
	}
	trimmed := bytes.TrimSpace(params)
	var members map[string]json.RawMessage
	switch {
	case len(trimmed) == 0 || string(trimmed) == "null":
		if re.Code != -32601 {
			return fmt.Errorf("no params answered %d, want -32601", re.Code)
		}
	case trimmed[0] != '{':
		if re.Code != -32602 {
			return fmt.Errorf("non-object params answered %d, want -32602", re.Code)
		}
	case json.Unmarshal(trimmed, &members) == nil && !hasMemberFold(members, "sessionId", "fromSeq"):
		if re.Code != -32601 {
			return fmt.Errorf("params without known members answered %d, want -32601", re.Code)
		}
	default:
		if re.Code != -32601 && re.Code != -32602 {
			return fmt.Errorf("answered %d, want -32601 or -32602", re.Code)
		}
	}
	return nil
}

// hasMemberFold reports whether m has a member any of names would decode
// from: encoding/json matches names case-insensitively.
func hasMemberFold(m map[string]json.RawMessage, names ...string) bool {
	for k := range m {
		for _, n := range names {
			if strings.EqualFold(k, n) {
				return true
			}
		}
	}
	return false
}

// checkErrorLine checks the filter's answer to a refused line: a JSON-RPC
// 2.0 error object with exactly jsonrpc, id and error, the code of the
// line's fate, a message, and the id of the request when the filter could
// read one (null for lines too long or not JSON).
func checkErrorLine(out, line []byte, f fate, max int) error {
	if !json.Valid(out) {
		return fmt.Errorf("error answer %q is not JSON", out)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(out, &members); err != nil {
		return fmt.Errorf("error answer %q is not an object: %w", out, err)
	}
	if len(members) != 3 || members["jsonrpc"] == nil || members["id"] == nil || members["error"] == nil {
		return fmt.Errorf("error answer %q: want exactly jsonrpc, id and error", out)
	}
	if string(members["jsonrpc"]) != `"2.0"` {
		return fmt.Errorf("error answer %q: jsonrpc %s", out, members["jsonrpc"])
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(members["error"], &e); err != nil || e.Code == nil || e.Message == nil || *e.Message == "" {
		return fmt.Errorf("error answer %q: error member wants a code and a message", out)
	}
	wantCode, wantID := -32600, json.RawMessage("null")
	switch f {
	case fateParse:
		wantCode = -32700
	case fateTooLong:
		if !strings.Contains(*e.Message, strconv.Itoa(max)) {
			return fmt.Errorf("error answer %q does not name the limit %d", out, max)
		}
	case fateInvalid:
		var probe struct {
			ID json.RawMessage `json:"id"`
		}
		// A line that is no object has no id; a type error elsewhere in an
		// object still leaves its id decoded.
		_ = json.Unmarshal(line, &probe)
		if len(probe.ID) > 0 {
			wantID = probe.ID
		}
	}
	if *e.Code != wantCode {
		return fmt.Errorf("error answer %q: code %d, want %d for a %s", out, *e.Code, wantCode, f)
	}
	same, err := sameJSON(members["id"], wantID)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("error answer %q: id %s, want %s", out, members["id"], wantID)
	}
	return nil
}

// sameJSON compares two JSON values by meaning: the answer's id is
// re-encoded (compacted, HTML-escaped), not copied byte for byte.
func sameJSON(a, b json.RawMessage) (bool, error) {
	va, err := decodeNumbers(a)
	if err != nil {
		return false, fmt.Errorf("decode %q: %w", a, err)
	}
	vb, err := decodeNumbers(b)
	if err != nil {
		return false, fmt.Errorf("decode %q: %w", b, err)
	}
	return reflect.DeepEqual(va, vb), nil
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // ids like 1e999 or 12345678901234567890 stay exact
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkReadLine reads data line by line with readLine and compares with
// splitLines. Like an io.Reader, readLine may return the final line together
// with io.EOF (when the line ends exactly at a chunk boundary), or io.EOF
// alone with an empty line; filterRequests handles the line before the
// error either way.
func checkReadLine(data []byte, max int) error {
	br := bufio.NewReaderSize(bytes.NewReader(data), 16) // bufio's minimum
	want := splitLines(data)
	for n := 0; ; n++ {
		line, tooLong, err := readLine(br, max)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if n == len(want) {
			if err == nil || len(line) != 0 || tooLong {
				return fmt.Errorf("after %d lines: %q, %v, %v; want an empty line and io.EOF", n, truncate(line), tooLong, err)
			}
			return nil
		}
		if err != nil && n != len(want)-1 {
			return fmt.Errorf("io.EOF at line %d of %d", n, len(want))
		}
		if over := len(want[n]) > max; tooLong != over {
			return fmt.Errorf("line %d (%d bytes): tooLong %v", n, len(want[n]), tooLong)
		}
		switch {
		case tooLong && len(line) > max:
			// What readLine keeps of a long line is bounded by the limit:
			// that is the point of the limit.
			return fmt.Errorf("line %d: kept %d bytes of a too-long line", n, len(line))
		case !tooLong && !bytes.Equal(line, want[n]):
			return fmt.Errorf("line %d: %q, want %q", n, truncate(line), truncate(want[n]))
		}
		if err != nil {
			return nil // the last line came with io.EOF
		}
	}
}

// truncate keeps failure messages readable for long inputs.
func truncate(b []byte) []byte {
	const n = 200
	if len(b) <= n {
		return b
	}
	return append(bytes.Clone(b[:n]), "..."...)
}

// FuzzListCursor: a cursor from a client is refused or read, never a
// panic; one the server made reads back as what it encoded.
func FuzzListCursor(f *testing.F) {
	f.Add(listCursor{ID: "s-1"}.encode())
	f.Add("nonsense")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		again, err := decodeCursor(c.encode())
		if err != nil || again.ID != c.ID || !again.CreatedAt.Equal(c.CreatedAt) {
			t.Fatalf("cursor %q read as %+v, re-encoded reads as %+v (%v)", s, c, again, err)
		}
	})
}

// FuzzPromptBlocks: any prompt the ACP library decodes converts, or is
// refused as content the agent does not take; each converted block has a
// type, and every one but text carries valid JSON.
func FuzzPromptBlocks(f *testing.F) {
	f.Add(`[{"type":"text","text":"hi"},{"type":"image","mimeType":"image/png","data":"AA=="}]`)
	f.Add(`[{"type":"resource_link","uri":"file:///a","name":"a"}]`)
	f.Add(`[{"type":"resource","resource":{"uri":"file:///a","text":"x"}}]`)
	f.Fuzz(func(t *testing.T, s string) {
		var blocks []acp.ContentBlock
		if json.Unmarshal([]byte(s), &blocks) != nil {
			return
		}
		out, err := promptBlocks(blocks)
		if err != nil {
			if !errors.Is(err, host.ErrUnsupportedContent) {
				t.Fatalf("prompt %s: %v", s, err)
			}
			return
		}
		for _, b := range out {
			if b.Type == "" || (b.Type != "text" && !json.Valid([]byte(b.JSON))) {
				t.Fatalf("prompt %s converted to %+v", s, b)
			}
		}
	})
}
