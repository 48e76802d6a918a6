package controllers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/utils/ptr"
)

// testKafka is an admin client tests use to change Kafka out of band and to check what the operator
// did.
type testKafka struct {
	*kadm.Client
	cl *kgo.Client
}

// newKadm returns an admin client on the given brokers (the suite broker by default), closed at test
// end.
func newKadm(t *testing.T, addrs ...string) *testKafka {
	t.Helper()
	if len(addrs) == 0 {
		addrs = broker.ListenAddrs()
	}
	return kafkaClient(t, kgo.SeedBrokers(addrs...))
}

func kafkaClient(t *testing.T, opts ...kgo.Opt) *testKafka {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &testKafka{Client: kadm.NewClient(cl), cl: cl}
}

// topicState is what a test checks of a topic.
type topicState struct {
	Exists     bool
	Partitions int
	Configs    map[string]string
}

// describe reads a topic's partitions and its topic-level configs. It asks the broker every time
// (kadm's metadata calls may answer from the client's cache).
func describe(adm *testKafka, topic string) func() (topicState, error) {
	return func() (topicState, error) {
		ctx := context.Background()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, adm.cl)
		if err != nil {
			return topicState{}, err
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			return topicState{}, nil
		}
		st := topicState{Exists: true, Partitions: len(resp.Topics[0].Partitions), Configs: map[string]string{}}
		// Raw, with IncludeDocumentation: the mark that keeps it out of the describes counted as reconciles.
		dreq := kmsg.NewPtrDescribeConfigsRequest()
		dreq.IncludeDocumentation = true
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		dreq.Resources = append(dreq.Resources, rr)
		dresp, err := dreq.RequestWith(ctx, adm.cl)
		if err != nil {
			return topicState{}, err
		}
		for _, r := range dresp.Resources {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return topicState{}, err
			}
			for _, c := range r.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					st.Configs[c.Name] = ptr.Deref(c.Value, "")
				}
			}
		}
		return st, nil
	}
}

// held counts the records a topic holds (end minus start offsets).
func held(adm *testKafka, topic string) func() (int64, error) {
	return func() (int64, error) {
		ctx := context.Background()
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return 0, err
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0, err
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
				n += o.Offset - s.Offset
			}
		})
		return n, nil
	}
}

// produce writes counts[p] records to each partition p of topic.
func produce(t *testing.T, addrs []string, topic string, counts map[int32]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprint(i))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// clusterIDs numbers the kfake clusters the tests make beside the suite broker.
var clusterIDs atomic.Int64

// ownClusterID gives a kfake cluster a cluster ID of its own: every kfake cluster reports
// "kfake" unless told otherwise, and the operator tells clusters apart by their ID, as a real
// Kafka's (a random UUID) allows.
func ownClusterID() kfake.Opt {
	return kfake.ClusterID(fmt.Sprintf("test-cluster-%d", clusterIDs.Add(1)))
}
