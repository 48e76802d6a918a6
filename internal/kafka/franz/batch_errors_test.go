package franz

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestAFailedConfigsRequestFailsOnlyTheTopicsThatExist: when the batched DescribeConfigs request
// fails as a whole (the broker drops the connection of every one), a caller whose topic does not exist gets the answer
// the unbatched describe gives it from Metadata alone, which never reads configs; the caller whose
// topic exists gets the unbatched error.
func TestAFailedConfigsRequestFailsOnlyTheTopicsThatExist(t *testing.T) {
	c := newCluster(t, seedTopics(1, "present"))
	a, _ := newAdmin(t, plainConn(c), WithRequestTimeout(time.Second))
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("dropped"), true
	})
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 2, Clock: newFakeClock()})
	describe := adminOps["describe"].call
	topics := []string{"present", "absent"}
	got := make([]any, 2)
	errs := make([]error, 2)
	concurrently(2, func(i int) { got[i], errs[i] = describe(ctx, b, topics[i]) })

	alone, err := describe(ctx, a, "absent")
	if err != nil {
		t.Fatalf("the missing topic alone: %v", err)
	}
	if errs[1] != nil || !reflect.DeepEqual(got[1], alone) {
		t.Errorf("the missing topic batched with one whose configs could not be read: %+v, %v; alone %+v", got[1], errs[1], alone)
	}
	// Not compared with the unbatched error: kgo tells a dropped connection apart by timing.
	if errs[0] == nil {
		t.Error("the existing topic, whose configs could not be read: no error")
	}
}

// The batched admin over kfake when a call fails: what one tenant's topic, or a failed request,
// does to the other callers sharing the connection's batches.

// sameClass fails unless got is classified as want is: kind, code, and the sentinels callers test.
func sameClass(t *testing.T, what string, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Errorf("%s: got %v, want %v", what, got, want)
		return
	}
	if got == nil {
		return
	}
	for _, s := range []error{kafka.ErrTopicExists, kafka.ErrTopicNotFound, kafka.ErrAuth, kafka.ErrUnreachable, kafka.ErrClosed, kafka.ErrTLS} {
		if errors.Is(got, s) != errors.Is(want, s) {
			t.Errorf("%s: errors.Is(%v) %v, unbatched %v\n got %v\nwant %v", what, s, errors.Is(got, s), errors.Is(want, s), got, want)
		}
	}
	if kafka.KindOf(got) != kafka.KindOf(want) || kafka.CodeOf(got) != kafka.CodeOf(want) || kafka.IsRetriable(got) != kafka.IsRetriable(want) {
		t.Errorf("%s:\n got %v (%s, %q)\nwant %v (%s, %q)", what, got, kafka.KindOf(got), kafka.CodeOf(got), want, kafka.KindOf(want), kafka.CodeOf(want))
	}
}

// op is one Admin call on one topic, batched or not.
type op struct {
	name string
	call func(ctx context.Context, a kafka.Admin, topic string) (any, error)
}

var adminOps = map[string]op{
	"describe": {"describe", func(ctx context.Context, a kafka.Admin, topic string) (any, error) {
		return a.DescribeTopics(ctx, topic)
	}},
	"ids": {"ids", func(ctx context.Context, a kafka.Admin, topic string) (any, error) { return a.TopicIDs(ctx, topic) }},
	"create": {"create", func(ctx context.Context, a kafka.Admin, topic string) (any, error) {
		return nil, a.CreateTopic(ctx, topic+".new", 1, 1, map[string]string{"retention.ms": "1000"})
	}},
	"alter": {"alter", func(ctx context.Context, a kafka.Admin, topic string) (any, error) {
		return nil, a.AlterTopicConfigs(ctx, topic, map[string]string{"retention.ms": "2000"})
	}},
	"grow": {"grow", func(ctx context.Context, a kafka.Admin, topic string) (any, error) {
		return nil, a.AddPartitions(ctx, topic, 3)
	}},
}

