package etcdstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/leasestore"
)

// Options configure Open. Endpoints is required; every other zero value
// works.
type Options struct {
	// Endpoints are the etcd members' client URLs.
	Endpoints []string
	// TLS, when set, secures the connection (client certificates
	// included). Nil: plaintext.
	TLS *tls.Config
	// Prefix is prepended to every key the store writes, so that several
	// agenthost installations (or tests) share one etcd. Default
	// "/agenthost/". A prefix must not be a prefix of another store's.
	Prefix string
	// DialTimeout bounds the first connection. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds one etcd request the store makes on its own
	// behalf (a group commit, a keepalive). Default 10s.
	RequestTimeout time.Duration
	// MaxTxnBytes bounds the keys and values of one transaction. Default
	// 1 MiB, below etcd's default request limit of 1.5 MiB
	// (--max-request-bytes); raise both together.
	MaxTxnBytes int
	// MaxTxnOps bounds the operations of one transaction. Default 128,
	// etcd's default --max-txn-ops.
	MaxTxnOps int
	// CompactWindow is how much MVCC history the store keeps: every
	// CompactWindow/4 it compacts etcd's history to the revision it saw a
	// window ago. Default 10 minutes. Negative: the store never compacts
	// (the operator runs etcd with --auto-compaction-*). See the package
	// doc's "Retention".
	CompactWindow time.Duration
	// Logger receives the store's logs. Default: none.
	Logger hclog.Logger
	// Now is the clock for entry times, evidence and record timestamps.
	// Default: time.Now.
	Now func() time.Time
	// NewToken mints spawn tokens. Default: 128 random bits.
	NewToken func() (string, error)
	// CloseRetries keeps journal handles whose close failed. Default: a
	// registry owned by the store.
	CloseRetries *leasestore.CloseRetries
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "/agenthost/"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.MaxTxnBytes <= 0 {
		o.MaxTxnBytes = 1 << 20
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = 128
	}
	if o.CompactWindow == 0 {
		o.CompactWindow = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewToken == nil {
		o.NewToken = func() (string, error) { return rand.Text(), nil }
	}
	if o.CloseRetries == nil {
		o.CloseRetries = &leasestore.CloseRetries{}
	}
	return o
}

// Store is the etcd leasestore.Store and leasestore.Cluster. Its
// goroutines (one per session with writes queued, the compactor, one per
// Membership) belong to it; Close ends them before it closes the client.
type Store struct {
	opts      Options
	log       hclog.Logger
	cli       *clientv3.Client
	keys      keys
	ctx       context.Context // ends when the store closes
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	writersWG sync.WaitGroup

	closeSem chan struct{}
	// inflight bounds the sessions committing at once (maxInflight).
	inflight chan struct{}

	mu       sync.Mutex
	closing  bool
	closed   bool
	damaged  error
	writers  map[string]*sessionWriter
	journals leasestore.JournalHandles // handles from OpenJournal not yet closed
	members  map[*membership]struct{}
}

var (
	_ leasestore.Store                = (*Store)(nil)
	_ leasestore.Cluster              = (*Store)(nil)
	_ leasestore.ProviderStateHandles = (*Store)(nil)
)

// Open connects to the etcd cluster at opts.Endpoints and checks that it
// answers. Nothing is read or written until the first call.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd store: no endpoints", leasestore.ErrInvalidArgument)
	}
	opts = opts.withDefaults()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		TLS:         opts.TLS,
		DialTimeout: opts.DialTimeout,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
		// Above MaxTxnBytes with room for the request's framing, so the
		// store's own bound is the one that refuses.
		MaxCallSendMsgSize: opts.MaxTxnBytes + 1<<20,
		MaxCallRecvMsgSize: 64 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd store: connect to %v: %w", opts.Endpoints, err)
	}
	probe, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	if _, err := cli.Get(probe, opts.Prefix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd store: the cluster at %v does not answer: %w", opts.Endpoints, err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	s := &Store{
		opts: opts, log: opts.Logger, cli: cli, keys: keys{prefix: opts.Prefix},
		ctx: sctx, cancel: scancel,
		closeSem: make(chan struct{}, 1),
		inflight: make(chan struct{}, maxInflight),
		writers:  make(map[string]*sessionWriter),
		members:  make(map[*membership]struct{}),
	}
	if opts.CompactWindow > 0 {
		s.wg.Go(s.compactor)
	}
	return s, nil
}

// maxInflight is how many sessions' writers may have a transaction in
// flight at once: enough to keep etcd's log syncs shared, few enough that
// a burst (a batch of hundreds of moves, a restart marking every session)
// queues here rather than in etcd's proposal queue.
const maxInflight = 32

// Recovery implements leasestore.Store: the etcd store never restores
// from a backup (etcd's own snapshots are the operator's), so nil.
func (s *Store) Recovery() *leasestore.Recovery { return nil }

// CloseRetries implements leasestore.Store.
func (s *Store) CloseRetries() *leasestore.CloseRetries { return s.opts.CloseRetries }

func (s *Store) now() time.Time { return s.opts.Now().UTC() }

// readable refuses reads once the store closed.
func (s *Store) readable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return leasestore.ErrClosed
	}
	return nil
}

