package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

const runLong = `Start a session of an agent (or, with --session, resume one) on the running
host and run one turn: the prompt is journaled, the agent's reply streams to
the terminal as it arrives, and the command ends when the turn does.

Readable output: the agent's text on stdout as it streams, tool calls and plans
as one-liners, and a note on stderr with the session id (resume it later with
--session) and how the turn ended. With --json, stdout gets the raw JSON-RPC
messages instead, one per line: every session/update notification, then the
session/prompt response.

Ctrl-C cancels the turn (the agent stops with reason "cancelled"); a second
Ctrl-C leaves at once, while the turn carries on in the host. If the host goes
away mid-turn, the session keeps running in its plugin: 'agenthost journal ID
--follow' shows the rest once a host serves the state directory again.

When the agent asks for permission (to edit a file, run a command), run asks
you on the terminal; --permissions allow or reject answers without asking.`

type runOptions struct {
	agent, session, cwd string
	json                bool
	permissions         string
}

func (a *App) runCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run --agent NAME [--session ID] PROMPT...",
		Short: "Start or resume a session and stream one turn",
		Long:  runLong,
		Example: `  agenthost run --agent scripted "count 5 200ms"
  agenthost run --agent claude "explain the build system"
  agenthost run --session 0198c2d5-… "and now add a test"       # resume
  agenthost run --agent codex --session my-task "start here"     # a new session with your own id
  echo "summarise README.md" | agenthost run --agent claude -
  agenthost run --agent scripted --json "count 3" | jq -c .params.update`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s needs a PROMPT (or - to read it from stdin)", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt := strings.Join(args, " ")
			if prompt == "-" {
				b, err := io.ReadAll(a.Stdin)
				if err != nil {
					return fmt.Errorf("read the prompt from stdin: %w", err)
				}
				prompt = string(b)
			}
			if o.cwd != "" {
				abs, err := filepath.Abs(o.cwd)
				if err != nil {
					return usageErrorf("--cwd %q: %v", o.cwd, err)
				}
				o.cwd = abs
			}
			switch o.permissions {
			case "ask", "allow", "reject":
			default:
				return usageErrorf("--permissions %q: expected ask, allow or reject", o.permissions)
			}
			return a.runTurn(cmd.Context(), o, prompt)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.agent, "agent", "", "the agent to start a session of (see 'agenthost agents')")
	f.StringVar(&o.session, "session", "", "resume this session; with --agent, start a new one under this id if there is none")
	f.StringVar(&o.cwd, "cwd", "", "the workspace directory of a new session (default: the current directory; a resumed session keeps its own)")
	f.BoolVar(&o.json, "json", false, "print the raw JSON-RPC messages (one JSON object per line) instead of formatted text")
	f.StringVar(&o.permissions, "permissions", "ask", "answer the agent's permission requests: ask (on the terminal), allow or reject")
	_ = cmd.RegisterFlagCompletionFunc("agent", a.completeAgents)
	_ = cmd.RegisterFlagCompletionFunc("session", a.completeSessions)
	_ = cmd.RegisterFlagCompletionFunc("permissions", cobra.FixedCompletions([]string{"ask", "allow", "reject"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("cwd")
	return cmd
}

func (a *App) runTurn(ctx context.Context, o runOptions, prompt string) error {
	var spin *spinner
	if !o.json {
		spin = startSpinner(a.Stderr)
	}
	defer spin.close()
	r := newRenderer(a.Stdout, spin)
	errStyle := styleFor(a.Stderr)
	var outMu sync.Mutex
	printRaw := func(b []byte) {
		outMu.Lock()
		defer outMu.Unlock()
		a.Stdout.Write(append(append([]byte(nil), b...), '\n'))
	}
	// notef prints a note of the CLI's own on stderr, on a line of its own.
	notef := func(format string, args ...any) {
		r.finish()
		spin.clear()
		fmt.Fprintln(a.Stderr, errStyle.dim(fmt.Sprintf(format, args...)))
	}

	var mu sync.Mutex
	var sessionID string
	onNote := func(m *apiclient.Message) {
		if m.Method != api.MethodSessionUpdate {
			return
		}
		var p api.SessionUpdateParams
		if json.Unmarshal(m.Params, &p) != nil {
			return
		}
		mu.Lock()
		id := sessionID
		mu.Unlock()
		if id != "" && p.SessionID != id {
			return
		}
		if o.json {
			printRaw(m.Raw)
			return
		}
		r.update(p.Update)
	}
	c, err := a.connect(ctx, apiclient.Options{OnNotification: onNote, OnRequest: a.permissionAnswerer(o.permissions, notef)})
	if err != nil {
		return err
	}
	defer c.Close()

	id, agent, how, err := openSession(ctx, c, o)
	if err != nil {
		return err
	}
	mu.Lock()
	sessionID = id
	mu.Unlock()
	if !o.json {
		notef("session %s (%s, %s)", id, agent, how)
	}

	type answer struct {
		m   *apiclient.Message
		err error
	}
	done := make(chan answer, 1)
	go func() {
		m, err := c.CallRaw(ctx, api.MethodSessionPrompt, acp.PromptRequest{
			SessionId: acp.SessionId(id), Prompt: []acp.ContentBlock{acp.TextBlock(prompt)},
		})
		done <- answer{m, err}
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cancelled := false
	// A cancel that reaches the host while the prompt is still on its way
	// to the agent can be lost; until the turn ends, it is sent again
	// every second (cancelling is idempotent).
	var recancel <-chan time.Time
	for {
		select {
		case <-recancel:
			_ = c.Notify(api.MethodSessionCancel, acp.CancelNotification{SessionId: acp.SessionId(id)})
			continue
		case <-sigs:
			if !cancelled {
				cancelled = true
				_ = c.Notify(api.MethodSessionCancel, acp.CancelNotification{SessionId: acp.SessionId(id)})
				notef("cancelling the turn… (Ctrl-C again to leave it running)")
				t := time.NewTicker(time.Second)
				defer t.Stop()
				recancel = t.C
				continue
			}
			notef("left the turn running in the host; follow it with: agenthost journal %s --follow%s", shellQuote(id), a.stateDirArg())
			return exitCode(130)
		case ans := <-done:
			r.finish()
			spin.close()
			return a.turnEnded(ans.m, ans.err, o, id, cancelled, printRaw, errStyle)
		}
	}
}

// turnEnded reports how the turn ended and picks the exit status.
func (a *App) turnEnded(m *apiclient.Message, err error, o runOptions, id string, cancelled bool, printRaw func([]byte), st style) error {
	if m != nil && o.json {
		printRaw(m.Raw)
	}
	var rpcErr *apiclient.Error
	switch {
	case cancelled && errors.As(err, &rpcErr) && strings.Contains(rpcErr.Message, "context canceled"):
		// The local API answers a cancelled prompt with this error rather
		// than the "cancelled" stop reason; the turn itself ends cancelled
		// in the plugin and its journal.
		if !o.json {
			fmt.Fprintf(a.Stderr, "%s %s\n", st.dim("turn ended:"), st.yellow("cancelled"))
		}
		return exitCode(130)
	case errors.As(err, &rpcErr):
		return fmt.Errorf("%s (session %s)", rpcErr.Error(), id)
	case errors.Is(err, apiclient.ErrClosed):
		why := ""
		if err != apiclient.ErrClosed {
			why = " (" + strings.TrimPrefix(err.Error(), apiclient.ErrClosed.Error()+": ") + ")"
		}
		return fmt.Errorf("lost the connection to the host%s\nthe session keeps running in its plugin; once a host serves %s again, follow it with: agenthost journal %s --follow%s",
			why, a.stateDirOrDefault(), shellQuote(id), a.stateDirArg())
	case err != nil:
		return err
	}
	var res acp.PromptResponse
	_ = json.Unmarshal(m.Result, &res)
	if !o.json {
		word := string(res.StopReason)
		switch word {
		case "end_turn":
			word = st.green(word)
		case "cancelled":
			word = st.yellow(word)
		default:
			word = st.red(word)
		}
		fmt.Fprintf(a.Stderr, "%s %s\n", st.dim("turn ended:"), word)
	}
	if cancelled {
		return exitCode(130)
	}
	return nil
}

func (a *App) stateDirOrDefault() string {
	dir, err := a.resolveStateDir()
	if err != nil {
		return a.stateDir
	}
	return dir
}

// stateDirArg is " --state-dir DIR" unless the state directory is the
// default one.
func (a *App) stateDirArg() string { return stateDirFlag(a.stateDirOrDefault()) }

// openSession starts or resumes the session the options name and returns
// its id, agent and what happened ("new" or "resumed").
func openSession(ctx context.Context, c *apiclient.Client, o runOptions) (id, agent, how string, err error) {
	wd, _ := os.Getwd()
	if o.session != "" {
		var info api.SessionResult
		err := c.Call(ctx, api.MethodSession, api.Params{SessionID: o.session}, &info)
		switch {
		case err == nil:
			if o.agent != "" && o.agent != info.Session.Agent {
				return "", "", "", fmt.Errorf("session %s runs agent %s, not %s", o.session, info.Session.Agent, o.agent)
			}
			cwd := firstNonEmpty(o.cwd, info.Session.Workspace, wd)
			if err := c.Call(ctx, api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: acp.SessionId(o.session), Cwd: cwd}, nil); err != nil {
				if apiclient.ErrorCode(err) == api.CodeSessionElsewhere {
					return "", "", "", elsewhereError(o.session, err)
				}
				return "", "", "", fmt.Errorf("resume session %s: %w", o.session, err)
			}
			return o.session, info.Session.Agent, "resumed", nil
		case apiclient.ErrorCode(err) != api.CodeNotFound:
			return "", "", "", err
		case o.agent == "":
			return "", "", "", fmt.Errorf("there is no session %s: name an --agent to start one under this id", o.session)
		}
	}
	if o.agent == "" {
		var agents api.AgentsResult
		_ = c.Call(ctx, api.MethodAgents, nil, &agents)
		return "", "", "", usageErrorf("name the agent to run with --agent NAME; this host runs %s", strings.Join(agents.Agents, ", "))
	}
	var res acp.NewSessionResponse
	params := acp.NewSessionRequest{Cwd: firstNonEmpty(o.cwd, wd), McpServers: []acp.McpServer{},
		Meta: map[string]any{api.MetaKey: api.NewSessionMeta{Agent: o.agent, SessionID: o.session}}}
	if err := c.Call(ctx, api.MethodSessionNew, params, &res); err != nil {
		return "", "", "", fmt.Errorf("start a session of %s: %w", o.agent, err)
	}
	return string(res.SessionId), o.agent, "new", nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// permissionAnswerer answers the agent's permission requests by mode: ask
// on the terminal, allow or reject.
func (a *App) permissionAnswerer(mode string, notef func(string, ...any)) func(string, json.RawMessage) (any, error) {
	var askMu sync.Mutex
	in := bufio.NewReader(a.Stdin)
	return func(method string, params json.RawMessage) (any, error) {
		if method != api.MethodRequestPermission {
			return nil, &apiclient.Error{Code: api.CodeMethodNotFound, Message: "method not found: " + method}
		}
		var p acp.RequestPermissionRequest
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &apiclient.Error{Code: api.CodeInvalidParams, Message: err.Error()}
		}
		pick := func(kinds ...acp.PermissionOptionKind) acp.PermissionOptionId {
			for _, k := range kinds {
				for _, o := range p.Options {
					if o.Kind == k {
						return o.OptionId
					}
				}
			}
			return ""
		}
		title := ""
		if p.ToolCall.Title != nil {
			title = *p.ToolCall.Title
		}
		title = firstNonEmpty(title, string(p.ToolCall.ToolCallId), "a tool call")
		var choice acp.PermissionOptionId
		switch mode {
		case "allow":
			choice = pick(acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways)
			notef("allowed %q (--permissions allow)", title)
		case "reject":
			choice = pick(acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways)
			notef("rejected %q (--permissions reject)", title)
		default:
			if !isTerminal(a.Stdin) {
				notef("the agent asks permission for %q; with no terminal to ask on it is refused (use --permissions allow or reject)", title)
				break
			}
			askMu.Lock()
			defer askMu.Unlock()
			notef("the agent asks permission for %q:", title)
			for i, o := range p.Options {
				notef("  %d) %s", i+1, firstNonEmpty(o.Name, string(o.OptionId)))
			}
			fmt.Fprint(a.Stderr, "choose 1-"+strconv.Itoa(len(p.Options))+" (anything else refuses): ")
			line, _ := in.ReadString('\n')
			if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n >= 1 && n <= len(p.Options) {
				choice = p.Options[n-1].OptionId
			}
		}
		if choice == "" {
			return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}, nil
		}
		return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(choice)}, nil
	}
}
