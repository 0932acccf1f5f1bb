package claude

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of the process plumbing.
const (
	// drainWait is how long the readers may keep reading after the CLI
	// exited. A descendant that inherited stdout or stderr (a tool's
	// background process) can hold them open forever; past this the
	// plugin stops reading them.
	drainWait = 2 * time.Second
	// writeTimeout bounds one write to the CLI's stdin. A CLI that stops
	// reading its stdin for this long is stuck.
	writeTimeout = 30 * time.Second
	// eventBuffer is how many stdout messages wait for the turn loop.
	eventBuffer = 256
	// stderrLines and stderrLineMax bound the kept tail of stderr.
	stderrLines   = 20
	stderrLineMax = 1000
)

// event is what the reader hands the session: a stdout message, or err
// when the stream broke (a line over the cap). After an err event the
// reader discards the rest of the stream.
type event struct {
	msg *message
	err error
}

// cli is one running claude process and its stream-json plumbing. Its
// stdout is read by one goroutine that routes control responses to the
// requests waiting for them, answers control requests the plugin does not
// support, and hands everything else to events, in order.
type cli struct {
	log   hclog.Logger
	path  string
	start start
	cmd   *exec.Cmd
	pid   int

	stdin  *os.File // write end of the CLI's stdin
	stdout *os.File // read end of the CLI's stdout
	stderr *os.File // read end of the CLI's stderr
	tail   *tailBuffer

	events   chan event    // closed when stdout ends
	quit     chan struct{} // closed by stop: stop delivering, drain
	quitOnce sync.Once

	readDone   chan struct{}
	stderrDone chan struct{}
	waited     chan struct{} // closed once the process is reaped
	exited     chan struct{} // closed once reaped and its output drained (bounded)
	waitErr    error         // read after waited is closed

	writeMu     sync.Mutex
	stdinClosed bool

	mu      sync.Mutex
	pending map[string]chan controlResponse
	seq     int

	stopOnce sync.Once
	stopped  chan struct{}
}

// startCLI starts path with args in dir. The CLI gets explicit pipes for
// stdin, stdout and stderr (so no os/exec copying goroutine ties Wait to
// descendants that keep them open), stays in the plugin's process group,
// and dies with the plugin (sysProcAttr).
func startCLI(log hclog.Logger, path string, args, env []string, dir string, st start, maxLine int) (*cli, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, err
	}
	// The child has its copies; keep only our ends.
	inR.Close()
	outW.Close()
	errW.Close()

	c := &cli{
		log: log, path: path, start: st, cmd: cmd, pid: cmd.Process.Pid,
		stdin: inW, stdout: outR, stderr: errR, tail: &tailBuffer{},
		events: make(chan event, eventBuffer), quit: make(chan struct{}),
		readDone: make(chan struct{}), stderrDone: make(chan struct{}),
		waited: make(chan struct{}), exited: make(chan struct{}), stopped: make(chan struct{}),
		pending: map[string]chan controlResponse{},
	}
	log.Info("started claude", "pid", c.pid, "path", path, "args", strings.Join(args, " "), "dir", dir)
	go c.readStdout(maxLine)
	go c.readStderr()
	go c.wait()
	return c, nil
}

// wait reaps the process, gives the readers drainWait to finish, then
// marks it exited.
func (c *cli) wait() {
	err := c.cmd.Wait()
	c.waitErr = err
	close(c.waited)
	c.log.Info("claude exited", "pid", c.pid, "status", exitStatus(err))
	deadline := time.Now().Add(drainWait)
	_ = c.stdout.SetReadDeadline(deadline)
	_ = c.stderr.SetReadDeadline(deadline)
	t := time.NewTimer(drainWait + time.Second)
	defer t.Stop()
	for _, done := range []chan struct{}{c.readDone, c.stderrDone} {
		select {
		case <-done:
		case <-t.C:
		}
	}
	// A reader still blocked (on a descendant's open pipe) fails and ends.
	c.stdout.Close()
	c.stderr.Close()
	close(c.exited)
}

// hasExited reports whether the process has been reaped.
func (c *cli) hasExited() bool {
	select {
	case <-c.waited:
		return true
	default:
		return false
	}
}

// exitStatus describes a process's end for messages.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitNote describes how the CLI ended, with the end of its stderr, for an
// error message. It waits up to drainWait+1s for the process to be reaped
// and its output drained.
func (c *cli) exitNote() string {
	select {
	case <-c.exited:
	case <-time.After(drainWait + time.Second):
		return "it closed its stdout but is still running"
	}
	note := exitStatus(c.waitErr)
	if t := c.tail.String(); t != "" {
		note += "; its stderr ended with: " + t
	}
	return note
}

