package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestBatchSameFates: the same 5,000 records through a pipeline delivering in batches of up to 100
// and through one delivering one record per request, to sinks answering by key and attempt (accepted,
// 500 once or twice, refused for good, 503 with Retry-After, left out of the answer once or always,
// 500 always; and, batched, every 7th batch 503 whole): every record gets the same fate in both
// (delivered at which own attempt, or dead-lettered with which reason), each retry comes at or after
// its delay, and each queue's counts by reason equal a scan of its topic.
func TestBatchSameFates(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sinks := map[string]*btSink{"batched": newBTSink(true), "single": newBTSink(false)}
	urls := map[string]string{}
	for name, s := range sinks {
		urls[name] = "http://" + serveSink(t, s).Addr().String() + "/" + name
	}
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := stack.Env.Client
	out, err := stack.Kubectl([]byte(btManifests(urls["batched"], urls["single"])), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for name := range sinks {
		cp := &retryv1alpha1.ConsumerPipeline{}
		g.Eventually(func() error {
			if err := c.Get(ctx, client.ObjectKey{Namespace: btNS, Name: name}, cp); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(cp.Status.Conditions, retryv1alpha1.ConditionReady) || cp.Status.ReadyReplicas == nil || *cp.Status.ReadyReplicas < 1 {
				return fmt.Errorf("%s not running yet: %+v", name, cp.Status.Conditions)
			}
			return nil
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	}

	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	rs := make([]*kgo.Record, 0, 2*btRecords)
	for n := range btRecords {
		for name := range sinks {
			rs = append(rs, &kgo.Record{Topic: "bt-" + name, Key: []byte(btKey(n)), Value: fmt.Appendf(nil, `{"n":%d}`, n)})
		}
	}
	start := time.Now()
	g.Expect(cl.ProduceSync(ctx, rs...).FirstErr()).To(Succeed())

	want := map[string]string{} // key -> fate alone
	wantOK, wantDead := 0, map[string]int{}
	kinds := map[string]int{}
	for n := range btRecords {
		k := btKindOf(n)
		kinds[k.String()]++
		want[btKey(n)] = btFate(k)
		if reason, dead := strings.CutPrefix(want[btKey(n)], "dead:"); dead {
			reason, _, _ = strings.Cut(reason, "@")
			wantDead[reason]++
		} else {
			wantOK++
		}
	}
	t.Logf("kinds of answers: %v", kinds)

	adm := kadm.NewClient(cl)
	deadOf := func(name string) map[string]*kgo.Record {
		got := map[string]*kgo.Record{}
		for _, r := range readAll(t, adm, stack, "bt-"+name+".dlq") {
			g.Expect(got).NotTo(HaveKey(string(r.Key)), "%s: dead-lettered twice", name)
			got[string(r.Key)] = r
		}
		return got
	}
	deadCount := 0
	for _, n := range wantDead {
		deadCount += n
	}
	for name, s := range sinks {
		g.Eventually(s.delivered, 3*time.Minute, 250*time.Millisecond).Should(Equal(wantOK), name)
		g.Eventually(func() int { return len(deadOf(name)) }, 2*time.Minute, time.Second).Should(Equal(deadCount), name)
	}
	// settled is, per pipeline, from the produce to the sink's last request.
	settled := map[string]time.Duration{}
	for name, s := range sinks {
		for _, cs := range s.snapshot() {
			settled[name] = max(settled[name], cs[len(cs)-1].at.Sub(start).Round(time.Millisecond))
		}
	}

	// Fates, record by record: the batched pipeline's less its whole-batch failures equal the single's
	// and the fate table's.
	fates := map[string]map[string]string{}
	for name, s := range sinks {
		fates[name] = btFates(g, name, s, deadOf(name))
		g.Expect(s.errs).To(BeEmpty(), name)
	}
	for n := range btRecords {
		key := btKey(n)
		g.Expect(fates["single"][key]).To(Equal(want[key]), "single: %s (%s)", key, btKindOf(n))
		g.Expect(fates["batched"][key]).To(Equal(want[key]), "batched: %s (%s)", key, btKindOf(n))
	}
	g.Expect(sinks["batched"].wholeFailed).To(BeNumerically(">", 0), "no batch was answered 503 whole")

	// Every retry came at or after its delay after the previous attempt (the due time is counted
	// from the failure, which is after the sink saw the request).
	early, minSlack := 0, map[string]time.Duration{}
	for name, s := range sinks {
		minSlack[name] = time.Hour
		for key, cs := range s.snapshot() {
			for i := 1; i < len(cs); i++ {
				delay := btDelay(cs[i-1].attempt)
				if cs[i-1].retryAfter > 0 {
					delay = cs[i-1].retryAfter
				}
				gap := cs[i].at.Sub(cs[i-1].at)
				if gap < delay {
					early++
					t.Errorf("%s: %s attempt %d came %s after attempt %d, before its delay %s", name, key, cs[i].attempt, gap, cs[i-1].attempt, delay)
				}
				minSlack[name] = min(minSlack[name], gap-delay)
			}
		}
	}
	g.Expect(early).To(BeZero())

	// Each queue's counts by reason equal a scan of its topic, and the fate table's.
	for name := range sinks {
		byReason := map[string]int64{}
		for _, r := range deadOf(name) {
			byReason[header(r, headers.Reason)]++
		}
		var counts []retryv1alpha1.NamedCount
		for reason, n := range byReason {
			g.Expect(n).To(Equal(int64(wantDead[reason])), "%s: %s", name, reason)
			counts = append(counts, retryv1alpha1.NamedCount{Name: reason, Count: n})
		}
		dlq := &retryv1alpha1.DeadLetterQueue{}
		g.Eventually(func() ([]retryv1alpha1.NamedCount, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: btNS, Name: name + "-dlq"}, dlq)
			return dlq.Status.Reasons, err
		}, time.Minute, 250*time.Millisecond).Should(ConsistOf(counts), name)
		t.Logf("%s: dead letters by reason %v", name, dlq.Status.Reasons)
	}

	b, sg := sinks["batched"], sinks["single"]
	sizes := append([]int(nil), b.sizes...)
	sort.Ints(sizes)
	total, full := 0, 0
	for _, n := range sizes {
		total += n
		if n == 100 {
			full++
		}
	}
	t.Logf("batched: %d requests (%d answered 503 whole, %d of 100 records) carrying %d deliveries, sizes min %d median %d max %d; settled in %s; least retry slack %s",
		b.requests, b.wholeFailed, full, total, sizes[0], sizes[len(sizes)/2], sizes[len(sizes)-1], settled["batched"], minSlack["batched"])
	t.Logf("single: %d requests; settled in %s; least retry slack %s", sg.requests, settled["single"], minSlack["single"])
	g.Expect(sizes[len(sizes)-1]).To(BeNumerically("<=", 100))
}

// btFates reads each record's fate from the sink's calls and the queue's dead letters:
// "delivered@<own attempt>" or "dead:<reason>@<own attempt>", the own attempt being the attempt less
// the whole-batch failures the record went through, except for max_retries_exceeded, whose attempt
// is the policy's maxAttempts however they were spent.
func btFates(g *WithT, name string, s *btSink, dead map[string]*kgo.Record) map[string]string {
	out := map[string]string{}
	for key, cs := range s.snapshot() {
		whole := s.wholeOf(key)
		for i, c := range cs {
			g.Expect(c.attempt).To(Equal(i+1), "%s: %s: attempts in order, none lost or repeated", name, key)
			if c.status == http.StatusOK {
				g.Expect(i).To(Equal(len(cs)-1), "%s: %s delivered again after success", name, key)
				out[key] = "delivered@" + strconv.Itoa(c.attempt-whole)
			}
		}
	}
	for key, r := range dead {
		g.Expect(out).NotTo(HaveKey(key), "%s: %s both delivered and dead-lettered", name, key)
		attempts, err := strconv.Atoi(header(r, headers.Attempts))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(attempts).To(Equal(len(s.snapshot()[key])), "%s: %s: the dead letter's attempts", name, key)
		reason := header(r, headers.Reason)
		if reason != headers.ReasonMaxRetriesExceeded {
			attempts -= s.wholeOf(key)
		}
		out[key] = fmt.Sprintf("dead:%s@%d", reason, attempts)
	}
	return out
}
