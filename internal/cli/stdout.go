package cli

import (
	"errors"
	"io"
	"sync"
)

// errOutputClosed is what a write to a closed abortableWriter returns.
var errOutputClosed = errors.New("the output was closed")

// abortableWriter writes to w from a goroutine of its own, so that no
// caller waits on w past Close. agenthost acp writes to the editor's pipe:
// an editor that stops reading leaves a write blocked in the kernel, where
// nothing interrupts it (closing a blocking file waits for the write), and
// shutdown, which waits for the connection's writers, waited forever. After
// Close every waiting and later Write fails at once; the write under way
// stays blocked until the reader reads or the process exits.
type abortableWriter struct {
	mu     sync.Mutex // one Write at a time, so lines do not interleave
	reqs   chan []byte
	done   chan writeResult
	closed chan struct{}
	once   sync.Once
}

type writeResult struct {
	n   int
	err error
}

func newAbortableWriter(w io.Writer) *abortableWriter {
	a := &abortableWriter{reqs: make(chan []byte), done: make(chan writeResult, 1), closed: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-a.reqs:
				n, err := w.Write(p)
				a.done <- writeResult{n, err}
			case <-a.closed:
				return
			}
		}
	}()
	return a
}

func (a *abortableWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.closed:
		return 0, errOutputClosed
	default:
	}
	// The writer goroutine may still hold the bytes after Write returned.
	select {
	case a.reqs <- append([]byte(nil), p...):
	case <-a.closed:
		return 0, errOutputClosed
	}
	select {
	case r := <-a.done:
		return r.n, r.err
	case <-a.closed:
		return 0, errOutputClosed
	}
}

// Close makes every Write fail from now on, a waiting one included.
func (a *abortableWriter) Close() error {
	a.once.Do(func() { close(a.closed) })
	return nil
}