// lineTooLongError reports a stdout line over the cap.
type lineTooLongError struct {
	n, max int
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("claude printed a stream-json line of %d bytes or more, over the plugin's cap of %d bytes (session option %s); the turn was stopped",
		e.n, e.max, OptMaxLineBytes)
}

// readLine reads one line of at most max bytes, newline excluded; the
// line is returned with its newline. A longer line is discarded up to its
// end and reported as *lineTooLongError, so the next call reads the next
// line.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		body := frag
		if err == nil {
			body = frag[:len(frag)-1]
		}
		if len(buf)+len(body) > max {
			n := len(buf) + len(body)
			for errors.Is(err, bufio.ErrBufferFull) {
				frag, err = r.ReadSlice('\n')
				n += len(frag)
			}
			return nil, &lineTooLongError{n: n, max: max}
		}
		buf = append(buf, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}

// readStdout reads the CLI's stdout line by line until it ends.
func (c *cli) readStdout(maxLine int) {
	defer close(c.readDone)
	defer close(c.events)
	r := bufio.NewReaderSize(c.stdout, 64<<10)
	broken := false
	for {
		line, err := readLine(r, maxLine)
		var long *lineTooLongError
		if errors.As(err, &long) {
			if !broken {
				c.log.Error("claude printed a line over the cap", "bytes", long.n, "max", long.max)
				c.deliver(event{err: long})
				broken = true
			}
			continue
		}
		if len(line) > 0 && !broken {
			c.handleLine(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.log.Debug("stopped reading claude's stdout", "error", err)
			}
			return
		}
	}
}

// handleLine routes one stdout line.
func (c *cli) handleLine(line []byte) {
	m, err := decodeLine(line)
	if err != nil {
		if !errors.Is(err, errNotJSON) || len(strings.TrimSpace(string(line))) > 0 {
			c.log.Debug("skipping a stdout line that is not a JSON object", "line", clip(string(line), 200), "error", err)
		}
		return
	}
	switch m.Type {
	case "control_response":
		if m.Response == nil {
			return
		}
		c.mu.Lock()
		ch := c.pending[m.Response.RequestID]
		delete(c.pending, m.Response.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- *m.Response
		}
		return
	case "control_request":
		var req controlRequest
		if err := json.Unmarshal(m.Request, &req); err != nil && !isTypeError(err) {
			c.log.Warn("malformed control request from claude", "error", err)
		}
		if req.Subtype != "can_use_tool" {
			// No hooks or SDK MCP servers are registered, so nothing else
			// is expected; answer so the CLI does not wait forever.
			c.log.Warn("claude sent a control request the plugin does not handle", "subtype", req.Subtype)
			_ = c.write(errorResponse(m.RequestID, fmt.Sprintf("agenthost's claude plugin does not handle control requests of subtype %q", req.Subtype)))
			return
		}
	}
	c.deliver(event{msg: m})
}

// deliver hands ev to the session unless the process is being stopped.
func (c *cli) deliver(ev event) {
	select {
	case c.events <- ev:
	case <-c.quit:
	}
}

// readStderr keeps the tail of the CLI's stderr for error messages and logs
// every line at debug level.
func (c *cli) readStderr() {
	defer close(c.stderrDone)
	r := bufio.NewReaderSize(c.stderr, 16<<10)
	for {
		line, err := readLine(r, 1<<20)
		if s := strings.TrimRight(string(line), "\r\n"); s != "" {
			c.tail.add(s)
			c.log.Debug("claude stderr", "line", clip(s, stderrLineMax))
		}
		var long *lineTooLongError
		if err != nil && !errors.As(err, &long) {
			return
		}
	}
}

// write sends one JSON line to the CLI's stdin.
func (c *cli) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.stdinClosed {
		return errors.New("claude's stdin is closed")
	}
	_ = c.stdin.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.stdin.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("claude has not read its stdin for %s", writeTimeout)
		}
		return fmt.Errorf("write to claude's stdin: %w", err)
	}
	return nil
}

// closeStdin closes the CLI's stdin: end of the session for the CLI.
func (c *cli) closeStdin() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if !c.stdinClosed {
		c.stdinClosed = true
		c.stdin.Close()
	}
}

