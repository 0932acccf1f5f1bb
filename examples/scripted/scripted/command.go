package scripted

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// op is what a turn does.
type op int

const (
	opEcho op = iota
	opCount
	opSleep
	opFail
	opTool
	opAsk
	opUsage
	opAuth
	opEdit
	opMCP
	opSettings
	opTitle
	opExitPlan
	opWait
	opHistory
)

var opNames = [...]string{opEcho: "echo", opCount: "count", opSleep: "sleep", opFail: "fail", opTool: "tool", opAsk: "ask",
	opUsage: "usage", opAuth: "auth", opEdit: "edit", opMCP: "mcp", opSettings: "settings", opTitle: "title", opExitPlan: "exitplan", opWait: "wait",
	opHistory: "history"}

func (o op) String() string { return opNames[o] }

// command is a parsed prompt.
type command struct {
	op op
	// n is how many chunks count streams.
	n int
	// d is the interval between count's chunks, or how long sleep holds
	// the turn.
	d time.Duration
	// text is the reply of an echo, the message of a fail, the title of
	// title, or what edit writes.
	text string
	// path is the file edit writes.
	path string
	// used and size are the context tokens and the context window usage
	// reports.
	used, size int64
}

// Usage lines, quoted by the errors of malformed commands.
const (
	usageCount = `count N [INTERVAL], with N a whole number and INTERVAL a Go duration, e.g. "count 3 100ms"`
	usageSleep = `sleep DURATION, with DURATION a Go duration, e.g. "sleep 2s"`
	usageFail  = `fail MESSAGE, e.g. "fail out of tokens"`
	usageUsage = `usage USED SIZE, with USED and SIZE whole numbers of tokens, e.g. "usage 53000 200000"`
	usageEdit  = `edit PATH TEXT, with PATH a file in the workspace, e.g. "edit notes.txt hello"`
	usageTitle = `title TEXT, e.g. "title Fix the flaky test"`
)

// bare are the commands that take no arguments.
var bare = map[string]op{"tool": opTool, "ask": opAsk, "auth": opAuth, "mcp": opMCP, "settings": opSettings, "exitplan": opExitPlan, "wait": opWait,
	"history": opHistory}

// parse reads the command in a prompt's text. Text whose first word is not
// a keyword is an echo; a keyword with malformed arguments is an error that
// says what was expected. A keyword may be written as a slash command
// ("/count 3"), as a client offers the agent's available commands.
func parse(text string) (command, error) {
	text = strings.TrimSpace(text)
	keyword, rest := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		keyword, rest = text[:i], strings.TrimSpace(text[i:])
	}
	args := strings.Fields(rest)
	if k, ok := strings.CutPrefix(keyword, "/"); ok && isKeyword(k) {
		keyword = k
	}
	if o, ok := bare[keyword]; ok {
		if rest != "" {
			return command{}, malformed(text, keyword+", with no arguments")
		}
		return command{op: o}, nil
	}

	switch keyword {
	case "count":
		if len(args) < 1 || len(args) > 2 {
			return command{}, malformed(text, usageCount)
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			return command{}, malformed(text, usageCount)
		}
		var d time.Duration
		if len(args) == 2 {
			if d, err = time.ParseDuration(args[1]); err != nil || d < 0 {
				return command{}, malformed(text, usageCount)
			}
		}
		return command{op: opCount, n: n, d: d}, nil
	case "sleep":
		if len(args) != 1 {
			return command{}, malformed(text, usageSleep)
		}
		d, err := time.ParseDuration(args[0])
		if err != nil || d < 0 {
			return command{}, malformed(text, usageSleep)
		}
		return command{op: opSleep, d: d}, nil
	case "fail":
		if rest == "" {
			return command{}, malformed(text, usageFail)
		}
		return command{op: opFail, text: rest}, nil
	case "edit":
		if len(args) < 2 {
			return command{}, malformed(text, usageEdit)
		}
		return command{op: opEdit, path: args[0], text: strings.TrimSpace(strings.TrimPrefix(rest, args[0]))}, nil
	case "title":
		if rest == "" {
			return command{}, malformed(text, usageTitle)
		}
		return command{op: opTitle, text: rest}, nil
	case "usage":
		if len(args) != 2 {
			return command{}, malformed(text, usageUsage)
		}
		used, err1 := strconv.ParseInt(args[0], 10, 64)
		size, err2 := strconv.ParseInt(args[1], 10, 64)
		if err1 != nil || err2 != nil || used < 0 || size < 0 {
			return command{}, malformed(text, usageUsage)
		}
		return command{op: opUsage, used: used, size: size}, nil
	}
	return command{op: opEcho, text: text}, nil
}

// isKeyword reports whether word starts a command.
func isKeyword(word string) bool {
	switch word {
	case "count", "sleep", "fail", "usage", "edit", "title":
		return true
	}
	_, ok := bare[word]
	return ok
}

func malformed(text, usage string) error {
	return fmt.Errorf("scripted: cannot run %q: expected %s", text, usage)
}
