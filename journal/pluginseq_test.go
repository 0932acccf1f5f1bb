package journal

import (
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// The plugin seq of an entry is read even where its update is not: a
// restarted host finds where a plugin's stream left off in any entry.
func TestPluginSeqReadsOnlyThatMember(t *testing.T) {
	for _, tt := range []struct {
		name    string
		kind    leasestore.EntryKind
		payload string
		want    uint64
		ok      bool
	}{
		{"an update", leasestore.KindUpdate, `{"pluginSeq":7,"turnId":"t","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}`, 7, true},
		{"an update this build cannot decode", leasestore.KindUpdate, `{"pluginSeq":8,"update":{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"completed","content":[{"type":"diff","path":"a"}]}}`, 8, true},
		{"a plugin's stop", leasestore.KindStop, `{"pluginSeq":9,"turnId":"t","stopReason":"end_turn"}`, 9, true},
		{"a stop the host wrote", leasestore.KindStop, `{"turnId":"t","stopReason":"failed","error":"not dispatched"}`, 0, false},
		{"a prompt", leasestore.KindPrompt, `{"turnId":"t","prompt":[]}`, 0, false},
		{"a lifecycle event", leasestore.KindLifecycle, `{"event":"owner-committed","pluginSeq":3}`, 0, false},
		{"not JSON", leasestore.KindUpdate, `{"pluginSeq":`, 0, false},
		{"a seq of the wrong type", leasestore.KindUpdate, `{"pluginSeq":"7"}`, 0, false},
	} {
		e := leasestore.Entry{Seq: 1, Kind: tt.kind, Payload: []byte(tt.payload)}
		if got, ok := PluginSeq(e); got != tt.want || ok != tt.ok {
			t.Errorf("%s: PluginSeq = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	// The undecodable update really is one Decode refuses: the case above
	// would otherwise prove nothing.
	if _, err := Decode(leasestore.Entry{Seq: 1, Kind: leasestore.KindUpdate,
		Payload: []byte(`{"pluginSeq":8,"update":{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"completed","content":[{"type":"diff","path":"a"}]}}`)}); err == nil {
		t.Error("Decode accepted the update this build should not decode")
	}
}