// TestARefusedTopicFailsOnlyItsCaller: the brokers refuse one tenant's topic in each request
// the batched methods send (an ACL, a policy, a config the broker rejects); its caller gets the
// error the unbatched admin gives it, classified the same, and the caller batched with it gets the
// answer it would get alone.
func TestARefusedTopicFailsOnlyItsCaller(t *testing.T) {
	cases := []struct {
		op    string
		fault kfake.Fault
	}{
		{"describe", kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "bad", Err: kerr.TopicAuthorizationFailed}},
		// An ACL with DESCRIBE but not DESCRIBE_CONFIGS on the topic.
		{"describe", kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: "bad", Err: kerr.TopicAuthorizationFailed}},
		{"describe", kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: "bad", Err: kerr.ClusterAuthorizationFailed}},
		{"describe", kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: "bad", Err: kerr.InvalidRequest}},
		{"ids", kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "bad", Err: kerr.TopicAuthorizationFailed}},
		{"create", kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "bad.new", Err: kerr.PolicyViolation}},
		{"create", kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "bad.new", Err: kerr.TopicAuthorizationFailed}},
		{"alter", kfake.Fault{Keys: []kmsg.Key{kmsg.IncrementalAlterConfigs}, Resource: "bad", Err: kerr.TopicAuthorizationFailed}},
		{"alter", kfake.Fault{Keys: []kmsg.Key{kmsg.IncrementalAlterConfigs}, Resource: "bad", Err: kerr.InvalidConfig}},
		{"grow", kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "bad", Err: kerr.TopicAuthorizationFailed}},
		{"grow", kfake.Fault{Keys: []kmsg.Key{kmsg.CreatePartitions}, Topic: "bad", Err: kerr.PolicyViolation}},
	}
	for _, tc := range cases {
		name := tc.op + " " + tc.fault.Keys[0].Name() + " " + tc.fault.Err.Message
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, seedTopics(1, "bad", "good"))
			a, _ := newAdmin(t, plainConn(c))
			ctx := ctxT(t)
			if err := a.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			o := adminOps[tc.op]
			tc.fault.Count = -1
			h := c.Fault(tc.fault)
			b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 2, Clock: newFakeClock()})
			rc := countRequests(c, tc.fault.Keys[0])
			topics := []string{"bad", "good"}
			got := make([]any, 2)
			errs := make([]error, 2)
			concurrently(2, func(i int) { got[i], errs[i] = o.call(ctx, b, topics[i]) })
			if n := rc.get(tc.fault.Keys[0]); n != 1 {
				t.Fatalf("the two calls sent %d %s requests, want one batch", n, tc.fault.Keys[0].Name())
			}
			if errs[0] == nil {
				t.Fatalf("the refused topic's caller succeeded")
			}
			if errs[1] != nil {
				t.Errorf("the refused topic failed its batch-mate: %v", errs[1])
			} else if strings.Contains(errs[0].Error(), "good") {
				t.Errorf("the refused topic's error names its batch-mate's topic: %v", errs[0])
			}
			_, want := o.call(ctx, a, "bad")
			sameClass(t, "the refused topic", errs[0], want)
			h.Remove()
			if tc.op == "describe" || tc.op == "ids" {
				alone, err := o.call(ctx, a, "good")
				if err != nil || !reflect.DeepEqual(got[1], alone) {
					t.Errorf("the batch-mate's answer %+v, alone %+v (%v)", got[1], alone, err)
				}
			}
		})
	}
}

