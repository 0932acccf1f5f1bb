package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/leasestore"
)

// Tidying the state directory: stopping every session, removing one, and
// pruning those nobody used for a while. A removal is the session's
// record, its journal (leasestore.Store.Delete) and its session
// directories (one per fence: the plugin's state and log). It holds the
// session's start turn from its first look at the session to its last
// removal, so a StartSession of the same id waits for it and then starts a
// new session: no start ever sees half a removed one. Only a session no
// plugin can hold is removed: not one running in this host (unless forced,
// which stops it first), never one whose lease is held elsewhere or
// latched, since nobody can say its plugin is gone (fail closed).

// ErrSessionRunning matches a RemoveSession of a session that runs in this
// host, without force: stop it first, or force the removal.
var ErrSessionRunning = errors.New("the session is running")

// ErrSessionHeld matches a RemoveSession of a session whose lease is held
// by a plugin this host does not run, or latched until its previous owner
// is proven gone; it matches leasestore.ErrOwnershipUnknown too. Nothing
// is removed: the plugin may still write to it.
var ErrSessionHeld = fmt.Errorf("the session's lease is held or latched: %w", leasestore.ErrOwnershipUnknown)

// Removal is what RemoveSession did.
type Removal struct {
	// Stopped: the session was running and force stopped it first.
	Stopped bool
	// FreedBytes is what the session's directories held on disk.
	FreedBytes int64
}

// RemoveSession removes the session's record, journal and session
// directories. A session running in this host is refused
// (ErrSessionRunning) unless force, which stops it as Session.Stop does
// first; a session whose lease is held elsewhere or latched is refused
// (ErrSessionHeld) even with force, and one not decided yet since the host
// opened too (ErrUndecided). An unknown session is leasestore.ErrNotFound.
// A removal interrupted after the store began deleting is finished by the
// next one.
func (h *Host) RemoveSession(ctx context.Context, id string, force bool) (Removal, error) {
	return h.removeSession(ctx, id, force, nil)
}

// removeSession is RemoveSession with a last check of the record, under
// the start turn, before anything is removed (see Prune).
func (h *Host) removeSession(ctx context.Context, id string, force bool, check func(leasestore.Session) error) (Removal, error) {
	var out Removal
	if h.Undecided(id) {
		return out, fmt.Errorf("remove session %q: %w", id, ErrUndecided)
	}
	release, err := h.startTurn(ctx, id)
	if err != nil {
		return out, err
	}
	defer release()
	h.mu.Lock()
	closed, s := h.closed, h.sessions[id]
	h.mu.Unlock()
	if closed {
		return out, fmt.Errorf("remove session %q: %w", id, leasestore.ErrClosed)
	}
	if s != nil {
		select {
		case <-s.proc.Terminated():
			// Its plugin is gone and the session is winding down: wait
			// until its lease is released.
			select {
			case <-s.Done():
			case <-ctx.Done():
				return out, ctx.Err()
			}
		default:
			if !force {
				return out, fmt.Errorf("remove session %q: %w: stop it first (agenthost sessions stop), or force the removal, which stops it", id, ErrSessionRunning)
			}
			if err := s.Stop(ctx); err != nil {
				return out, fmt.Errorf("remove session %q: stop it: %w", id, err)
			}
			out.Stopped = true
		}
	}
	rec, err := h.store.Get(ctx, id)
	if err != nil {
		return out, fmt.Errorf("remove session %q: %w", id, err)
	}
	if !rec.Deleting {
		if err := removable(rec); err != nil {
			return out, fmt.Errorf("remove session %q: %w", id, err)
		}
		if check != nil {
			if err := check(rec); err != nil {
				return out, err
			}
		}
	}
	// The directories go first: a removal that fails after them leaves
	// the record, so removing it again finishes the job, where the other
	// order would leave directories nothing names any more.
	dirs, err := h.sessionDirs(id)
	if err != nil {
		return out, fmt.Errorf("remove session %q: %w", id, err)
	}
	for _, dir := range dirs {
		out.FreedBytes += diskUsage(dir)
		if err := os.RemoveAll(dir); err != nil {
			return out, fmt.Errorf("remove session %q: its directory %s: %w; remove it by hand, or retry", id, dir, err)
		}
	}
	if err := h.store.Delete(ctx, id, rec.Lease.Fence); err != nil {
		return out, fmt.Errorf("remove session %q: its directories are removed but its record and journal are not: %w; retry the removal to finish it", id, err)
	}
	h.log.Info("session removed", "session", id, "freed_bytes", out.FreedBytes, "stopped", out.Stopped)
	return out, nil
}

// removable refuses a record whose lease someone may hold: a plugin this
// host does not run (reserved or live), or nobody can say (latched,
// conflicted).
func removable(rec leasestore.Session) error {
	l := rec.Lease
	switch {
	case l.Stage.Latched():
		return fmt.Errorf("%w: it is latched (%s); it can be removed once the host settles whether its plugin is gone (agenthost status)", ErrSessionHeld, l.LatchReason)
	case l.Claim == leasestore.ClaimConflicted:
		return fmt.Errorf("%w: its lease is conflicted", ErrSessionHeld)
	case l.Claim == leasestore.ClaimReserved:
		// This host may be the one starting it (a new session has no
		// start turn until it has an id), or another host is.
		return fmt.Errorf("%w: its lease is reserved at fence %d: a plugin is being started for it; retry once it runs (then stop it, or force) or its start has failed", ErrSessionHeld, l.Fence)
	case l.Claim != leasestore.ClaimReleased:
		return fmt.Errorf("%w: its lease is %s at fence %d by a plugin this host does not run", ErrSessionHeld, l.Claim, l.Fence)
	}
	return nil
}

