package franz

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Defaults for Factory options.
const (
	// DefaultRequestTimeout bounds every Admin method call, including
	// dialing, SASL, retries and every round trip the method needs.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultIdleTimeout is how long a cached client may go unused before
	// Sweep closes it.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultSweepInterval is how often Start runs Sweep.
	DefaultSweepInterval = time.Minute
)

// FactoryOption configures a Factory.
type FactoryOption func(*factoryConfig)

type factoryConfig struct {
	requestTimeout time.Duration
	idleTimeout    time.Duration
	sweepInterval  time.Duration
	clock          clock.WithTicker
}

// WithRequestTimeout sets the upper bound of every Admin method call
// (default DefaultRequestTimeout). It also sets the client's dial timeout,
// request timeout overhead and retry timeout, so an unreachable broker fails
// within it with an error for which IsUnreachable is true. Non-positive
// values are ignored.
func WithRequestTimeout(d time.Duration) FactoryOption {
	return func(c *factoryConfig) {
		if d > 0 {
			c.requestTimeout = d
		}
	}
}

// WithIdleTimeout sets how long a cached client may go unused before Sweep
// closes it (default DefaultIdleTimeout). Non-positive values are ignored.
func WithIdleTimeout(d time.Duration) FactoryOption {
	return func(c *factoryConfig) {
		if d > 0 {
			c.idleTimeout = d
		}
	}
}

// WithSweepInterval sets how often Start sweeps idle clients (default
// DefaultSweepInterval). Non-positive values are ignored.
func WithSweepInterval(d time.Duration) FactoryOption {
	return func(c *factoryConfig) {
		if d > 0 {
			c.sweepInterval = d
		}
	}
}

// WithClock injects the time source of the idle accounting and of Start's
// sweep ticker (the real clock by default).
func WithClock(clk clock.WithTicker) FactoryOption {
	return func(c *factoryConfig) {
		if clk != nil {
			c.clock = clk
		}
	}
}

// Factory builds and caches one admin client per distinct Connection (by
// Connection.Key), which also produces records (ProduceRecords), and reads
// records (Scan): the kafka.ClientFactory of the operator. It is safe for concurrent use. The zero value is not usable;
// call NewFactory.
type Factory struct {
	cfg factoryConfig

	mu      sync.Mutex
	clients map[string]*kadmAdmin
	closed  bool
}

var _ kafka.ClientFactory = (*Factory)(nil)

// NewFactory returns a Factory with the given options applied.
func NewFactory(opts ...FactoryOption) *Factory {
	cfg := factoryConfig{
		requestTimeout: DefaultRequestTimeout,
		idleTimeout:    DefaultIdleTimeout,
		sweepInterval:  DefaultSweepInterval,
		clock:          clock.RealClock{},
	}
	for _, o := range opts {
		o(&cfg)
	}
	return &Factory{cfg: cfg, clients: make(map[string]*kadmAdmin)}
}

// errFactoryClosed is wrapped into the error Admin returns after Close.
var errFactoryClosed = errors.New("factory is closed")

// Admin returns the cached admin for conn, building it on first use. Building
// does not contact the brokers (franz-go dials lazily); call Ping to check
// connectivity and credentials. It fails if conn is invalid (a
// *kafka.ConfigError) or the factory is closed (an error matching
// kafka.ErrClosed).
func (f *Factory) Admin(ctx context.Context, conn kafka.Connection) (kafka.Admin, error) {
	if err := ctx.Err(); err != nil {
		return nil, newError("get admin client", kafka.KindOther, err, "")
	}
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	key := conn.Key()

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, newError("get admin client", kafka.KindClosed, errFactoryClosed, "")
	}
	if a, ok := f.clients[key]; ok {
		a.touch()
		return a, nil
	}
	a, err := newKadmAdmin(conn, f.cfg)
	if err != nil {
		return nil, err
	}
	f.clients[key] = a
	return a, nil
}

// Sweep closes and drops every cached client that has not been used for the
// idle timeout and has no call in flight. It returns how many were closed.
func (f *Factory) Sweep() int {
	now := f.cfg.clock.Now()
	var idle []*kadmAdmin
	f.mu.Lock()
	for key, a := range f.clients {
		if a.inflight.Load() > 0 {
			continue
		}
		if now.Sub(a.lastUsedTime()) >= f.cfg.idleTimeout {
			idle = append(idle, a)
			delete(f.clients, key)
		}
	}
	f.mu.Unlock()
	for _, a := range idle {
		a.close()
	}
	return len(idle)
}

