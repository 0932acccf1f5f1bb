package pluginclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve serves agents of factory with the real SDK server on an in-memory
// connection; stop ends the server (later calls fail as for a plugin that
// is gone).
func serve(t *testing.T, factory sdk.Factory) (c *Client, stop func()) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	env := sdk.Environment{SessionDir: t.TempDir()}
	go func() { served <- sdk.ServeListener(ctx, lis, "test", factory, env) }()
	conn, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		conn.Close()
	})
	return New(conn, wire.ProtocolVersion), stop
}

// holder opens sessions (failing for workspace "fail"), holds every turn
// until it is cancelled, and asks for nothing.
type holder struct{ sdk.UnimplementedAgent }

func (holder) NewSession(_ context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	if req.Workspace == "fail" {
		return sdk.SessionInfo{}, errors.New("holder: no model configured")
	}
	return sdk.SessionInfo{Handle: "h1", Options: req.Options}, nil
}

func (holder) Prompt(ctx context.Context, _ sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	turn.Message("held")
	<-ctx.Done()
	return sdk.StopCancelled, nil
}

func newHolder(context.Context, sdk.Environment) (sdk.Agent, error) { return holder{}, nil }

// expect checks that err is an *Error matching want, and no other sentinel
// of the refusals.
func expect(t *testing.T, what string, err, want error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, want) {
		t.Errorf("%s: %v (%T), want an *Error matching %v", what, err, err, want)
		return
	}
	for _, other := range []error{ErrStaleFence, ErrNotAttached, ErrNeverAttached, ErrOtherSession, ErrClosed,
		ErrAlreadyOpen, ErrNoSession, ErrBusy, ErrAgent, ErrRefused} {
		if other != want && errors.Is(err, other) {
			t.Errorf("%s: %v also matches %v", what, err, other)
		}
	}
	if !strings.HasPrefix(err.Error(), "rpc error: code = ") {
		t.Errorf("%s: %q does not read as the gRPC status it came from", what, err)
	}
}