// TestAWholeRequestFailureIsClassifiedAsAlone: when the request itself fails (no answer within
// the request timeout, the broker gone, SASL credentials refused), both callers of each batched
// method get the error the unbatched method gives, classified the same (IsUnreachable, IsAuthError,
// the code), each under its own topic. Each call has a client of its own: kgo fails the other
// requests of a connection it drops for a timeout with a different error.
func TestAWholeRequestFailureIsClassifiedAsAlone(t *testing.T) {
	const timeout = time.Second
	cases := map[string]func(t *testing.T) func() kafka.Admin{
		"no answer": func(t *testing.T) func() kafka.Admin {
			addr := blackHole(t)
			conn := kafka.Connection{BootstrapServers: []string{addr}, ClientID: "test"}
			return func() kafka.Admin { a, _ := newAdmin(t, conn, WithRequestTimeout(timeout)); return a }
		},
		"broker gone": func(t *testing.T) func() kafka.Admin {
			c := newCluster(t)
			conn := plainConn(c)
			c.Close()
			return func() kafka.Admin { a, _ := newAdmin(t, conn, WithRequestTimeout(timeout)); return a }
		},
		"SASL refused": func(t *testing.T) func() kafka.Admin {
			c := newCluster(t, kfake.EnableSASL(), kfake.Superuser(kafka.MechanismScramSHA512, "admin", "admin-secret"), seedTopics(1, "topic-a", "topic-b"))
			conn := kafka.Connection{BootstrapServers: c.ListenAddrs(), SASL: &kafka.SASLConfig{
				Mechanism: kafka.MechanismScramSHA512, Username: "admin", Password: "wrong-secret", AllowPlaintext: true,
			}}
			return func() kafka.Admin { a, _ := newAdmin(t, conn, WithRequestTimeout(timeout)); return a }
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			newA := setup(t)
			ctx := ctxT(t)
			ops := slices.Sorted(maps.Keys(adminOps))
			batchers := make([]*kafka.Batching, len(ops))
			alones := make([]kafka.Admin, len(ops))
			for i := range ops {
				batchers[i] = kafka.NewBatching(newA().(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 2, Clock: newFakeClock()})
				alones[i] = newA()
			}
			topics := []string{"topic-a", "topic-b"}
			batched := make([][2]error, len(ops))
			alone := make([]error, len(ops))
			concurrently(3*len(ops), func(i int) {
				o := adminOps[ops[i/3]]
				switch i % 3 {
				case 0, 1:
					_, batched[i/3][i%3] = o.call(ctx, batchers[i/3], topics[i%3])
				case 2:
					_, alone[i/3] = o.call(ctx, alones[i/3], topics[0])
				}
			})
			for i, o := range ops {
				if alone[i] == nil {
					t.Fatalf("%s alone: no error", o)
				}
				t.Logf("%s alone: %v (%s, %q)", o, alone[i], kafka.KindOf(alone[i]), kafka.CodeOf(alone[i]))
				for j, own := range topics {
					sameClass(t, o+" of "+own, batched[i][j], alone[i])
					if err := batched[i][j]; err != nil && (!strings.Contains(err.Error(), own) || strings.Contains(err.Error(), topics[1-j])) {
						t.Errorf("%s of %s: %v, want it under its own topic only", o, own, err)
					}
				}
			}
		})
	}
}

// blackHole is the address of a listener that accepts connections and never answers.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// TestAWholeRequestFailureReachesEveryCallerUnderItsOwnTopic: when the request itself fails (the
// admin closed), every caller of the batch gets the error, named for its own topic only.
func TestAWholeRequestFailureReachesEveryCallerUnderItsOwnTopic(t *testing.T) {
	c := newCluster(t)
	a, f := newAdmin(t, plainConn(c))
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 3, Clock: newFakeClock()})
	f.Close()
	ctx := ctxT(t)
	errs := make([]error, 3)
	concurrently(3, func(i int) { errs[i] = b.CreateTopic(ctx, fmt.Sprintf("t%d", i), 1, 1, nil) })
	for i, err := range errs {
		want := fmt.Sprintf(`kafka create topic "t%d": `, i)
		if !errors.Is(err, kafka.ErrClosed) || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("caller %d: %v, want ErrClosed under %q", i, err, want)
		}
	}
}
