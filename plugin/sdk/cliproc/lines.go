package cliproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// DefaultMaxLine is a LineReader's cap when it is given none: room for a
// whole tool output in one JSON line.
const DefaultMaxLine = 64 << 20

// ErrLineTooLong is matched (errors.Is) by a *LineTooLongError.
var ErrLineTooLong = errors.New("line too long")

// LineTooLongError reports a line over a LineReader's cap. The line was
// discarded to its end; the reader goes on with the next one.
type LineTooLongError struct {
	Len int // the line's length, newline excluded
	Max int // the cap
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("line too long: %d bytes, over the cap of %d", e.Len, e.Max)
}

// Is makes errors.Is(err, ErrLineTooLong) match.
func (e *LineTooLongError) Is(target error) bool { return target == ErrLineTooLong }

// LineReader reads newline-terminated lines of at most a cap. It holds at
// most the cap plus its 64 KiB buffer in memory, whatever the stream: a
// longer line is read through to its newline in buffer-sized fragments
// and dropped.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader reads r with a cap of max bytes a line (newline excluded);
// max <= 0 means DefaultMaxLine.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ReadLine returns the next line without its newline; the slice is valid
// until the next call. A line over the cap is discarded and reported as a
// *LineTooLongError; the next call reads the line after it. A last line
// without a newline is returned whole, and the call after it returns the
// stream's error (io.EOF at the end).
func (l *LineReader) ReadLine() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		body := frag
		if err == nil {
			body = frag[:len(frag)-1]
		}
		if len(l.buf)+len(body) > l.max {
			n := len(l.buf) + len(frag)
			for errors.Is(err, bufio.ErrBufferFull) {
				frag, err = l.r.ReadSlice('\n')
				n += len(frag)
			}
			if err == nil {
				n-- // the newline
			}
			return nil, &LineTooLongError{Len: n, Max: l.max}
		}
		l.buf = append(l.buf, body...)
		switch {
		case err == nil:
			return l.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case len(l.buf) > 0:
			// The last line, without a newline: the error comes next.
			return l.buf, nil
		}
		return nil, err
	}
}

// ErrNotJSONObject is JSONObject's answer for a line that is not one.
var ErrNotJSONObject = errors.New("not a JSON object")

// JSONObject returns line without its surrounding blanks if it starts like
// a JSON object, else ErrNotJSONObject. CLIs that speak JSON lines also
// print banners, debug lines and blank lines on the same stream, which a
// reader skips; whether the object is valid JSON is the decoder's to say.
func JSONObject(line []byte) ([]byte, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, ErrNotJSONObject
	}
	return line, nil
}

// Clip returns s cut to at most n bytes, on a UTF-8 boundary, with "…"
// where it was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
