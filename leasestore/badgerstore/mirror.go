package badgerstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The journal mirror (store.journal) is a second copy of every journal
// entry, kept outside Badger in a plain append-only file, so that a journal
// survives what Badger does not: a lost memtable log (*.mem), a store
// restored from its backup (which holds records and positions, not
// entries), a deleted store directory.
//
// The writer appends the frames of a committed batch with one write(2)
// before any caller or reader hears of the batch, so every entry a client
// can have seen is in the mirror's page cache: a process crash loses none.
// The mirror's own goroutine syncs it at most Options.BackupDelay after a
// write, which bounds what an OS crash or power cut can cost the mirror.
// (Badger syncs every commit, so only a store lost in the same power cut
// loses those entries: the bound the README states.)
//
// A frame is
//
//	len:u32le | crc32c(body):u32le | body
//	body = 'e' | uvarint len(id) | id | uvarint len(incarnation) | incarnation | entry
//
// where entry is leasestore.EncodeEntry's encoding. A frame names the
// session's incarnation, so the entries of a deleted session (and of an
// earlier session of the same id) are told apart from the live one's
// without tombstones; open rewrites the mirror when such garbage outweighs
// the live entries. A torn or damaged frame ends the valid part of the
// file: open truncates it there and catches the mirror up from the store.

const (
	mirrorFrameEntry = 'e'
	mirrorHeaderSize = 8
	// maxMirrorBody bounds one frame's body: an entry (at most
	// leasestore.MaxPayloadSize plus its header) and a session id. A
	// damaged length past it ends the valid part of the file rather than
	// turning into a huge allocation.
	maxMirrorBody = 4 << 20
	// maxMirrorPending bounds the frames kept in memory after a failed
	// write; past it the mirror stops until the next open, which catches
	// it up from the store.
	maxMirrorPending = 16 << 20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// appendMirrorFrame appends the frame of one entry to dst.
func appendMirrorFrame(dst []byte, id, incarnation string, entry []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, mirrorHeaderSize)...)
	dst = append(dst, mirrorFrameEntry)
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	dst = binary.AppendUvarint(dst, uint64(len(incarnation)))
	dst = append(dst, incarnation...)
	dst = append(dst, entry...)
	body := dst[start+mirrorHeaderSize:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, crc32c))
	return dst
}

// mirrorFrame is one decoded frame. Entry aliases the reader's buffer
// until the next frame.
type mirrorFrame struct {
	ID, Incarnation string
	Seq, Fence      uint64
	Entry           []byte
	Size            int64 // bytes the frame takes in the file
}

var errBadFrame = errors.New("malformed journal mirror frame")

// decodeMirrorBody decodes a frame's body (its checksum already checked).
func decodeMirrorBody(body []byte) (mirrorFrame, error) {
	var f mirrorFrame
	if len(body) == 0 || body[0] != mirrorFrameEntry {
		return f, fmt.Errorf("%w: unknown frame type", errBadFrame)
	}
	r := body[1:]
	str := func() (string, error) {
		n, w := binary.Uvarint(r)
		if w <= 0 || n > uint64(len(r)-w) {
			return "", fmt.Errorf("%w: bad string length", errBadFrame)
		}
		s := string(r[w : w+int(n)])
		r = r[w+int(n):]
		return s, nil
	}
	var err error
	if f.ID, err = str(); err != nil {
		return f, err
	}
	if f.Incarnation, err = str(); err != nil {
		return f, err
	}
	// The entry's header: version, seq, fence (see leasestore.EncodeEntry).
	if len(r) < 1 {
		return f, fmt.Errorf("%w: no entry", errBadFrame)
	}
	e := r[1:]
	seq, w := binary.Uvarint(e)
	if w <= 0 {
		return f, fmt.Errorf("%w: bad seq", errBadFrame)
	}
	fence, w2 := binary.Uvarint(e[w:])
	if w2 <= 0 || seq == 0 {
		return f, fmt.Errorf("%w: bad fence or seq", errBadFrame)
	}
	f.Seq, f.Fence, f.Entry = seq, fence, r
	return f, nil
}

// scanMirror calls fn for every valid frame of r in order and returns the
// length of the valid part: the whole input, or up to the first frame that
// is torn or damaged (torn is then true). An error is fn's or a read
// error other than the input ending.
func scanMirror(r io.Reader, fn func(mirrorFrame) error) (valid int64, torn bool, err error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var hdr [mirrorHeaderSize]byte
	var body []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return valid, false, nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return valid, true, nil
			}
			return valid, false, err
		}
		n := binary.LittleEndian.Uint32(hdr[:4])
		if n == 0 || n > maxMirrorBody {
			return valid, true, nil
		}
		if cap(body) < int(n) {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(br, body); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return valid, true, nil
			}
			return valid, false, err
		}
		if crc32.Checksum(body, crc32c) != binary.LittleEndian.Uint32(hdr[4:]) {
			return valid, true, nil
		}
		f, err := decodeMirrorBody(body)
		if err != nil {
			return valid, true, nil
		}
		f.Size = int64(mirrorHeaderSize) + int64(n)
		if err := fn(f); err != nil {
			return valid, false, err
		}
		valid += f.Size
	}
}

