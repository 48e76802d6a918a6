package franz

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// A hostile review of the batched admin over kfake: what one tenant's topic, or a failed request,
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

var reviewOps = map[string]op{
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

// TestReviewARefusedTopicFailsOnlyItsCaller: the brokers refuse one tenant's topic in each request
// the batched methods send (an ACL, a policy, a config the broker rejects); its caller gets the
// error the unbatched admin gives it, classified the same, and the caller batched with it gets the
// answer it would get alone.
func TestReviewARefusedTopicFailsOnlyItsCaller(t *testing.T) {
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
			o := reviewOps[tc.op]
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