// Every refusal of the SDK reaches the client as its own sentinel.
func TestSDKRefusalsMatchTheirSentinels(t *testing.T) {
	ctx := t.Context()
	c, _ := serve(t, newHolder)

	id, err := c.Identify(ctx)
	if err != nil || id.AgentName != "test" || id.Fence != 0 || id.SessionID != "" || id.ProtocolVersion != wire.ProtocolVersion || id.PID == 0 {
		t.Fatalf("Identify before Attach: %+v, %v", id, err)
	}
	unbound := &Attachment{rpc: c.rpc, fence: 1}
	_, err = unbound.Prompt(ctx, PromptRequest{Prompt: Text("x")})
	expect(t, "Prompt before any Attach", err, ErrNotAttached)
	_, _, err = c.Attach(ctx, "s", 0)
	expect(t, "Attach(fence 0)", err, ErrInvalidArgument)

	a1, res, err := c.Attach(ctx, "s\x00/1", 1)
	if err != nil || res.Fence != 1 || a1.Fence() != 1 {
		t.Fatalf("Attach(fence 1): %+v, %v", res, err)
	}
	_, _, err = c.Attach(ctx, "other", 2)
	expect(t, "Attach of another session", err, ErrOtherSession)
	_, err = (&Attachment{rpc: c.rpc, fence: 5}).Prompt(ctx, PromptRequest{Prompt: Text("x")})
	expect(t, "Prompt at a fence never attached", err, ErrNeverAttached)
	_, err = a1.Prompt(ctx, PromptRequest{Prompt: Text("x")})
	expect(t, "Prompt before a session is open", err, ErrNoSession)

	_, err = a1.NewSession(ctx, NewSessionRequest{Workspace: "fail"})
	expect(t, "a failing NewSession", err, ErrAgent)
	var e *Error
	if errors.As(err, &e) && (e.Message != "holder: no model configured" || !e.Answered()) {
		t.Errorf("the agent's refusal: message %q, answered %v", e.Message, e.Answered())
	}
	info, err := a1.NewSession(ctx, NewSessionRequest{Workspace: "/w", Options: map[string]string{"k": "v"}})
	if err != nil || info.Handle != "h1" || info.Options["k"] != "v" {
		t.Fatalf("NewSession: %+v, %v", info, err)
	}
	_, err = a1.ResumeSession(ctx, ResumeSessionRequest{Workspace: "/w", Handle: "h1"})
	expect(t, "a second open", err, ErrAlreadyOpen)
	_, err = a1.ResumeSession(ctx, ResumeSessionRequest{Workspace: "/w"})
	expect(t, "ResumeSession without a handle", err, ErrInvalidArgument)

	stream, err := a1.Updates(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	turn, err := a1.Prompt(ctx, PromptRequest{TurnID: "t1", Prompt: Text("hold")})
	if err != nil || turn != "t1" {
		t.Fatalf("Prompt: %q, %v", turn, err)
	}
	if u, err := stream.Recv(); err != nil || u.Kind != "agent_message_chunk" || chunkText(u) != "held" || u.Seq != 1 || u.TurnID != "t1" {
		t.Fatalf("first update: %v, %v", u, err)
	}
	_, err = a1.Prompt(ctx, PromptRequest{Prompt: Text("again")})
	expect(t, "Prompt during a turn", err, ErrBusy)
	expect(t, "an unknown permission request", a1.AnswerPermission(ctx, "nope", Answer("")), ErrUnknownRequest)
	if err := a1.Acknowledge(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// A newer host attaches: this one's calls and stream are stale.
	a2, res, err := c.Attach(ctx, "s\x00/1", 2)
	if err != nil || res.Fence != 2 || res.LastSeq != 1 {
		t.Fatalf("Attach(fence 2): %+v, %v", res, err)
	}
	_, err = stream.Recv()
	expect(t, "the stream of fence 1", err, ErrStaleFence)
	expect(t, "Cancel at fence 1", a1.Cancel(ctx), ErrStaleFence)
	_, _, err = c.Attach(ctx, "s\x00/1", 1)
	expect(t, "Attach(fence 1) after fence 2", err, ErrStaleFence)

	if err := a2.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = a2.Prompt(ctx, PromptRequest{Prompt: Text("x")})
	expect(t, "Prompt after Close", err, ErrClosed)
	// Updates and acknowledgements still work after Close: the host
	// drains the last ones.
	s2, err := a2.Updates(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := s2.Recv(); err != nil || u.Stop() == nil || u.Stop().StopReason != "cancelled" {
		t.Fatalf("after Close: %v, %v", u, err)
	}
}

func TestNotImplementedAndContextErrors(t *testing.T) {
	c, stop := serve(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return sdk.UnimplementedAgent{}, nil })
	ctx := t.Context()
	a, _, err := c.Attach(ctx, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.NewSession(ctx, NewSessionRequest{})
	if !errors.Is(err, ErrNotImplemented) {
		t.Errorf("NewSession of an unimplemented agent: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Identify(cctx)
	var e *Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Answered() {
		t.Errorf("a cancelled call: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, -time.Second)
	defer dcancel()
	if _, err = c.Identify(dctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Errorf("a call past its deadline: %v", err)
	}

	stop()
	ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
	defer icancel()
	if _, err := c.Identify(ictx); !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Answered() {
		t.Errorf("a call to a plugin that is gone: %v", err)
	}
}

// classify reads a refusal without a known reason by its code, and leaves
// what is no status alone.
func TestClassify(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want error
	}{
		{status.Error(codes.FailedPrecondition, "stale fence: from a plugin without reasons"), ErrRefused},
		{wire.Refusal(codes.FailedPrecondition, "SOMETHING_NEW", "a reason from a newer SDK"), ErrRefused},
		{wire.Refusal(codes.FailedPrecondition, wire.ReasonBusy, "turn t is still running"), ErrBusy},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), ErrTooLarge},
		{status.Error(codes.DataLoss, "outbox"), ErrDataLoss},
		{status.Error(codes.Internal, "no handle"), ErrInternal},
		{status.Error(codes.Unavailable, "closing"), ErrUnavailable},
		{status.Error(codes.Canceled, "grpc: the client connection is closing"), ErrUnavailable},
		{status.Error(codes.DeadlineExceeded, "late"), context.DeadlineExceeded},
		{wire.Refusal(codes.FailedPrecondition, wire.ReasonAuthRequired, "log in"), ErrAuthRequired},
		{status.Error(codes.InvalidArgument, "resume needs the provider handle"), ErrInvalidArgument},
		{wire.RefusalWith(codes.InvalidArgument, wire.ReasonInvalidSetting, "bad model", map[string]string{wire.MetaOption: "model"}), ErrInvalidOption},
		{wire.RefusalWith(codes.InvalidArgument, wire.ReasonInvalidSetting, "bad model", nil), ErrInvalidArgument},
	} {
		got := classify(ctx, tc.err)
		if !errors.Is(got, tc.want) || got.Error() != tc.err.Error() || status.Code(got) != status.Code(tc.err) {
			t.Errorf("classify(%v) = %v, want it to match %v and read and code as before", tc.err, got, tc.want)
		}
	}
	var invalid *InvalidOptionError
	got := classify(ctx, wire.RefusalWith(codes.InvalidArgument, wire.ReasonInvalidSetting, "session option model: no such model",
		map[string]string{wire.MetaOption: "model", wire.MetaReason: "no such model"}))
	if !errors.As(got, &invalid) || invalid.Option != "model" || invalid.Reason != "no such model" {
		t.Errorf("an invalid setting: %v (%+v)", got, invalid)
	}
	if errors.As(classify(ctx, status.Error(codes.InvalidArgument, "malformed")), &invalid) {
		t.Error("an INVALID_ARGUMENT without the reason became an invalid setting")
	}
	var started *TurnStartedError
	for state, running := range map[string]bool{wire.TurnStateRunning: true, wire.TurnStateEnded: false} {
		got := classify(ctx, wire.RefusalWith(codes.FailedPrecondition, wire.ReasonTurnStarted, "turn t1 was already started",
			map[string]string{wire.MetaTurnState: state}))
		if !errors.As(got, &started) || started.Running != running || !errors.Is(got, ErrTurnStarted) || errors.Is(got, ErrBusy) {
			t.Errorf("a turn already started (%s): %v (%+v)", state, got, started)
		}
	}
	var e *Error
	if got := classify(ctx, status.Error(codes.Unknown, "?")); !errors.As(got, &e) || e.Reason != nil || !e.Answered() {
		t.Errorf("an UNKNOWN status: %v (%+v)", got, e)
	}
	plain := fmt.Errorf("not a status")
	if classify(ctx, plain) != plain || classify(ctx, io.EOF) != io.EOF || classify(ctx, nil) != nil {
		t.Error("classify changed an error that is no status")
	}
}

// pastDeadline is a context whose deadline has passed while its timer has
// not fired yet (Err is still nil): what a call sees on a loaded machine
// when the plugin's copy of the deadline ends the stream first.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A call whose context ended returns that context's error, whatever status
// gRPC gave it, and counts as not answered.
func TestClassifyEndedContextIsTheCallersError(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	rst := "stream terminated by RST_STREAM with error code: CANCEL"
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"deadline passed, timer not yet fired: a RST_STREAM", pastDeadline{context.Background()}, status.Error(codes.Canceled, rst), context.DeadlineExceeded},
		{"deadline passed: the connection torn down", pastDeadline{context.Background()}, status.Error(codes.Unavailable, "transport is closing"), context.DeadlineExceeded},
		{"deadline passed: an internal RST_STREAM", pastDeadline{context.Background()}, status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), context.DeadlineExceeded},
		{"cancelled: the connection torn down", cancelled, status.Error(codes.Unavailable, "transport is closing"), context.Canceled},
		{"cancelled: a refusal raced the cancel", cancelled, wire.Refusal(codes.FailedPrecondition, wire.ReasonBusy, "busy"), context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.ctx, tc.err)
			var e *Error
			if !errors.Is(got, tc.want) || !errors.As(got, &e) || e.Answered() || got.Error() != tc.err.Error() {
				t.Errorf("classify = %v (%+v), want it to match %v, unanswered, reading as gRPC's status", got, e, tc.want)
			}
		})
	}
}