// writable refuses writes while a Close is under way, after one
// succeeded, and after a write whose outcome the store could not tell.
func (s *Store) writable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return leasestore.ErrClosed
	case s.damaged != nil:
		return s.damaged
	}
	return nil
}

// setDamaged makes every later write fail: a commit whose outcome could
// not be told may have landed, and a retry could append twice.
func (s *Store) setDamaged(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.damaged == nil {
		s.damaged = fmt.Errorf("%w: an etcd commit's outcome could not be told (%v); the store refuses writes until it is opened again", leasestore.ErrDamaged, err)
		s.log.Error("etcd commit outcome unknown; refusing writes", "error", err)
	}
	return s.damaged
}

// reqCtx is the context of a request the store makes on its own behalf
// (a group commit serves several callers, so none of their contexts).
func (s *Store) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.opts.RequestTimeout)
}

// mapErr turns a client error into the store's: ErrClosed once the store
// closed.
func (s *Store) mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if s.readable() != nil || errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, leasestore.ErrClosed)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// definitelyNotApplied reports whether a failed request is known not to
// have changed anything: etcd refused it as malformed or too large before
// proposing it.
func definitelyNotApplied(err error) bool {
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge),
		errors.Is(err, rpctypes.ErrDuplicateKey), errors.Is(err, rpctypes.ErrKeyNotFound):
		return true
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.OutOfRange:
			return true
		}
	}
	return false
}

// Key layout. Session ids are opaque (any UTF-8, '/' and NUL included),
// so every key embeds an id escaped (encodeID): the escaped id has no
// '/', so "<id>/" is a prefix of one id's keys only.
//
// See the package doc for the keys.
type keys struct{ prefix string }

func (k keys) records() string         { return k.prefix + "r/" }
func (k keys) record(id string) string { return k.prefix + "r/" + encodeID(id) }
func (k keys) session(id string) string {
	return k.prefix + "s/" + encodeID(id) + "/"
}
func (k keys) head(id string) string     { return k.session(id) + "n" }
func (k keys) writer(id string) string   { return k.session(id) + "w" }
func (k keys) journal(id string) string  { return k.session(id) + "j/" }
func (k keys) pointer(id string) string  { return k.session(id) + "p" }
func (k keys) chunks(id string) string   { return k.session(id) + "q/" }
func (k keys) hosts() string             { return k.prefix + "hosts/" }
func (k keys) host(hostID string) string { return k.prefix + "hosts/" + hostID }
func (k keys) entry(id string, seq uint64) string {
	return k.journal(id) + pad(seq)
}

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

func parsePad(b []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil || len(b) != 20 {
		return 0, fmt.Errorf("%w: malformed number %q in the store", leasestore.ErrDamaged, b)
	}
	return n, nil
}

// Close implements leasestore.Store. Calls are serialised; while one is
// under way writes are refused with ErrClosed. A Close that cannot close a
// journal handle keeps the store open and usable and returns the error;
// the next Close retries. Once the handles closed, Close revokes the
// memberships still open (other hosts see this host lost at once), waits
// for the queued commits, ends every Tail and WatchHosts (ErrClosed) and
// closes the client.
func (s *Store) Close(ctx context.Context) error {
	select {
	case s.closeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("close lease store: waiting for another Close: %w", ctx.Err())
	}
	defer func() { <-s.closeSem }()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	if err := s.journals.CloseAll(ctx, s.opts.CloseRetries); err != nil {
		s.mu.Lock()
		s.closing = false
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	members := make([]*membership, 0, len(s.members))
	for m := range s.members {
		members = append(members, m)
	}
	s.mu.Unlock()
	var errs []error
	for _, m := range members {
		if err := m.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// Queued commits finish (they hold their own deadlines); then the
	// store's context ends the compactor, tails and watches.
	s.waitWriters()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, fmt.Errorf("close etcd client: %w", err))
	}
	return errors.Join(errs...)
}

// encodeID escapes a session id for a key: NUL becomes NUL 0x01 and '/'
// becomes NUL 0x02, so no '/' is left and the escape is reversible. An id
// costs its own length (plus its NULs and slashes) in every key, where
// hex would double it: ids run to 16 KiB, and every transaction carries
// several keys of one.
func encodeID(id string) string {
	if !strings.ContainsAny(id, "\x00/") {
		return id
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		switch id[i] {
		case 0:
			b.WriteString("\x00\x01")
		case '/':
			b.WriteString("\x00\x02")
		default:
			b.WriteByte(id[i])
		}
	}
	return b.String()
}

func decodeID(e string) (string, error) {
	if !strings.Contains(e, "\x00") {
		if strings.Contains(e, "/") {
			return "", errBadKey
		}
		return e, nil
	}
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		switch c := e[i]; {
		case c == '/':
			return "", errBadKey
		case c != 0:
			b.WriteByte(c)
		case i+1 < len(e) && e[i+1] == 1:
			b.WriteByte(0)
			i++
		case i+1 < len(e) && e[i+1] == 2:
			b.WriteByte('/')
			i++
		default:
			return "", errBadKey
		}
	}
	return b.String(), nil
}

var errBadKey = errors.New("not a key of this store")

func (s *Store) countOnly() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithCountOnly()}
}
