package apiclient

import (
	"encoding/json"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/journal"
)

// SessionUpdate decodes a session/update notification: its params (the
// session, and the journal position under _meta) and the update itself.
// ok is false for any other message, or one that does not decode.
func (m *Message) SessionUpdate() (p api.SessionUpdateParams, u journal.SessionUpdate, ok bool) {
	if m.Method != api.MethodSessionUpdate || json.Unmarshal(m.Params, &p) != nil {
		return p, nil, false
	}
	u, err := journal.DecodeUpdate(p.Update)
	return p, u, err == nil
}
