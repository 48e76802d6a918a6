package retryloop_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"

	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// TestBatchHandlerOrdered: in Ordered mode a batch holds a partition's records consecutive and in
// offset order, a key's first deliveries come in the order produced across batches, and a
// partition has at most one batch in the handler at a time. A record failed in a batch comes back
// in another batch, and the partition goes on meanwhile (as one at a time).
func TestBatchHandlerOrdered(t *testing.T) {
	const n, keys = 120, 7
	g := NewWithT(t)
	c, cfg := batchCluster(t, "batchordered", 3, 5)
	cfg.Delivery.MaxInFlight = 15

	var mu sync.Mutex
	inFlight := map[int32]int{}
	maxInFlight := 0
	lastOffset := map[int32]int64{}
	firstByKey := map[string][]int{}
	delivered := map[int]bool{}
	var problems []string
	loop, err := retryloop.NewBatch(cfg, func(ctx context.Context, recs []*kgo.Record) []error {
		parts := map[int32]bool{}
		for _, r := range recs {
			parts[r.Partition] = true
		}
		mu.Lock()
		for p := range parts {
			inFlight[p]++
			maxInFlight = max(maxInFlight, inFlight[p])
		}
		mu.Unlock()
		errs := make([]error, len(recs))
		mu.Lock()
		defer mu.Unlock()
		for i, r := range recs {
			info, _ := retryloop.BatchInfo(ctx, i)
			v, _ := strconv.Atoi(string(r.Value))
			if info.Attempt == 1 {
				if prev, ok := lastOffset[r.Partition]; ok && r.Offset != prev+1 {
					problems = append(problems, "partition "+strconv.Itoa(int(r.Partition))+": offset "+
						strconv.FormatInt(r.Offset, 10)+" after "+strconv.FormatInt(prev, 10))
				}
				lastOffset[r.Partition] = r.Offset
				firstByKey[string(r.Key)] = append(firstByKey[string(r.Key)], v)
				if v%4 == 0 {
					errs[i] = retryloop.HTTPStatus(503, errors.New("busy"))
					continue
				}
			}
			delivered[v] = true
		}
		for p := range parts {
			inFlight[p]--
		}
		return errs
	}, retryloop.WithoutHTTP())
	g.Expect(err).NotTo(HaveOccurred())
	runLoop(t, loop)

	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: cfg.Topics.Source, Key: []byte(strconv.Itoa(i % keys)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, dt.Client(t, c), recs...)
	g.Eventually(func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered)
	}, 30*time.Second, 10*time.Millisecond).Should(Equal(n))

	mu.Lock()
	defer mu.Unlock()
	g.Expect(problems).To(BeEmpty())
	g.Expect(maxInFlight).To(Equal(1), "batches of one partition in the handler at once")
	for k, vs := range firstByKey {
		for i := 1; i < len(vs); i++ {
			g.Expect(vs[i]).To(BeNumerically(">", vs[i-1]), "key %s: first deliveries %v", k, vs)
		}
	}
}
