package logtest

import (
	"bytes"
	"sync"
)

// Buffer collects what a child process writes (its stderr, usually) while
// the test reads it: a bytes.Buffer that is safe for one writer and
// concurrent readers. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