// chunkText is the text of a message chunk update, "" for another kind.
func chunkText(u *Update) string {
	if c, ok := u.SessionUpdate().(*journal.Chunk); ok {
		return c.Content.Text()
	}
	return ""
}

// Protocol version 2's Open attaches, answers the identity and the opened
// session, and hands its update stream to the first Updates from the seq
// it asked for; a spawn token or instance id of another process is
// refused before anything changes, and a newer Open ends an older one's
// stream as stale, as a newer Attach ends an Updates stream.
func TestOpenAttachesOpensAndStreamsInOneCall(t *testing.T) {
	ctx := t.Context()
	c, _ := serve(t, newHolder)
	id, err := c.Identify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(ctx, OpenRequest{SessionID: "s", Fence: 1, InstanceID: id.InstanceID + "x"})
	expect(t, "Open of another instance", err, ErrNotThisProcess)
	if after, err := c.Identify(ctx); err != nil || after.Fence != 0 || after.SessionID != "" {
		t.Fatalf("after a refused Open, Identify: %+v, %v; want nothing changed", after, err)
	}

	o, err := c.Open(ctx, OpenRequest{SessionID: "s\x00/1", Fence: 1, InstanceID: id.InstanceID, FromSeq: 1,
		New: &NewSessionRequest{Workspace: "/w", Options: map[string]string{"k": "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Identity.Fence != 1 || o.Identity.SessionID != "s\x00/1" || o.Identity.Handle != "h1" || o.Identity.ProtocolVersion != wire.ProtocolVersion2 ||
		o.Session.Handle != "h1" || o.Session.Options["k"] != "v" || o.Attachment.Fence() != 1 {
		t.Fatalf("Open answered %+v", o)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := o.Attachment.Updates(sctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Attachment.Prompt(ctx, PromptRequest{TurnID: "t1", Prompt: Text("x")}); err != nil {
		t.Fatal(err)
	}
	u, err := stream.Recv()
	if err != nil || u.Seq != 1 || u.TurnID != "t1" {
		t.Fatalf("the first update on Open's stream: %+v, %v", u, err)
	}

	// A readopting host: attach only, from the seq after the last one it
	// has; the older stream ends as stale.
	o2, err := c.Open(ctx, OpenRequest{SessionID: "s\x00/1", Fence: 2, FromSeq: 2})
	if err != nil || o2.Identity.Fence != 2 || o2.Identity.LastSeq < 1 || o2.Session.Handle != "" {
		t.Fatalf("Open(fence 2): %+v, %v", o2, err)
	}
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
	}
	expect(t, "the fence 1 stream after Open(fence 2)", err, ErrStaleFence)
	_, err = c.Open(ctx, OpenRequest{SessionID: "s\x00/1", Fence: 1})
	expect(t, "Open(fence 1) after fence 2", err, ErrStaleFence)
	// Updates from another seq than Open's ends Open's stream and opens
	// its own; Discard after that is a no-op.
	s2, err := o2.Attachment.Updates(sctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := s2.Recv(); err != nil || u.Seq != 1 {
		t.Fatalf("Updates(fence 2, from 1): %+v, %v", u, err)
	}
	o2.Attachment.Discard()
	if err := o2.Attachment.Cancel(ctx); err != nil {
		t.Fatalf("Cancel(fence 2): %v", err)
	}
}

// A client at version 1 has no Open.
func TestOpenNeedsVersion2(t *testing.T) {
	if _, err := (&Client{}).Open(t.Context(), OpenRequest{}); !errors.Is(err, ErrVersion1) {
		t.Fatalf("Open at version 1: %v", err)
	}
}