// scanMirrorFile is scanMirror over the file at path; a missing file is an
// empty mirror.
func scanMirrorFile(path string, fn func(mirrorFrame) error) (valid int64, torn bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	return scanMirror(f, fn)
}

// mirror is the open journal mirror. The writer appends to it; its
// goroutine syncs it. It owns that goroutine: start runs it, shutdown
// ends it after a last sync and closes the file.
type mirror struct {
	path  string
	log   hclog.Logger
	delay time.Duration

	mu      sync.Mutex
	f       *os.File
	size    int64  // length of the file's valid content
	pending []byte // frames a failed write left unwritten, retried first
	stopped error  // set when the mirror gave up until the next open
	dirty   bool   // written since the last sync

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// openMirror opens the mirror at path for appending after its first size
// bytes (its valid part: anything after is cut off).
func openMirror(path string, size int64, delay time.Duration, log hclog.Logger) (*mirror, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal mirror %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("open journal mirror %s: cut off its damaged tail: %w", path, err)
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("open journal mirror %s: %w", path, err)
	}
	return &mirror{path: path, log: log, delay: delay, f: f, size: size}, nil
}

func (m *mirror) start() {
	m.kick = make(chan struct{}, 1)
	m.stop = make(chan struct{})
	m.done = make(chan struct{})
	go m.run()
}

// write appends frames. The writer calls it after a commit and before
// anyone hears of it. A failed write is cut off again and its frames kept
// for the next write, so the file never holds a torn frame before a good
// one; a store whose mirror cannot keep up logs it and goes on (the store
// is the primary copy; the next open catches the mirror up).
func (m *mirror) write(frames []byte) {
	if len(frames) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped != nil {
		return
	}
	buf := frames
	if len(m.pending) > 0 {
		buf = append(m.pending, frames...)
	}
	n, err := m.f.Write(buf)
	if err == nil {
		m.size += int64(n)
		m.pending = m.pending[:0]
		m.dirty = true
		select {
		case m.kick <- struct{}{}:
		default:
		}
		return
	}
	if n > 0 {
		if terr := m.f.Truncate(m.size); terr != nil {
			m.giveUp(fmt.Errorf("write: %w; cut off the partial write: %w", err, terr))
			return
		}
		if _, serr := m.f.Seek(m.size, io.SeekStart); serr != nil {
			m.giveUp(fmt.Errorf("write: %w; %w", err, serr))
			return
		}
	}
	if len(buf) > maxMirrorPending {
		m.giveUp(fmt.Errorf("write: %w; %d MiB of entries are waiting", err, len(buf)>>20))
		return
	}
	m.pending = append(m.pending[:0], buf...)
	m.log.Warn("journal mirror write failed; retrying with the next write", "path", m.path, "error", err)
}

// giveUp stops the mirror until the next open, which catches it up from
// the store. Called with mu held.
func (m *mirror) giveUp(err error) {
	m.stopped = err
	m.pending = nil
	m.log.Error("journal mirror stopped; the next start catches it up from the store, and until then a lost store loses the entries since",
		"path", m.path, "error", err)
}

func (m *mirror) run() {
	defer close(m.done)
	for {
		select {
		case <-m.kick:
		case <-m.stop:
			return
		}
		t := time.NewTimer(m.delay)
		select {
		case <-t.C:
		case <-m.stop:
			t.Stop()
			return // shutdown syncs
		}
		if err := m.sync(); err != nil {
			m.log.Warn("journal mirror sync failed; retrying after the next write", "path", m.path, "error", err)
		}
	}
}

// sync fsyncs the file outside mu, so that the writer's appends (every
// commit) never wait behind an fsync; a write meanwhile marks the file
// dirty again for the next sync. Only run and shutdown call it, one at a
// time, and shutdown closes the file after it.
func (m *mirror) sync() error {
	m.mu.Lock()
	dirty := m.dirty
	m.dirty = false
	m.mu.Unlock()
	if !dirty {
		return nil
	}
	if err := m.f.Sync(); err != nil {
		m.mu.Lock()
		m.dirty = true
		m.mu.Unlock()
		return err
	}
	return nil
}

// shutdown ends the goroutine, syncs and closes the file. The writer must
// have stopped.
func (m *mirror) shutdown() error {
	close(m.stop)
	<-m.done
	err := m.sync()
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close journal mirror %s: %w", m.path, err)
	}
	return nil
}
