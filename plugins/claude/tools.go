package claude

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// toolKind maps a Claude Code tool to its ACP tool kind.
func toolKind(name string) string {
	switch name {
	case "Bash", "BashOutput", "KillShell", "KillBash", "Monitor":
		return "execute"
	case "Read", "NotebookRead":
		return "read"
	case "Edit", "MultiEdit", "Write", "NotebookEdit":
		return "edit"
	case "Glob", "Grep", "LS", "ToolSearch":
		return "search"
	case "WebFetch", "WebSearch":
		return "fetch"
	case "Task", "Agent", "TodoWrite", "EnterPlanMode", "ExitPlanMode":
		return "think"
	}
	return "other"
}

// toolSubjects name, per tool, the input field that says what a call is
// about.
var toolSubjects = map[string]string{
	"Bash": "command", "Read": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
	"Write": "file_path", "NotebookEdit": "notebook_path", "Grep": "pattern", "Glob": "pattern",
	"WebFetch": "url", "WebSearch": "query", "Task": "description", "Agent": "description",
}

// toolTitle is a short human title for a tool call: the tool's name and
// what it is about ("Bash ls -la", "Read /etc/hosts").
func toolTitle(name string, input json.RawMessage) string {
	if name == "" {
		name = "tool"
	}
	key, ok := toolSubjects[name]
	if !ok {
		return name
	}
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return name
	}
	s, _ := in[key].(string)
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return name
	}
	if r := []rune(s); len(r) > 100 {
		s = string(r[:100]) + "…"
	}
	return name + " " + s
}

// rawJSON returns input as a JSON string, "{}" when empty.
func rawJSON(input json.RawMessage) string {
	if len(strings.TrimSpace(string(input))) == 0 {
		return "{}"
	}
	return string(input)
}

// todoPlan reads a TodoWrite call's todos as a plan; ok is false for
// another tool or a malformed input.
func todoPlan(name string, input json.RawMessage) ([]sdk.PlanEntry, bool) {
	if name != "TodoWrite" {
		return nil, false
	}
	var in struct {
		Todos []struct {
			Content  string `json:"content"`
			Status   string `json:"status"`
			Priority string `json:"priority"`
		} `json:"todos"`
	}
	if err := json.Unmarshal(input, &in); err != nil && !isTypeError(err) {
		return nil, false
	}
	plan := make([]sdk.PlanEntry, 0, len(in.Todos))
	for _, t := range in.Todos {
		p := t.Priority
		if p == "" {
			p = "medium"
		}
		plan = append(plan, sdk.PlanEntry{Content: t.Content, Priority: p, Status: t.Status})
	}
	return plan, true
}

// promptContent turns a prompt into the content of a user line: a string
// when it is all text (as the official SDKs send it), otherwise an array of
// Anthropic content blocks.
func promptContent(blocks []sdk.ContentBlock) (any, error) {
	allText := true
	for _, b := range blocks {
		if b.Type != "text" && b.Type != "" {
			allText = false
		}
	}
	if allText {
		var s strings.Builder
		for _, b := range blocks {
			s.WriteString(b.Text)
		}
		return s.String(), nil
	}
	out := make([]map[string]any, 0, len(blocks))
	for _, b := range blocks {
		blk, err := anthropicBlock(b)
		if err != nil {
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

// anthropicBlock converts one ACP content block.
func anthropicBlock(b sdk.ContentBlock) (map[string]any, error) {
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	var acp struct {
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
		URI      string `json:"uri"`
		Name     string `json:"name"`
		Resource struct {
			URI      string `json:"uri"`
			Text     string `json:"text"`
			Blob     string `json:"blob"`
			MimeType string `json:"mimeType"`
		} `json:"resource"`
	}
	if b.Type != "text" && b.Type != "" {
		if err := json.Unmarshal([]byte(b.JSON), &acp); err != nil {
			return nil, fmt.Errorf("claude: prompt content block of type %q has malformed JSON: %v", b.Type, err)
		}
	}
	image := func(data, mime, uri string) (map[string]any, error) {
		switch {
		case data != "":
			return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": mime, "data": data}}, nil
		case uri != "":
			return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": uri}}, nil
		}
		return nil, fmt.Errorf("claude: prompt image block has neither data nor uri")
	}
	switch b.Type {
	case "text", "":
		return text(b.Text), nil
	case "image":
		return image(acp.Data, acp.MimeType, acp.URI)
	case "resource_link":
		name := acp.Name
		if name == "" {
			name = acp.URI
		}
		return text(fmt.Sprintf("[%s](%s)", name, acp.URI)), nil
	case "resource":
		r := acp.Resource
		switch {
		case r.Text != "":
			return text(fmt.Sprintf("<context ref=%q>\n%s\n</context>", r.URI, r.Text)), nil
		case r.Blob != "" && strings.HasPrefix(r.MimeType, "image/"):
			return image(r.Blob, r.MimeType, "")
		}
		return nil, fmt.Errorf("claude: cannot send embedded resource %q of type %q (only text and images)", r.URI, r.MimeType)
	}
	return nil, fmt.Errorf("claude: cannot send a prompt content block of type %q (supported: text, image, resource, resource_link)", b.Type)
}