// Forget closes and drops the client cached under key (a Connection.Key),
// for example after the credentials Secret changed. It reports whether a
// client was cached.
func (f *Factory) Forget(key string) bool {
	f.mu.Lock()
	a, ok := f.clients[key]
	delete(f.clients, key)
	f.mu.Unlock()
	if ok {
		a.close()
	}
	return ok
}

// Len returns the number of cached clients.
func (f *Factory) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}

// Close closes every cached client. Later Admin calls fail with an error
// matching kafka.ErrClosed. Close is idempotent.
func (f *Factory) Close() {
	f.mu.Lock()
	all := f.clients
	f.clients = make(map[string]*kadmAdmin)
	f.closed = true
	f.mu.Unlock()
	for _, a := range all {
		a.close()
	}
}

// Start runs Sweep every sweep interval until ctx is done, then closes the
// factory. Its signature matches controller-runtime's manager.Runnable, so
// the factory can be registered with mgr.Add. It always returns nil.
func (f *Factory) Start(ctx context.Context) error {
	t := f.cfg.clock.NewTicker(f.cfg.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.Close()
			return nil
		case <-t.C():
			f.Sweep()
		}
	}
}

// ClientOptions returns the franz-go options that connect to conn: seed
// brokers, client ID, TLS dialer, SASL mechanism, and timeouts derived from
// requestTimeout (dial timeout, request timeout overhead and retry timeout;
// DefaultRequestTimeout if non-positive). It is exported for code that needs
// its own kgo.Client (a producer, say) with the same settings.
func ClientOptions(conn kafka.Connection, requestTimeout time.Duration) ([]kgo.Opt, error) {
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	if requestTimeout <= 0 {
		requestTimeout = DefaultRequestTimeout
	}
	clientID := conn.ClientID
	if clientID == "" {
		clientID = kafka.DefaultClientID
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(conn.BootstrapServers...),
		kgo.ClientID(clientID),
		kgo.DialTimeout(requestTimeout),
		kgo.RequestTimeoutOverhead(requestTimeout),
		kgo.RetryTimeout(requestTimeout),
	}
	if conn.TLS != nil {
		tc, err := conn.TLS.Config()
		if err != nil {
			return nil, fmt.Errorf("invalid kafka connection: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if conn.SASL != nil {
		m, err := saslMechanism(conn.SASL)
		if err != nil {
			return nil, fmt.Errorf("invalid kafka connection: %w", err)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// newKadmAdmin builds the client for conn.
func newKadmAdmin(conn kafka.Connection, cfg factoryConfig) (*kadmAdmin, error) {
	opts, err := ClientOptions(conn, cfg.requestTimeout)
	if err != nil {
		return nil, err
	}
	a := &kadmAdmin{
		timeout: cfg.requestTimeout,
		clock:   cfg.clock,
		servers: conn.BootstrapServers,
	}
	if conn.SASL != nil {
		a.secret = conn.SASL.Password
		a.sasl = &saslTracker{
			mechanism: conn.SASL.MechanismName(),
			user:      conn.SASL.Username,
		}
		opts = append(opts, kgo.WithHooks(a.sasl))
	}
	// The client also produces (ProduceRecords): to an explicit partition or by key.
	opts = append(opts, kgo.RecordPartitioner(newExplicitOrKeyPartitioner()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, newError("create client", kafka.KindOther, err, a.secret)
	}
	a.cl = cl
	a.adm = kadm.NewClient(cl)
	// The broker-side timeout of admin requests (CreateTopics, ...) is
	// kept below the call deadline so the broker answers before we give
	// up waiting.
	a.timeoutMillis = int32(max(cfg.requestTimeout*3/4, 500*time.Millisecond) / time.Millisecond)
	a.adm.SetTimeoutMillis(a.timeoutMillis)
	a.touch()
	return a, nil
}

// saslMechanism returns the franz-go SASL mechanism of s.
func saslMechanism(s *kafka.SASLConfig) (sasl.Mechanism, error) {
	switch s.MechanismName() {
	case kafka.MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case kafka.MechanismScramSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case kafka.MechanismScramSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", s.Mechanism)
}
