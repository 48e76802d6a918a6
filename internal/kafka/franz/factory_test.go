package franz

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestFactoryCaching proves the same Connection yields the same client, any
// difference yields another, and an invalid Connection is rejected before a
// client is built.
func TestFactoryCaching(t *testing.T) {
	c := newCluster(t)
	f := NewFactory()
	t.Cleanup(f.Close)
	ctx := ctxT(t)

	conn := plainConn(c)
	a1, err := f.Admin(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	same := kafka.Connection{BootstrapServers: append([]string(nil), conn.BootstrapServers...), ClientID: conn.ClientID}
	a2, err := f.Admin(ctx, same)
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || a1.(*kadmAdmin).cl != a2.(*kadmAdmin).cl {
		t.Fatal("equal connections got different clients")
	}
	other := conn
	other.ClientID = "someone-else"
	a3, err := f.Admin(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if a3 == a1 {
		t.Fatal("different connections share a client")
	}
	if f.Len() != 2 {
		t.Fatalf("want 2 cached clients, got %d", f.Len())
	}
	if err := a1.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := f.Admin(ctx, kafka.Connection{}); err == nil {
		t.Fatal("invalid connection accepted")
	} else if ce := (*kafka.ConfigError)(nil); !errors.As(err, &ce) {
		t.Fatalf("want *kafka.ConfigError, got %T %v", err, err)
	}
	if f.Len() != 2 {
		t.Fatalf("invalid connection was cached")
	}

	// Concurrent first use builds exactly one client.
	fresh := conn
	fresh.ClientID = "concurrent"
	var wg sync.WaitGroup
	got := make([]kafka.Admin, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = f.Admin(ctx, fresh)
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] == nil || got[i] != got[0] {
			t.Fatalf("concurrent kafka.Admin calls returned different clients")
		}
	}

	f.Close()
	if _, err := f.Admin(ctx, conn); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("kafka.Admin after Close: want kafka.ErrClosed, got %v", err)
	}
	if err := a1.Ping(ctx); !errors.Is(err, kafka.ErrClosed) || kafka.KindOf(err) != kafka.KindClosed {
		t.Fatalf("admin after factory Close: want kafka.ErrClosed, got %v", err)
	}
}

// TestFactorySweep proves Sweep closes exactly the clients idle for the
// idle timeout (measured on the injected clock), that both Admin() and
// method calls count as use, and that a client with a call in flight is
// never swept.
func TestFactorySweep(t *testing.T) {
	c := newCluster(t)
	clock := newFakeClock()
	f := NewFactory(WithClock(clock), WithIdleTimeout(10*time.Minute))
	t.Cleanup(f.Close)
	ctx := ctxT(t)

	connA := plainConn(c)
	connB := plainConn(c)
	connB.ClientID = "b"
	a, _ := f.Admin(ctx, connA)
	b, _ := f.Admin(ctx, connB)

	clock.Step(6 * time.Minute)
	if n := f.Sweep(); n != 0 {
		t.Fatalf("swept %d clients after 6m", n)
	}
	if err := a.Ping(ctx); err != nil { // use at t+6m
		t.Fatal(err)
	}
	clock.Step(5 * time.Minute) // t+11m: b idle 11m, a idle 5m
	if n := f.Sweep(); n != 1 || f.Len() != 1 {
		t.Fatalf("want 1 swept and 1 left, got %d swept, %d left", n, f.Len())
	}
	if err := b.Ping(ctx); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("swept admin: want kafka.ErrClosed, got %v", err)
	}
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("kept admin: %v", err)
	}
	b2, err := f.Admin(ctx, connB)
	if err != nil || b2 == b {
		t.Fatalf("kafka.Admin after sweep must build a new client: %v", err)
	}
	if err := b2.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	// A call in flight protects its client from the sweep.
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(entered) })
		<-release
		return nil, nil, false
	})
	pingErr := make(chan error, 1)
	go func() { pingErr <- a.Ping(ctx) }()
	<-entered
	clock.Step(time.Hour)
	if n := f.Sweep(); n != 1 { // b2 goes, a is busy
		t.Fatalf("want only the idle client swept, got %d", n)
	}
	close(release)
	if err := <-pingErr; err != nil {
		t.Fatalf("in-flight ping: %v", err)
	}
	if f.Len() != 1 {
		t.Fatalf("busy client was swept")
	}
	clock.Step(10 * time.Minute)
	if n := f.Sweep(); n != 1 || f.Len() != 0 {
		t.Fatalf("want the now idle client swept, got %d (left %d)", n, f.Len())
	}
}

// TestFactoryStart proves the background loop sweeps idle clients and closes
// everything when its context ends.
func TestFactoryStart(t *testing.T) {
	c := newCluster(t)
	clock := newFakeClock()
	f := NewFactory(WithClock(clock), WithIdleTimeout(time.Minute), WithSweepInterval(10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()

	a, err := f.Admin(ctxT(t), plainConn(c))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the sweep ticker", clock.HasWaiters)
	clock.Step(2 * time.Minute)
	eventually(t, 5*time.Second, "background sweep", func() bool { return f.Len() == 0 })
	if err := a.Ping(ctxT(t)); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("swept admin: want kafka.ErrClosed, got %v", err)
	}
	if _, err := f.Admin(ctxT(t), plainConn(c)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v", err)
	}
	if _, err := f.Admin(ctxT(t), plainConn(c)); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("kafka.Admin after Start ended: want kafka.ErrClosed, got %v", err)
	}
}

// TestForget proves Forget closes and drops only the named client.
func TestForget(t *testing.T) {
	c := newCluster(t)
	f := NewFactory()
	t.Cleanup(f.Close)
	ctx := ctxT(t)
	conn := plainConn(c)
	a, _ := f.Admin(ctx, conn)
	if f.Forget("no-such-key") {
		t.Fatal("Forget of an unknown key reported true")
	}
	if !f.Forget(conn.Key()) || f.Len() != 0 {
		t.Fatal("Forget did not drop the client")
	}
	if err := a.Ping(ctx); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("forgotten admin: want kafka.ErrClosed, got %v", err)
	}
	a2, _ := f.Admin(ctx, conn)
	if a2 == a {
		t.Fatal("kafka.Admin after Forget returned the closed client")
	}
	if err := a2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
