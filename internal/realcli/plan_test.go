package realcli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/internal/realcli"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugins/codex"
)

// The ACP plan row: an agent's plan reaches the client as a plan
// session/update, journaled once. Claude's comes from its TodoWrite
// tool, codex's from turn/plan/updated, which its update_plan tool
// causes. Neither pinned CLI offers its plan tool by default, so both
// plugins turn it on by default, and these scenarios set no option for it:
//   - claude 2.1.332 enables TodoWrite only with its task tools off
//     (CLAUDE_CODE_ENABLE_TASKS=false) and, for its newer models, with
//     CLAUDE_CODE_ENABLE_TODO_TOOLS=true, which the plugin sets in the
//     CLI's environment unless the session or the operator does; with
//     the task tools on it offers TaskCreate/TaskUpdate instead, which
//     are no plan. TodoWrite is then deferred behind ToolSearch (not in
//     the request's tools) yet callable.
//   - codex 0.171.0 offers update_plan only with the config override
//     tools.update_plan.enabled=true, which the plugin passes unless the
//     session's config option decides it; codex offers it as a function
//     tool for a model it has no metadata for (realcli.ModelCodexFunctions)
//     and on the code-mode exec tool's tools object for its default model.

// wantPlan is the plan both scenarios have the model write: one entry of
// each status.
var wantPlan = []acp.PlanEntry{
	{Content: "Read the code", Status: acp.PlanEntryStatusCompleted},
	{Content: "Write the fix", Status: acp.PlanEntryStatusInProgress},
	{Content: "Run the tests", Status: acp.PlanEntryStatusPending},
}

// Claude's TodoWrite call is a plan update with its todos' contents and
// statuses.
func TestClaudePlan(t *testing.T) {
	t.Parallel()
	r, s, cl := startClaude(t)
	type todo struct {
		Content    string `json:"content"`
		Status     string `json:"status"`
		ActiveForm string `json:"activeForm"`
	}
	var todos []todo
	for _, e := range wantPlan {
		todos = append(todos, todo{Content: e.Content, Status: string(e.Status), ActiveForm: e.Content + " now"})
	}
	input := asJSON(t, map[string]any{"todos": todos})
	r.script(modelserver.Tool("TodoWrite", input), modelserver.Text("Planned."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "make a plan", "end_turn")

	if asked := cl.permissionRequests(); len(asked) != 0 {
		t.Errorf("TodoWrite asked %d permissions; want none", len(asked))
	}
	assertPlan(t, r, s, cl, id)
	// The CLI ran the tool: its result went back to the model.
	if results := r.nextRequest(2).ToolResults(); len(results) != 1 || results[0].IsError || !strings.Contains(results[0].Text, "Todos have been modified") {
		t.Errorf("the model's second request carries tool results %+v; want TodoWrite's success", results)
	}
}

// Codex's update_plan function call is a plan update with the steps and
// statuses (its in_progress arrives as turn/plan/updated's inProgress).
func TestCodexPlan(t *testing.T) {
	t.Parallel()
	r, s, c, id := newCodexSession(t, map[string]string{codex.OptModel: realcli.ModelCodexFunctions})
	type step struct {
		Step   string `json:"step"`
		Status string `json:"status"`
	}
	var steps []step
	for _, e := range wantPlan {
		steps = append(steps, step{Step: e.Content, Status: string(e.Status)})
	}
	args := asJSON(t, map[string]any{"plan": steps, "explanation": "Fixing the bug"})
	r.script(modelserver.Tool("update_plan", args), modelserver.Text("Planned."))
	c.mustPrompt(id, "make a plan", "end_turn")

	if first := r.nextRequest(1); !slices.Contains(first.Tools, "update_plan") {
		t.Errorf("the model was not offered update_plan; its tools: %v", first.Tools)
	}
	if asked := c.permissionRequests(); len(asked) != 0 {
		t.Errorf("update_plan asked %d permissions; want none", len(asked))
	}
	assertPlan(t, r, s, c, id)
	if results := r.nextRequest(2).ToolResults(); len(results) != 1 || results[0].Text != "Plan updated" {
		t.Errorf("the model's second request carries tool results %+v; want update_plan's success", results)
	}
}

// assertPlan fails the test unless the client received exactly one plan
// update, carrying wantPlan's contents and statuses, and the session's
// journal holds it once.
func assertPlan(t *testing.T, r *rig, s *server, c *client, id string) {
	t.Helper()
	plans := kindOf[*journal.Plan](c)
	if len(plans) != 1 {
		t.Fatalf("the client received %d plan updates; want 1: %s", len(plans), asJSON(t, plans))
	}
	if got := contentsAndStatuses(plans[0].Entries); !slices.Equal(got, contentsAndStatuses(wantPlan)) {
		t.Errorf("the plan's entries %v; want %v", got, contentsAndStatuses(wantPlan))
	}
	var journaled []*journal.Plan
	for _, u := range updates(r.journal(s, id)) {
		if p, ok := u.Update.(*journal.Plan); ok {
			journaled = append(journaled, p)
		}
	}
	if len(journaled) != 1 {
		t.Fatalf("the journal holds %d plan updates; want 1", len(journaled))
	}
	a, _ := json.Marshal(journaled[0])
	b, _ := json.Marshal(plans[0])
	if string(a) != string(b) {
		t.Errorf("the journaled plan %s differs from the one the client received %s", a, b)
	}
}

// contentsAndStatuses is "content=status" per plan entry.
func contentsAndStatuses(es []acp.PlanEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Content+"="+string(e.Status))
	}
	return out
}
