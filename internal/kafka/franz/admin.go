package franz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

var _ kafka.Admin = (*kadmAdmin)(nil)

// kadmAdmin implements kafka.Admin over franz-go's kadm.
type kadmAdmin struct {
	cl      *kgo.Client
	adm     *kadm.Client
	timeout time.Duration
	// timeoutMillis is the broker-side timeout of admin requests (CreateTopics, ...).
	timeoutMillis int32
	clock         clock.PassiveClock
	servers       []string

	secret string       // SASL password, scrubbed from error messages
	sasl   *saslTracker // nil without SASL

	// clusterID is the cluster ID of the latest Metadata answer (metadata); nil before one.
	clusterID atomic.Pointer[string]

	inflight atomic.Int64
	lastUsed atomic.Int64 // clock.Now().UnixNano()
	closed   atomic.Bool
	once     sync.Once
}

func (a *kadmAdmin) touch() { a.lastUsed.Store(a.clock.Now().UnixNano()) }

func (a *kadmAdmin) lastUsedTime() time.Time { return time.Unix(0, a.lastUsed.Load()) }

func (a *kadmAdmin) close() {
	a.once.Do(func() {
		a.closed.Store(true)
		a.cl.Close()
	})
}

// errCallTimeout is the context cause when a call hits the request timeout.
var errCallTimeout = errors.New("request timeout")

// call is one bounded Admin method invocation.
type call struct {
	a  *kadmAdmin
	op string
	// saslFailures is the number of SASL exchanges that had broken off when the call began.
	saslFailures int64
}

// begin starts a call: it checks the admin is open, marks it in use and
// bounds ctx by the request timeout. The returned func must be deferred.
func (a *kadmAdmin) begin(ctx context.Context, op string) (context.Context, *call, func(), error) {
	c := &call{a: a, op: op}
	if a.sasl != nil {
		c.saslFailures = a.sasl.failures.Load()
	}
	if a.closed.Load() {
		return nil, nil, nil, newError(op, kafka.KindClosed, kafka.ErrClosed, "")
	}
	a.inflight.Add(1)
	a.touch()
	ctx, cancel := context.WithTimeoutCause(ctx, a.timeout, errCallTimeout)
	return ctx, c, func() {
		cancel()
		a.touch()
		a.inflight.Add(-1)
	}, nil
}

// fail classifies err for this call. ctx is the call's context, used to
// report the deadline cause instead of a bare "context deadline exceeded".
func (c *call) fail(ctx context.Context, err error) error {
	return c.failOp(ctx, c.op, err)
}

func (c *call) failOp(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var already *kafka.Error
	if errors.As(err, &already) {
		return err
	}
	// Closed during the call: franz-go reports a dial it cancels on Close as context.Canceled
	// rather than ErrClientClosed (the call's own context still live tells the two apart).
	closedUnder := errors.Is(err, kgo.ErrClientClosed) || (errors.Is(err, context.Canceled) && (ctx == nil || ctx.Err() == nil))
	if c.a.closed.Load() && closedUnder {
		return newError(op, kafka.KindClosed, err, c.a.secret)
	}
	if ctx != nil && errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(context.Cause(ctx), errCallTimeout) {
			err = fmt.Errorf("no answer from %s within the request timeout of %s: %w", strings.Join(c.a.servers, ","), c.a.timeout, err)
		} else {
			err = fmt.Errorf("no answer from %s before the context deadline: %w", strings.Join(c.a.servers, ","), err)
		}
	}
	kind := kafka.KindOther
	if c.a.sasl != nil && c.a.sasl.failedSince(c.saslFailures) && (kafka.IsNetCause(err) || errors.Is(err, context.DeadlineExceeded)) {
		// Kafka before 1.0, and kfake, reject SASL credentials by closing
		// the connection instead of answering SASL_AUTHENTICATION_FAILED.
		err = fmt.Errorf("%w: the broker closed the connection during %s authentication of user %q (wrong password, unknown user or mechanism not enabled): %w",
			kerr.SaslAuthenticationFailed, c.a.sasl.mechanism, c.a.sasl.user, err)
		kind = kafka.KindAuth
	}
	return newError(op, kind, err, c.a.secret)
}

// await runs fn in its own goroutine and returns its result, or the call's
// timeout error as soon as ctx is done. franz-go does not watch the request
// context while it sets up a connection (ApiVersions, SASL), so this is what
// guarantees that a deadline bounds every call; the abandoned goroutine ends
// by itself within the client's own dial / request timeouts.
func await[T any](ctx context.Context, c *call, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, c.fail(ctx, ctx.Err())
	}
}

// do runs fn as the operation op (begin, then awaitErr): refused once the admin is closed, counted
// in flight, bounded by the request timeout. fn gets the operation's context and call.
func (a *kadmAdmin) do(ctx context.Context, op string, fn func(context.Context, *call) error) error {
	ctx, c, done, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	defer done()
	return awaitErr(ctx, c, func() error { return fn(ctx, c) })
}

// awaitErr is await for functions returning only an error.
func awaitErr(ctx context.Context, c *call, fn func() error) error {
	_, err := await(ctx, c, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// saslTracker is a franz-go hook recording SASL exchanges that broke off.
type saslTracker struct {
	mechanism string
	user      string
	failures  atomic.Int64 // SASL reads and writes that failed so far
}

var _ kgo.HookBrokerE2E = (*saslTracker)(nil)

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (t *saslTracker) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLAuthenticate) && key != int16(kmsg.SASLHandshake) {
		return
	}
	if e2e.Err() != nil {
		t.failures.Add(1)
	}
}

// failedSince reports whether a SASL exchange broke off since the tracker counted before failures.
func (t *saslTracker) failedSince(before int64) bool { return t.failures.Load() > before }

// describeNames renders a bounded list of names for error messages.
func describeNames(names []string) string {
	const maxShown = 5
	if len(names) <= maxShown {
		return fmt.Sprintf("%q", names)
	}
	return fmt.Sprintf("%q and %d more", names[:maxShown], len(names)-maxShown)
}

// uniqNames returns the distinct non-empty names, in first-seen order.
func uniqNames(names []string) []string {
	seen := make(map[string]struct{}, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n == "" {
			continue
		}
		if _, ok := seen[n]; ok {
			continue
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	return out
}

func sortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// validateTopicName applies Kafka's topic name rules so that obviously bad
// names fail before a round trip.
func validateTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > 249:
		return fmt.Errorf("topic name is %d characters long (max 249)", len(name))
	}
	for _, r := range name {
		if !isTopicNameChar(r) {
			return fmt.Errorf("topic name %q contains %q (allowed: ASCII letters, digits, '.', '_', '-')", name, r)
		}
	}
	return nil
}

// isTopicNameChar reports whether Kafka allows r in a topic name: ASCII letters, digits, '.', '_'
// and '-'.
func isTopicNameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}
