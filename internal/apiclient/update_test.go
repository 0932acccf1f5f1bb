package apiclient_test

import (
	"testing"

	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/journal"
)

func TestMessageSessionUpdate(t *testing.T) {
	m := &apiclient.Message{Method: "session/update", Params: []byte(`{"sessionId":"s1",
		"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}},
		"_meta":{"agenthost":{"seq":7,"turnId":"t1"}}}`)}
	p, u, ok := m.SessionUpdate()
	c, isChunk := u.(*journal.Chunk)
	if !ok || !isChunk || c.Kind != journal.KindAgentMessageChunk || c.Content.Text() != "hi" || p.Meta.Agenthost.Seq != 7 || p.SessionID != "s1" {
		t.Errorf("SessionUpdate() = %+v, %#v, %v; want the chunk \"hi\" of s1 at seq 7", p, u, ok)
	}
	for _, other := range []*apiclient.Message{
		{Method: "_agenthost/journal", Params: m.Params},
		{Method: "session/update", Params: []byte(`{"sessionId":"s1","update":{"sessionUpdate":7}}`)},
		{Method: "session/update", Params: []byte(`not json`)},
	} {
		if _, u, ok := other.SessionUpdate(); ok {
			t.Errorf("%s %s: SessionUpdate() = %#v, true; want false", other.Method, other.Params, u)
		}
	}
}
