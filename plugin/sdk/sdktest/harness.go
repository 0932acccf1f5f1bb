package sdktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// Errors the harness's calls return match these with errors.Is. They are
// the host's own, so a test sees a failure as agenthost would.
var (
	// ErrAgent: the agent's factory, NewSession or ResumeSession failed;
	// the error's message is the agent's.
	ErrAgent = pluginclient.ErrAgent
	// ErrBusy: Prompt while a turn is still running.
	ErrBusy = pluginclient.ErrBusy
	// ErrClosed: a call after Close.
	ErrClosed = pluginclient.ErrClosed
	// ErrNotImplemented: the agent does not implement the call.
	ErrNotImplemented = pluginclient.ErrNotImplemented
	// ErrSelfFenced: Prompt while the plugin has fenced itself (it was
	// spawned with sdk.EnvSelfFence and no Heartbeat came in time).
	ErrSelfFenced = pluginclient.ErrSelfFenced
	// ErrStateNotImportable: a resume carried provider state to an agent
	// that is no sdk.StateImporter.
	ErrStateNotImportable = pluginclient.ErrStateNotImportable
)

// Update is one update the agent emitted, as the host receives it: its
// plugin sequence number, turn, protocol kind name (agent_message_chunk,
// tool_call, turn_stopped, …) and the journal's record of it, the shape an
// API client is sent (see package journal). Stop and SessionUpdate read
// the record.
type Update = pluginclient.Update

// HarnessOption configures NewHarness.
type HarnessOption func(*harnessConfig)

type harnessConfig struct {
	name   string
	logger hclog.Logger
	serve  []sdk.ServeOption
}

// WithCapabilities declares the agent's capabilities, as
// sdk.WithCapabilities does for Serve; NewHarness only: a plugin binary
// declares its own.
func WithCapabilities(c sdk.Capabilities) HarnessOption {
	return func(cfg *harnessConfig) { cfg.serve = append(cfg.serve, sdk.WithCapabilities(c)) }
}

// WithAgentName sets the agent name Identify reports (default "sdktest");
// NewHarness only: a plugin binary names itself.
func WithAgentName(name string) HarnessOption {
	return func(c *harnessConfig) { c.name = name }
}

// WithAgentLogger sets the agent's Environment.Logger (default: the test's
// log, through t.Log). With NewProcessHarness the plugin's log lines are
// relayed to it, and the plugin logs at its level.
func WithAgentLogger(l hclog.Logger) HarnessOption {
	return func(c *harnessConfig) { c.logger = l }
}

// Harness drives one session's agent as a host does: over real gRPC,
// through the host's own plugin client, attached at fence 1 to SessionID,
// with the session's updates collected as they come. Create it with
// NewHarness (the agent served in-process) or NewProcessHarness (a plugin
// binary). Its methods are safe for concurrent use.
type Harness struct {
	t      testing.TB
	client *pluginclient.Client
	ctx    context.Context // ends at cleanup
	// attaching serializes Attach, which switches streams.
	attaching sync.Mutex

	mu      sync.Mutex
	att     *pluginclient.Attachment
	updates []Update
	read    int    // updates handed out by Next
	last    uint64 // seq of the newest update received
	wake    chan struct{}
	// stopFollow ends the current stream, which closes followDone.
	stopFollow context.CancelFunc
	followDone chan struct{}
	// ended is why the stream ended by itself, nil while it runs.
	ended error
}

// NewHarness serves factory's agent on an in-memory gRPC connection with
// sdk.ServeListener, attaches at fence 1 and follows the session's updates
// from seq 1. It never starts a process: the factory and the agent run in
// the test's own process, at the first NewSession or ResumeSession, so
// configuration an agent reads from the environment is set with t.Setenv
// before that call, and session options are passed to it. When the test
// ends, the running turn is cancelled, the agent closed and every goroutine
// of the harness ended; a failed agent Close fails the test.
func NewHarness(t testing.TB, factory sdk.Factory, opts ...HarnessOption) *Harness {
	t.Helper()
	cfg := newHarnessConfig(t, opts)
	env := sdk.Environment{SessionDir: t.TempDir(), Logger: cfg.logger}

	lis := bufconn.Listen(1 << 20)
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sdk.ServeListener(serveCtx, lis, cfg.name, factory, env, cfg.serve...) }()
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
	conn, err := grpc.NewClient("passthrough:///sdktest",
		append([]grpc.DialOption{grpc.WithContextDialer(dial), grpc.WithTransportCredentials(insecure.NewCredentials())},
			wire.HostDialOptions()...)...)
	if err != nil {
		stopServe()
		<-served
		t.Fatalf("sdktest: connect to the agent: %v", err)
	}
	return attach(t, pluginclient.New(conn, wire.ProtocolVersion), func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("sdktest: the agent did not close cleanly: %v", err)
		}
		_ = conn.Close()
	})
}

