package franz

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
)

// newCluster starts a single broker kfake cluster closed at test end.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newAdmin returns an admin for conn from a fresh factory closed at test end.
func newAdmin(t *testing.T, conn kafka.Connection, opts ...FactoryOption) (kafka.Admin, *Factory) {
	t.Helper()
	f := NewFactory(append([]FactoryOption{WithRequestTimeout(20 * time.Second)}, opts...)...)
	t.Cleanup(f.Close)
	a, err := f.Admin(context.Background(), conn)
	if err != nil {
		t.Fatalf("Admin(%v): %v", conn, err)
	}
	return a, f
}

func plainConn(c *kfake.Cluster) kafka.Connection {
	return kafka.Connection{BootstrapServers: c.ListenAddrs(), ClientID: "test"}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to topic/partition and waits for the acks.
func produce(t *testing.T, c *kfake.Cluster, topic string, counts map[int32]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte{byte(i)}})
		}
	}
	if err := cl.ProduceSync(ctxT(t), rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// requestCounter counts requests per key seen by the cluster. Control
// functions return handled=false, so the cluster still answers normally.
type requestCounter struct {
	mu     sync.Mutex
	counts map[kmsg.Key]int
	// listStart/listEnd split ListOffsets requests by the timestamp they
	// ask for (-2 = start, -1 = end).
	listStart, listEnd int
}

func countRequests(c *kfake.Cluster, keys ...kmsg.Key) *requestCounter {
	rc := &requestCounter{counts: make(map[kmsg.Key]int)}
	for _, k := range keys {
		c.ControlKey(int16(k), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.counts[k]++
			if lo, ok := req.(*kmsg.ListOffsetsRequest); ok && len(lo.Topics) > 0 && len(lo.Topics[0].Partitions) > 0 {
				switch lo.Topics[0].Partitions[0].Timestamp {
				case -2:
					rc.listStart++
				case -1:
					rc.listEnd++
				}
			}
			return nil, nil, false
		})
	}
	return rc
}

func (rc *requestCounter) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.counts = make(map[kmsg.Key]int)
	rc.listStart, rc.listEnd = 0, 0
}

func (rc *requestCounter) get(k kmsg.Key) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.counts[k]
}

func (rc *requestCounter) starts() (int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.listStart, rc.listEnd
}

// newFakeClock is a manually stepped clock.
func newFakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// eventually polls cond until it holds, for at most within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	gomega.NewWithT(t).Eventually(cond, within, 5*time.Millisecond).Should(gomega.BeTrue(), "waiting for %s", what)
}

// seedTopics wraps kfake.SeedTopics for readability.
func seedTopics(partitions int32, names ...string) kfake.Opt {
	return kfake.SeedTopics(partitions, names...)
}
