package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// ReadNewSessionMeta reads what the server always read: exact member
// names, strings only.
func TestReadNewSessionMeta(t *testing.T) {
	for _, tt := range []struct {
		meta map[string]any
		want NewSessionMeta
	}{
		{nil, NewSessionMeta{}},
		{map[string]any{"agenthost": "claude"}, NewSessionMeta{}},
		{map[string]any{"agenthost": map[string]any{"agent": "claude", "sessionId": "s1"}}, NewSessionMeta{Agent: "claude", SessionID: "s1"}},
		{map[string]any{"agenthost": map[string]any{"agent": 7, "sessionId": "s1"}}, NewSessionMeta{SessionID: "s1"}},
		{map[string]any{"agenthost": map[string]any{"Agent": "claude"}}, NewSessionMeta{}},
	} {
		if got, err := ReadNewSessionMeta(tt.meta); err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ReadNewSessionMeta(%v) = %+v, %v; want %+v", tt.meta, got, err, tt.want)
		}
	}
}

// Session options are strings; any other value is an error naming the
// option.
func TestReadNewSessionMetaOptions(t *testing.T) {
	got, err := ReadNewSessionMeta(map[string]any{"agenthost": map[string]any{"agent": "claude", "options": map[string]any{"model": "m1"}}})
	if err != nil || !reflect.DeepEqual(got, NewSessionMeta{Agent: "claude", Options: map[string]string{"model": "m1"}}) {
		t.Errorf("options: %+v, %v", got, err)
	}
	_, err = ReadNewSessionMeta(map[string]any{"agenthost": map[string]any{"options": map[string]any{"max_turns": 3.0}}})
	if err == nil || !strings.Contains(err.Error(), `_meta.agenthost.options.max_turns must be a JSON string: write "max_turns": "3"`) {
		t.Errorf("a number as an option: %v", err)
	}
}

// A member of the wrong type is named alone in the decoding error, as the
// API always answered it.
func TestParamsDecodingErrorNamesTheMember(t *testing.T) {
	var p Params
	err := json.Unmarshal([]byte(`{"sessionId":[1]}`), &p)
	if err == nil || !strings.Contains(err.Error(), "Go struct field .sessionId of type string") {
		t.Errorf("decoding error %v", err)
	}
	b, _ := json.Marshal(Params{SessionID: "s"})
	if string(b) != `{"sessionId":"s"}` {
		t.Errorf("params of a session method: %s", b)
	}
	b, _ = json.Marshal(Params{SessionID: "s", FromSeq: 4})
	if string(b) != `{"fromSeq":4,"sessionId":"s"}` {
		t.Errorf("params of subscribe: %s", b)
	}
}