func newHarnessConfig(t testing.TB, opts []HarnessOption) harnessConfig {
	cfg := harnessConfig{name: "sdktest"}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = logtest.New(t)
	}
	return cfg
}

// attach makes the Harness of client: it attaches at fence 1 and follows
// the session's updates from seq 1. When the test ends it stops following
// and calls stop, which ends the agent's serving.
func attach(t testing.TB, client *pluginclient.Client, stop func()) *Harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Harness{t: t, client: client, ctx: ctx, wake: make(chan struct{}, 1)}
	t.Cleanup(func() {
		h.mu.Lock()
		h.unfollow()
		h.mu.Unlock()
		cancel()
		stop()
	})

	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	att, _, err := h.client.Attach(actx, SessionID, 1)
	if err != nil {
		t.Fatalf("sdktest: Attach(fence 1): %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.follow(att, 1); err != nil {
		t.Fatalf("sdktest: Updates(fence 1): %v", err)
	}
	return h
}

// follow opens the update stream of att from seq from and collects it in
// the background. Callers hold h.mu, and no stream is being followed.
func (h *Harness) follow(att *pluginclient.Attachment, from uint64) error {
	sctx, stop := context.WithCancel(h.ctx)
	s, err := att.Updates(sctx, from)
	if err != nil {
		stop()
		return err
	}
	done := make(chan struct{})
	h.att, h.stopFollow, h.followDone, h.ended = att, stop, done, nil
	go func() {
		defer close(done)
		for {
			u, err := s.Recv()
			h.mu.Lock()
			switch {
			case err != nil && sctx.Err() == nil:
				h.ended = err
			case err == nil && u.Seq > h.last:
				h.updates = append(h.updates, *u)
				h.last = u.Seq
			}
			h.mu.Unlock()
			select {
			case h.wake <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// unfollow ends the current stream and waits for its reader. Callers hold
// h.mu, which unfollow releases while it waits.
func (h *Harness) unfollow() {
	if h.stopFollow == nil {
		return
	}
	h.stopFollow()
	done := h.followDone
	h.mu.Unlock()
	<-done
	h.mu.Lock()
}

func (h *Harness) attachment() *pluginclient.Attachment {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.att
}

// Identity is who the agent's plugin server says it is, as a host reads
// it: the session id once attached (SessionID), the process id (the
// test's own with NewHarness, the plugin process's with
// NewProcessHarness), a per-start instance id, the protocol version
// (sdk.ProtocolVersion), the agent's name and version (the version once a
// sdk.Describer agent has a session open), the fence attached, the open
// session's provider handle, and the newest update seq produced.
type Identity = pluginclient.Identity

// Identify asks who the plugin server is.
func (h *Harness) Identify(ctx context.Context) (Identity, error) {
	return h.client.Identify(ctx)
}

// Attach attaches at the next fence, as a host that took the session over
// does: calls carrying the old fence are refused from then on, and the
// harness goes on following updates at the new fence from the first one
// it has not received, so none is lost or repeated.
func (h *Harness) Attach(ctx context.Context) error {
	h.attaching.Lock()
	defer h.attaching.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unfollow()
	att, from := h.att, h.last+1
	next, _, err := h.client.Attach(ctx, SessionID, att.Fence()+1)
	if err == nil {
		att = next
	}
	if ferr := h.follow(att, from); ferr != nil {
		err = errors.Join(err, ferr)
	}
	return err
}

// NewSession opens a new conversation; the first call creates the agent
// with the factory. A failure of the factory or the agent matches ErrAgent.
func (h *Harness) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	info, err := h.attachment().NewSession(ctx, pluginclient.NewSessionRequest{Workspace: req.Workspace, Options: req.Options,
		MCPServers: mcpServers(req.MCPServers)})
	return sessionInfo(info), err
}

// ResumeSession reopens the conversation named by req.Handle; the first
// call creates the agent with the factory.
func (h *Harness) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	info, err := h.attachment().ResumeSession(ctx, pluginclient.ResumeSessionRequest{Workspace: req.Workspace,
		Options: req.Options, Handle: req.Handle, MCPServers: mcpServers(req.MCPServers)})
	return sessionInfo(info), err
}

// ResumeSessionWithState is ResumeSession carrying a provider state, as a
// host on another machine resumes a session whose state an ExportState
// returned: the SDK hands it to the agent's sdk.StateImporter first.
func (h *Harness) ResumeSessionWithState(ctx context.Context, req sdk.ResumeSessionRequest, state []byte) (sdk.SessionInfo, error) {
	info, err := h.attachment().ResumeSession(ctx, pluginclient.ResumeSessionRequest{Workspace: req.Workspace,
		Options: req.Options, Handle: req.Handle, MCPServers: mcpServers(req.MCPServers), ProviderState: state})
	return sessionInfo(info), err
}

// ExportState asks the agent for its provider state (sdk.StateExporter)
// as a host does after a turn: the handle it continues and the bytes. An
// agent that exports nothing matches ErrNotImplemented.
func (h *Harness) ExportState(ctx context.Context) (handle string, state []byte, err error) {
	return h.attachment().ExportState(ctx)
}

// Heartbeat sends a host's heartbeat at the harness's fence, granting
// validFor (see sdk.EnvSelfFence); selfFenced reports that the plugin had
// fenced itself when it arrived.
func (h *Harness) Heartbeat(ctx context.Context, validFor time.Duration) (selfFenced bool, err error) {
	return h.attachment().Heartbeat(ctx, validFor)
}

// HeartbeatAt sends a heartbeat at fence, which need not be the
// harness's: a test of the refusal of a stale one.
func (h *Harness) HeartbeatAt(ctx context.Context, fence uint64, validFor time.Duration) (selfFenced bool, err error) {
	return h.client.Heartbeat(ctx, fence, validFor)
}

// HeartbeatUntil sends a heartbeat at the harness's fence whose grant ends
// at untilBootNs on the machine's boot clock (bootclock.Now), as one the
// plugin reads long after the host sent it: in the past, it must neither
// lift the self-fence nor keep a running turn alive.
func (h *Harness) HeartbeatUntil(ctx context.Context, validFor time.Duration, untilBootNs int64) (selfFenced bool, err error) {
	return h.client.HeartbeatUntil(ctx, h.Fence(), validFor, untilBootNs)
}

// Fence is the fence the harness is attached at now.
func (h *Harness) Fence() uint64 { return h.attachment().Fence() }

// SetMode switches the session's mode. An agent without modes matches
// ErrNotImplemented; a mode it refuses is an *InvalidOptionError.
func (h *Harness) SetMode(ctx context.Context, modeID string) error {
	return h.attachment().SetMode(ctx, modeID)
}

// SetConfigOption sets a config option and returns all of them as the
// agent answered; errors as SetMode's.
func (h *Harness) SetConfigOption(ctx context.Context, id, value string) ([]sdk.ConfigOption, error) {
	opts, err := h.attachment().SetConfigOption(ctx, id, value)
	return configOptions(opts), err
}

// InvalidOptionError is the host's form of the agent's
// *sdk.InvalidOptionError: errors.As finds it in the error of
// NewSession, ResumeSession, SetMode and SetConfigOption.
type InvalidOptionError = pluginclient.InvalidOptionError

// ErrAuthRequired is matched by the error of an open the agent failed
// with sdk.ErrAuthRequired.
var ErrAuthRequired = pluginclient.ErrAuthRequired

// Prompt starts a turn with a text prompt and returns its id at once; read
// its updates with Turn.
func (h *Harness) Prompt(ctx context.Context, text string) (string, error) {
	return h.PromptBlocks(ctx, sdk.TextBlock(text))
}

// PromptBlocks starts a turn with a prompt of any blocks (an image, a
// resource, …) and returns its id at once.
func (h *Harness) PromptBlocks(ctx context.Context, blocks ...sdk.ContentBlock) (string, error) {
	prompt := make([]pluginclient.ContentBlock, len(blocks))
	for i, b := range blocks {
		prompt[i] = pluginclient.ContentBlock{Type: b.Type, Text: b.Text, JSON: b.JSON}
	}
	return h.attachment().Prompt(ctx, pluginclient.PromptRequest{Prompt: prompt})
}

// AnswerPermission answers a permission request: optionID selects one of
// its options, "" cancels it.
func (h *Harness) AnswerPermission(ctx context.Context, requestID, optionID string) error {
	return h.attachment().AnswerPermission(ctx, requestID, pluginclient.Answer(optionID))
}

// Cancel cancels the running turn, which then ends with StopCancelled.
func (h *Harness) Cancel(ctx context.Context) error { return h.attachment().Cancel(ctx) }

// Close closes the session as a host does before it stops a plugin: the
// running turn is cancelled and the agent closed (sdk.Closer).
func (h *Harness) Close(ctx context.Context) error { return h.attachment().Close(ctx) }

// Next returns the next update not yet returned, waiting up to d; false
// when none arrived in time or the stream ended.
func (h *Harness) Next(d time.Duration) (Update, bool) {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	for {
		h.mu.Lock()
		if h.read < len(h.updates) {
			u := h.updates[h.read]
			h.read++
			h.mu.Unlock()
			return u, true
		}
		ended := h.ended != nil
		h.mu.Unlock()
		if ended {
			return Update{}, false
		}
		select {
		case <-h.wake:
		case <-t.C:
			return Update{}, false
		}
	}
}

// Until reads updates until one satisfies pred and returns them, that one
// last. It fails the test if none does within d; what names the awaited
// update in that message.
func (h *Harness) Until(d time.Duration, what string, pred func(Update) bool) []Update {
	h.t.Helper()
	deadline := time.Now().Add(d)
	var got []Update
	for {
		u, ok := h.Next(time.Until(deadline))
		if !ok {
			h.mu.Lock()
			note := ""
			if h.ended != nil {
				note = fmt.Sprintf("; the update stream ended: %v", h.ended)
			}
			h.mu.Unlock()
			h.t.Fatalf("sdktest: no %s within %s; got %s%s", what, d, Describe(got), note)
		}
		got = append(got, u)
		if pred(u) {
			return got
		}
	}
}

// Turn reads updates until the turn_stopped of turnID, within d, and
// returns them (the turn_stopped last) with how the turn ended.
func (h *Harness) Turn(turnID string, d time.Duration) ([]Update, journal.Stop) {
	h.t.Helper()
	ups := h.Until(d, "turn_stopped of turn "+turnID, func(u Update) bool {
		return u.Stop() != nil && u.TurnID == turnID
	})
	return ups, *ups[len(ups)-1].Stop()
}

// Run prompts with text and waits up to d for the turn to end, failing the
// test otherwise.
func (h *Harness) Run(text string, d time.Duration) ([]Update, journal.Stop) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, d)
	defer cancel()
	id, err := h.Prompt(ctx, text)
	if err != nil {
		h.t.Fatalf("sdktest: Prompt(%q): %v", text, err)
	}
	deadline, _ := ctx.Deadline()
	return h.Turn(id, time.Until(deadline))
}

// Messages concatenates the text of the agent message chunks of ups.
func Messages(ups []Update) string {
	var b strings.Builder
	for _, u := range ups {
		if c, ok := u.SessionUpdate().(*journal.Chunk); ok && c.Kind == journal.KindAgentMessageChunk {
			b.WriteString(c.Content.Text())
		}
	}
	return b.String()
}

// Describe summarises updates for a failure message.
func Describe(ups []Update) string {
	parts := make([]string, 0, len(ups))
	for _, u := range ups {
		s := fmt.Sprintf("%d:%s", u.Seq, u.Kind)
		if c, ok := u.SessionUpdate().(*journal.Chunk); ok && c.Kind == journal.KindAgentMessageChunk {
			s += fmt.Sprintf("(%q)", clip(c.Content.Text(), 40))
		} else if st := u.Stop(); st != nil {
			s += fmt.Sprintf("(%s %q)", st.StopReason, st.Error)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%d updates [%s]", len(ups), strings.Join(parts, " "))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
