package claude

import (
	"encoding/json"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/internal/allowscope"
)

// This file maps Claude Code's tools to ACP tool calls as a desktop shows
// them: a kind, a title, the files touched (locations, with a line where
// the input or result names one), and for the file-editing tools a diff.
// A call's diff comes first from its input (Edit's old_string and
// new_string, Write's content: a new file has no old text) and is
// replaced, when the result arrives, by the result's structuredPatch: the
// changed hunks with their context and line numbers, every site of a
// replace_all included.

// toolInput is the union of the input fields the mapping reads.
type toolInput struct {
	FilePath     string `json:"file_path"`
	NotebookPath string `json:"notebook_path"`
	Path         string `json:"path"`
	Offset       int    `json:"offset"`
	OldString    string `json:"old_string"`
	NewString    string `json:"new_string"`
	Content      string `json:"content"`
	Edits        []struct {
		OldString string `json:"old_string"`
		NewString string `json:"new_string"`
	} `json:"edits"`
	Command string `json:"command"`
	Plan    string `json:"plan"`
}

// toolInfo is what a tool call shows before it runs.
type toolInfo struct {
	title, kind string
	locations   []sdk.Location
	content     []sdk.ToolCallContent
}

// toolInfoOf maps a tool_use (or a permission request's tool and input).
func toolInfoOf(name string, input json.RawMessage) toolInfo {
	info := toolInfo{title: toolTitle(name, input), kind: toolKind(name)}
	var in toolInput
	if err := json.Unmarshal(input, &in); err != nil && !isTypeError(err) {
		return info
	}
	loc := func(path string, line int) {
		if path != "" {
			info.locations = append(info.locations, sdk.Location{Path: path, Line: line})
		}
	}
	switch name {
	case "Read":
		loc(in.FilePath, in.Offset)
	case "Edit":
		loc(in.FilePath, 0)
		if in.FilePath != "" && (in.OldString != "" || in.NewString != "") {
			info.content = append(info.content, sdk.DiffContent(in.FilePath, optText(in.OldString), in.NewString))
		}
	case "MultiEdit":
		loc(in.FilePath, 0)
		for _, e := range in.Edits {
			if in.FilePath != "" {
				info.content = append(info.content, sdk.DiffContent(in.FilePath, optText(e.OldString), e.NewString))
			}
		}
	case "Write":
		loc(in.FilePath, 0)
		if in.FilePath != "" {
			info.content = append(info.content, sdk.DiffContent(in.FilePath, nil, in.Content))
		}
	case "NotebookEdit":
		loc(in.NotebookPath, 0)
	case "Glob", "Grep", "LS":
		loc(in.Path, 0)
	case "ExitPlanMode":
		info.title = "Ready to code?"
		if in.Plan != "" {
			info.content = append(info.content, sdk.TextContent(in.Plan))
		}
	}
	return info
}

// optText is s as a diff's old text: nil (no old text) when empty.
func optText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// editResult is the structured result of Edit, MultiEdit and Write.
type editResult struct {
	Type            string  `json:"type"` // Write: create or update
	FilePath        string  `json:"filePath"`
	Content         string  `json:"content"`
	OriginalFile    *string `json:"originalFile"`
	StructuredPatch []struct {
		OldStart int      `json:"oldStart"`
		NewStart int      `json:"newStart"`
		Lines    []string `json:"lines"`
	} `json:"structuredPatch"`
}

// toolResultUpdate is what a tool's structured result adds to its call:
// for the file-editing tools the diffs of what changed, one per hunk
// (Write of a new file: the whole file, without old text), and the
// lines where they start.
func toolResultUpdate(name string, result json.RawMessage) (content []sdk.ToolCallContent, locs []sdk.Location) {
	switch name {
	case "Edit", "MultiEdit", "Write":
	default:
		return nil, nil
	}
	var r editResult
	if err := json.Unmarshal(result, &r); (err != nil && !isTypeError(err)) || r.FilePath == "" {
		return nil, nil
	}
	if name == "Write" && (r.Type == "create" || r.OriginalFile == nil) {
		return []sdk.ToolCallContent{sdk.DiffContent(r.FilePath, nil, r.Content)}, []sdk.Location{{Path: r.FilePath, Line: 1}}
	}
	for _, h := range r.StructuredPatch {
		var oldText, newText []string
		for _, l := range h.Lines {
			body := ""
			if len(l) > 0 {
				body = l[1:]
			}
			switch {
			case strings.HasPrefix(l, "-"):
				oldText = append(oldText, body)
			case strings.HasPrefix(l, "+"):
				newText = append(newText, body)
			case strings.HasPrefix(l, "\\"): // "\ No newline at end of file"
			default:
				oldText = append(oldText, body)
				newText = append(newText, body)
			}
		}
		if len(oldText) == 0 && len(newText) == 0 {
			continue
		}
		content = append(content, sdk.DiffContent(r.FilePath, optText(strings.Join(oldText, "\n")), strings.Join(newText, "\n")))
		locs = append(locs, sdk.Location{Path: r.FilePath, Line: h.NewStart})
	}
	return content, locs
}

// alwaysScope is what an "allow always" answer to a permission request
// for the tool covers, as the host remembers it (the rules are the
// package doc's "What an allow-always covers"): a file-editing tool
// "edit" when the file lies inside the workspace or an add_dirs
// directory, a Bash command its exact text ("Bash(git status)") when
// allowscope.Command finds it honest, any other tool its name. "" means
// no scope: the request offers no "always" answers.
func alwaysScope(name string, input json.RawMessage, workspace string, dirs []string) string {
	var in toolInput
	if err := json.Unmarshal(input, &in); err != nil && !isTypeError(err) {
		in = toolInput{}
	}
	switch name {
	case "Edit", "MultiEdit", "Write", "NotebookEdit":
		path := in.FilePath
		if name == "NotebookEdit" {
			path = in.NotebookPath
		}
		if !allowscope.Within(path, workspace, append([]string{workspace}, dirs...)) {
			return ""
		}
		return "edit"
	case "Bash":
		if c := allowscope.Command(in.Command); c != "" {
			return "Bash(" + c + ")"
		}
		return ""
	}
	return name
}

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
	case "ExitPlanMode", "EnterPlanMode":
		return "switch_mode"
	case "Task", "Agent", "TodoWrite":
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