// sessionsDir holds the session directories, one per session and fence
// (dirName).
func (h *Host) sessionsDir() string { return filepath.Join(h.cfg.StateDir, "sessions") }

// sessionDirs returns the session directories of id: dirName(id, fence)
// for every fence it ran at.
func (h *Host) sessionDirs(id string) ([]string, error) {
	entries, err := os.ReadDir(h.sessionsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(dirName(id, 0), "0")
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			out = append(out, filepath.Join(h.sessionsDir(), e.Name()))
		}
	}
	return out, nil
}

// StopReport is what StopAll did.
type StopReport struct {
	// Stopped are the sessions stopped, sorted.
	Stopped []string
	// Failed are the sessions whose stop failed, with the error.
	Failed map[string]error
}

// StopAll stops every session running in the host, as Session.Stop does,
// all at once: each is asked to close, its turn journaled, its plugin
// stopped, its lease released.
func (h *Host) StopAll(ctx context.Context) StopReport {
	h.mu.Lock()
	sessions := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	var (
		mu  sync.Mutex
		out = StopReport{Stopped: []string{}}
		wg  sync.WaitGroup
	)
	for _, s := range sessions {
		wg.Go(func() {
			err := s.Stop(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if out.Failed == nil {
					out.Failed = map[string]error{}
				}
				out.Failed[s.id] = err
				return
			}
			out.Stopped = append(out.Stopped, s.id)
		})
	}
	wg.Wait()
	slices.Sort(out.Stopped)
	return out
}

// PruneReport is what Prune did.
type PruneReport struct {
	// Removed are the sessions removed (with dry run: that would be),
	// sorted.
	Removed []string
	// Failed are the sessions whose removal failed, with the error.
	Failed map[string]error
	// Unlisted is why the store's listing was partial (records that do
	// not decode, leasestore.ErrDamaged, naming them): those sessions were
	// not looked at, let alone pruned. Nil when every record was listed.
	Unlisted error
}

// errNotPrunable: a session listed for pruning changed before its turn
// came (it started, or was used since); it is left alone.
var errNotPrunable = errors.New("no longer prunable")

// Prune removes, as RemoveSession does, every session stopped, idle or
// failed (StateOf) whose record did not change for olderThan, and every
// one whose removal was interrupted. A partial listing of the store
// prunes what was listed and says why the rest was not (Unlisted). Running, latched and held sessions,
// and those not decided yet, are never pruned; a session that started or
// changed after Prune listed it is left alone. With dryRun nothing is
// removed: Removed lists what would be.
func (h *Host) Prune(ctx context.Context, olderThan time.Duration, dryRun bool) (PruneReport, error) {
	out := PruneReport{Removed: []string{}}
	if olderThan < 0 {
		return out, fmt.Errorf("%w: prune's age must not be negative, got %s", leasestore.ErrInvalidArgument, olderThan)
	}
	sessions, err := h.store.List(ctx)
	if err != nil && len(sessions) == 0 {
		return out, err
	}
	out.Unlisted = err
	cutoff := h.cfg.Now().Add(-olderThan)
	prunable := func(rec leasestore.Session) bool {
		if h.Undecided(rec.ID) {
			return false
		}
		if rec.Deleting {
			return true // an interrupted removal, whatever its age: finish it
		}
		if !rec.UpdatedAt.Before(cutoff) {
			return false
		}
		_, running := h.Session(rec.ID)
		switch StateOf(rec, running) {
		case api.StateStopped, api.StateIdle, api.StateFailed:
			return true
		}
		return false
	}
	for _, rec := range sessions {
		if !prunable(rec) {
			continue
		}
		if dryRun {
			out.Removed = append(out.Removed, rec.ID)
			continue
		}
		_, err := h.removeSession(ctx, rec.ID, false, func(cur leasestore.Session) error {
			if !prunable(cur) {
				return errNotPrunable
			}
			return nil
		})
		switch {
		case err == nil:
			out.Removed = append(out.Removed, rec.ID)
		case errors.Is(err, errNotPrunable), errors.Is(err, ErrSessionRunning), errors.Is(err, leasestore.ErrNotFound):
			// Started, used or removed since it was listed.
		default:
			if out.Failed == nil {
				out.Failed = map[string]error{}
			}
			out.Failed[rec.ID] = err
		}
	}
	slices.Sort(out.Removed)
	return out, nil
}

// diskBytes is what the state directory holds on disk for the host: the
// store, the session directories and the plugin sockets (wherever their
// root is), not the plugins installed in plugins/, which no removal frees.
func (h *Host) diskBytes() int64 {
	var n int64
	entries, _ := os.ReadDir(h.cfg.StateDir)
	for _, e := range entries {
		if e.Name() == "plugins" {
			continue
		}
		n += diskUsage(filepath.Join(h.cfg.StateDir, e.Name()))
	}
	if root := h.socketRoot(); !strings.HasPrefix(root, h.cfg.StateDir+string(filepath.Separator)) {
		n += diskUsage(root)
	}
	return n
}

// diskUsage is what the files under path take on disk (their allocated
// blocks where the platform says, else their sizes). Sessions start and
// end while it walks, so a file or directory that vanishes midway, or one
// it may not read, counts as nothing rather than failing the walk.
func diskUsage(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