// request sends a control request and returns its id and the channel its
// response arrives on. Call forget when no longer waiting.
func (c *cli) request(subtype string, fields map[string]any) (string, chan controlResponse, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("req_%d_%s", c.seq, hex.EncodeToString(b[:]))
	ch := make(chan controlResponse, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	req := map[string]any{"subtype": subtype}
	for k, v := range fields {
		req[k] = v
	}
	if err := c.write(controlRequestLine{Type: "control_request", RequestID: id, Request: req}); err != nil {
		c.forget(id)
		return "", nil, err
	}
	return id, ch, nil
}

func (c *cli) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// initTimeout bounds the initialize handshake.
const initTimeout = 60 * time.Second

// initialize sends the control protocol's initialize request and waits for
// its answer. A CLI that cannot open the conversation (an unknown --resume
// id, a --session-id already in use) answers with an error result or exits
// instead; the error then carries the CLI's own message.
func (c *cli) initialize(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	id, ch, err := c.request("initialize", map[string]any{"hooks": nil})
	if err != nil {
		// A CLI that refuses its arguments exits at once, and the write
		// can lose that race (broken pipe): say what the user can act on,
		// the exit and its stderr, whichever happened first.
		note := c.exitNote()
		if c.hasExited() {
			return fmt.Errorf("claude exited at startup (%s)", note)
		}
		return fmt.Errorf("claude did not take the initialize request: %v (%s)", err, note)
	}
	defer c.forget(id)
	for {
		select {
		case resp := <-ch:
			if resp.Subtype == "error" {
				return fmt.Errorf("claude refused the initialize request: %s", resp.Error)
			}
			return nil
		case ev, ok := <-c.events:
			switch {
			case !ok:
				return fmt.Errorf("claude exited at startup (%s)", c.exitNote())
			case ev.err != nil:
				return ev.err
			case ev.msg.Type == "result" && ev.msg.IsError:
				return c.startError(ev.msg)
			case ev.msg.Type == "control_request":
				_ = c.write(successResponse(ev.msg.RequestID, permissionDeny{Behavior: "deny", Message: "no turn is running"}))
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("claude did not answer the initialize request within %s", initTimeout)
			}
			return ctx.Err()
		}
	}
}

// startError turns the error result a CLI prints instead of starting into
// an error with the CLI's own words.
func (c *cli) startError(m *message) error {
	text := resultText(m)
	if c.start.resume {
		return fmt.Errorf("claude could not resume session %s: %s", c.start.id, text)
	}
	return fmt.Errorf("claude could not start session %s: %s", c.start.id, text)
}

// resultText is the CLI's own explanation of an error result.
func resultText(m *message) string {
	switch {
	case len(m.Errors) > 0:
		return strings.Join(m.Errors, "; ")
	case m.Result != "":
		return m.Result
	case m.TerminalReason != "":
		return fmt.Sprintf("%s (%s)", m.Subtype, m.TerminalReason)
	}
	return m.Subtype
}

// stop ends the CLI the way the official SDKs do: close stdin (the CLI
// flushes its transcript and exits), wait, SIGTERM, wait, SIGKILL; and
// reaps it. Each wait is grace, shortened to fit ctx's deadline; when ctx
// ends the CLI is killed at once. Concurrent calls wait for the first.
func (c *cli) stop(ctx context.Context, grace time.Duration) {
	c.stopOnce.Do(func() {
		defer close(c.stopped)
		c.quitOnce.Do(func() { close(c.quit) })
		c.closeStdin()
		if c.waitExit(ctx, phase(ctx, grace, 2)) {
			return
		}
		if ctx.Err() == nil {
			c.log.Info("claude is still running after its stdin closed; sending SIGTERM", "pid", c.pid)
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			if c.waitExit(ctx, phase(ctx, grace, 1)) {
				return
			}
		}
		c.log.Warn("claude is still running; killing it", "pid", c.pid)
		c.kill()
	})
	select {
	case <-c.stopped:
	case <-ctx.Done():
		c.kill()
	}
}

// isStopped reports whether stop has finished.
func (c *cli) isStopped() bool {
	select {
	case <-c.stopped:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be reaped and its output
// drained.
func (c *cli) kill() {
	_ = c.cmd.Process.Kill()
	select {
	case <-c.exited:
	case <-time.After(drainWait + 5*time.Second):
		c.log.Error("claude was not reaped after SIGKILL", "pid", c.pid)
	}
}

// waitExit waits up to d for the process to exit; it gives up early when
// ctx ends.
func (c *cli) waitExit(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.waited:
		<-c.exited
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// phase is the wait before the next stop step: grace, or an even share of
// the time ctx has left for the phases still to come.
func phase(ctx context.Context, grace time.Duration, phases int) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return grace
	}
	left := time.Until(dl) - 100*time.Millisecond
	return max(0, min(grace, left/time.Duration(phases)))
}

// tailBuffer keeps the last stderr lines.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, clip(s, stderrLineMax))
	if len(t.lines) > stderrLines {
		t.lines = t.lines[len(t.lines)-stderrLines:]
	}
}

// String returns the last few lines, joined.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
