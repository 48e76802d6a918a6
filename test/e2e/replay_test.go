package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	rpNS     = "replay"
	rpSource = "replay-orders"
	rpDLQ    = "replay-orders.dlq"
	rpGroup  = "replay-group"
	// rpRecords are produced to the source while the sink fails them all: key r-<n> gets 400
	// (non_retriable_error) when n%3 == 0, else 500 until the retries run out (max_retries_exceeded).
	rpRecords = 1000
	// rpRate is the replay's recordsPerSecond.
	rpRate = 200
	// rpBulk dead letters are written straight to the queue for the restart run.
	rpBulk = 5000
)

func rpManifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + rpNS + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: rp, namespace: ` + rpNS + `}
spec:
  maxAttempts: 2
  backoff: {initialDelay: 1s, multiplier: "2", maxDelay: 5s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: rp-dlq, namespace: ` + rpNS + `}
spec:
  topic: {name: ` + rpDLQ + `, partitions: 3}
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: rp, namespace: ` + rpNS + `}
spec:
  source: {topic: ` + rpSource + `, consumerGroup: ` + rpGroup + `, create: {partitions: 3}}
  retryPolicyRef: {name: rp}
  deadLetterQueueRef: {name: rp-dlq}
  delivery: {ordering: Unordered, maxInFlight: 50}
  sink: {uri: "` + sinkURL + `"}
`
}

// rpCall is one request the replay sink received.
type rpCall struct {
	at              time.Time
	attempt         int
	idempotency     string
	replayOf, count string
}

// rpSink fails everything until healed; then it accepts all but the keys of failAgain.
type rpSink struct {
	mu        sync.Mutex
	healed    bool
	failAgain map[string]bool
	calls     map[string][]rpCall
}

func (s *rpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(headers.HTTPKafkaKey)
	attempt, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt))
	s.mu.Lock()
	s.calls[key] = append(s.calls[key], rpCall{at: time.Now(), attempt: attempt, idempotency: r.Header.Get(headers.HTTPIdempotencyKey),
		replayOf: r.Header.Get(headers.HTTPReplayOf), count: r.Header.Get(headers.HTTPReplayCount)})
	healed, again := s.healed, s.failAgain[key]
	s.mu.Unlock()
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "r-"))
	switch {
	case healed && !again:
		w.WriteHeader(http.StatusOK)
	case n%3 == 0 && !healed:
		w.WriteHeader(http.StatusBadRequest)
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
}

func (s *rpSink) snapshot() map[string][]rpCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]rpCall, len(s.calls))
	for k, v := range s.calls {
		out[k] = slices.Clone(v)
	}
	return out
}

// rpDeadLetter is what the test reads of a dead letter.
type rpDeadLetter struct {
	id, key, reason, errorType, replayOf string
	ts                                   time.Time
}

// readAll reads every record of topic from its start up to its end offsets now.
func readAll(t *testing.T, adm *kadm.Client, stack *devenv.Stack, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		want += o.Offset - s.Offset
	})
	cl, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v (%d of %d)", topic, err, len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if e, ok := ends.Lookup(r.Topic, r.Partition); ok && r.Offset < e.Offset {
				out = append(out, r)
			}
		})
	}
	return out
}

func header(r *kgo.Record, name string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == name {
			v = string(h.Value)
		}
	}
	return v
}

func deadLetters(t *testing.T, adm *kadm.Client, stack *devenv.Stack) []rpDeadLetter {
	var out []rpDeadLetter
	for _, r := range readAll(t, adm, stack, rpDLQ) {
		out = append(out, rpDeadLetter{id: fmt.Sprintf("%s/%d/%d", rpDLQ, r.Partition, r.Offset), key: string(r.Key),
			reason: header(r, headers.Reason), errorType: header(r, headers.ErrorType), replayOf: header(r, headers.ReplayOf), ts: r.Timestamp})
	}
	return out
}

// TestReplay: 1,000 records fail into the DLQ with mixed reasons and error types; a Replay of one
// reason and one error type at 200 records/s replays exactly those (an independent scan of the
// topic), at that rate, with progress in status, through the pipeline's own retry topic (a second
// consumer group of the source receives nothing new); the sink gets them as attempt 1 with their
// original Idempotency-Key; those that fail again return to the queue naming their previous entry
// and are not picked up by the same action; the entries show Replayed. Then 5,000 dead letters are
// replayed across a restart of the manager: the action completes, every one is produced, and the
// duplicates are at most the batch in flight, as status says.
func TestReplay(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &rpSink{calls: map[string][]rpCall{}, failAgain: map[string]bool{}}
	for n := 1; n < rpRecords; n += 50 {
		sink.failAgain["r-"+strconv.Itoa(n)] = true
	}
	l := serveSink(t, sink)
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	out, err := stack.Kubectl([]byte(rpManifests("http://"+l.Addr().String()+"/")), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	c := stack.Env.Client

	cl, err := kgo.NewClient(stack.KafkaOptions(kgo.AllowAutoTopicCreation())...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	adm := kadm.NewClient(cl)
	g.Eventually(func() error {
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: rpNS, Name: "rp"}, p); err != nil {
			return err
		}
		if p.Status.Topics == nil || len(p.Status.Topics.Retries) == 0 || p.Status.ReadyReplicas == nil || *p.Status.ReadyReplicas < 1 {
			return fmt.Errorf("pipeline not running yet")
		}
		return nil
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())

	var rs []*kgo.Record
	for n := range rpRecords {
		rs = append(rs, &kgo.Record{Topic: rpSource, Key: []byte("r-" + strconv.Itoa(n)), Value: []byte(`{"n":` + strconv.Itoa(n) + `}`)})
	}
	g.Expect(cl.ProduceSync(ctx, rs...).FirstErr()).To(Succeed())
	g.Eventually(func() int { return len(deadLetters(t, adm, stack)) }, 2*time.Minute, time.Second).Should(Equal(rpRecords))
	first := sink.snapshot()

	// The independent scan: what the action must replay.
	want := map[string]string{} // dead letter id -> key
	for _, dl := range deadLetters(t, adm, stack) {
		if dl.reason == headers.ReasonMaxRetriesExceeded && dl.errorType == "HTTP500" {
			want[dl.id] = dl.key
		}
	}
	g.Expect(len(want)).To(BeNumerically(">", 600))
	sourceEnd := total(t, adm, rpSource)

	sink.mu.Lock()
	sink.healed = true
	sink.mu.Unlock()
	a := &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{Namespace: rpNS, Name: "replay-500"}, Spec: retryv1alpha1.DeadLetterActionSpec{
		Queue: "rp-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "e2e",
		Selector: &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonMaxRetriesExceeded}, ErrorTypes: []retryv1alpha1.DeadLetterName{"HTTP500"}},
		Rate:     &retryv1alpha1.ReplayRate{RecordsPerSecond: rpRate},
	}}
	g.Expect(c.Create(ctx, a)).To(Succeed())
	// Progress shows while it runs.
	g.Eventually(func() bool {
		_ = c.Get(ctx, client.ObjectKeyFromObject(a), a)
		return a.Status.Phase == retryv1alpha1.ActionRunning && a.Status.Done > 0 && a.Status.Done < int64(len(want))
	}, time.Minute, 20*time.Millisecond).Should(BeTrue())
	t.Logf("running: progress %s", a.Status.Progress)
	g.Eventually(func() retryv1alpha1.DeadLetterActionPhase {
		_ = c.Get(ctx, client.ObjectKeyFromObject(a), a)
		return a.Status.Phase
	}, time.Minute, 100*time.Millisecond).
		Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(a.Status.Matched).To(Equal(int64(len(want))))
	g.Expect(a.Status.Done).To(Equal(int64(len(want))))

	// Exactly the wanted ones, through the first retry tier, at the rate.
	p := &retryv1alpha1.ConsumerPipeline{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: rpNS, Name: "rp"}, p)).To(Succeed())
	var replayed []*kgo.Record
	for _, r := range readAll(t, adm, stack, p.Status.Topics.Retries[0].Name) {
		// A replay has attempts 0; a replay that failed again is retried through the tiers too,
		// carrying its replay headers with attempts 1.
		if header(r, headers.ReplayOf) != "" && header(r, headers.Attempts) == "0" {
			replayed = append(replayed, r)
		}
	}
	got := map[string]string{}
	var times []time.Time
	for _, r := range replayed {
		got[header(r, headers.ReplayOf)] = string(r.Key)
		times = append(times, r.Timestamp)
	}
	g.Expect(replayed).To(HaveLen(len(want)), "each once")
	g.Expect(got).To(Equal(want))
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	rate := float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
	t.Logf("replayed %d dead letters at %.1f records/s (asked %d)", len(times), rate, rpRate)
	g.Expect(rate).To(BeNumerically("~", rpRate, rpRate/10))
	g.Expect(total(t, adm, rpSource)).To(Equal(sourceEnd), "nothing is written to the shared source topic")

	// The sink: attempt 1, the original Idempotency-Key, the replay named.
	g.Eventually(func() int {
		n := 0
		for _, calls := range sink.snapshot() {
			for _, call := range calls {
				if call.replayOf != "" && call.attempt == 1 {
					n++
				}
			}
		}
		return n
	}, time.Minute, 200*time.Millisecond).Should(Equal(len(want)))
	now := sink.snapshot()
	for id, key := range want {
		orig := first[key][0]
		var rep *rpCall
		for i, call := range now[key] {
			if call.replayOf == id && call.attempt == 1 {
				rep = &now[key][i]
			}
		}
		g.Expect(rep).NotTo(BeNil(), key)
		g.Expect(rep.idempotency).To(Equal(orig.idempotency), key)
		g.Expect(rep.count).To(Equal("1"))
	}

	// Those that failed again are back in the queue naming their previous entry, beyond the
	// action's snapshot; the action did not pick them up (its counts above are the snapshot's).
	var back []rpDeadLetter
	g.Eventually(func() int {
		back = back[:0]
		for _, dl := range deadLetters(t, adm, stack) {
			if dl.replayOf != "" {
				back = append(back, dl)
			}
		}
		return len(back)
	}, time.Minute, time.Second).Should(Equal(failAgainWanted(sink, want)))
	for _, dl := range back {
		g.Expect(want).To(HaveKeyWithValue(dl.replayOf, dl.key))
	}

	// The queue counts them Replayed.
	q := &retryv1alpha1.DeadLetterQueue{}
	g.Eventually(func() []retryv1alpha1.NamedCount {
		_ = c.Get(ctx, client.ObjectKey{Namespace: rpNS, Name: "rp-dlq"}, q)
		return q.Status.States
	}, time.Minute, time.Second).Should(ContainElement(retryv1alpha1.NamedCount{Name: "Replayed", Count: int64(len(want))}))

	pluginReplay(t, stack, adm, sink)
	restartDuringReplay(t, stack, adm, c, p.Status.Topics.Retries[0].Name)
}

// pluginReplay runs the built kubectl dlq as a user would, on the stack's kubeconfig: replay the
// non-retriable dead letters with --wait, which ends Succeeded; each reaches the sink as attempt 1 of
// a replay; show then prints one of them as Replayed.
func pluginReplay(t *testing.T, stack *devenv.Stack, adm *kadm.Client, sink *rpSink) {
	g := NewWithT(t)
	plugin := filepath.Join(t.TempDir(), "kubectl-dlq")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-dlq")
	build.Dir = envtestutil.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	ids := map[string]string{} // dead letter id -> key
	for _, dl := range deadLetters(t, adm, stack) {
		if dl.reason == headers.ReasonNonRetriable && dl.replayOf == "" {
			ids[dl.id] = dl.key
		}
	}
	g.Expect(ids).NotTo(BeEmpty())
	dlq := func(args ...string) string {
		cmd := exec.Command(plugin, append([]string{"--kubeconfig", stack.Kubeconfig, "-n", rpNS}, args...)...)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
	out2 := dlq("replay", "rp-dlq", "--reason", headers.ReasonNonRetriable, "--rate", "500", "--wait")
	t.Logf("kubectl dlq replay --wait:\n%s", out2)
	g.Expect(out2).To(And(ContainSubstring("Succeeded"), ContainSubstring(fmt.Sprintf("replayed: %d", len(ids)))))
	g.Eventually(func() int {
		n := 0
		calls := sink.snapshot()
		for id, key := range ids {
			for _, call := range calls[key] {
				if call.replayOf == id && call.attempt == 1 {
					n++
					break
				}
			}
		}
		return n
	}, time.Minute, 200*time.Millisecond).Should(Equal(len(ids)), "every replayed dead letter reaches the sink")
	for id := range ids {
		ref := strings.TrimPrefix(id, rpDLQ+"/")
		g.Eventually(func() string { return dlq("show", "rp-dlq", ref) }, time.Minute, time.Second).Should(ContainSubstring("Replayed"))
		break
	}
}

// failAgainWanted counts the wanted dead letters whose key the sink fails again.
func failAgainWanted(s *rpSink, want map[string]string) int {
	n := 0
	for _, key := range want {
		if s.failAgain[key] {
			n++
		}
	}
	return n
}

// total is the number of records topic holds.
func total(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// restartDuringReplay writes rpBulk dead letters straight to the queue, replays them at 1,000/s and
// restarts the manager once a fifth are done: the action completes, every one is produced, and the
// records produced twice are at most what status reports as duplicates, itself at most one batch.
func restartDuringReplay(t *testing.T, stack *devenv.Stack, adm *kadm.Client, c client.Client, tier string) {
	g := NewWithT(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	var rs []*kgo.Record
	for i := range rpBulk {
		rs = append(rs, &kgo.Record{Topic: rpDLQ, Key: []byte("bulk-" + strconv.Itoa(i)), Value: []byte("{}"), Headers: []kgo.RecordHeader{
			{Key: headers.OriginalTopic, Value: []byte(rpSource)}, {Key: headers.OriginalPartition, Value: []byte("0")},
			{Key: headers.OriginalOffset, Value: []byte(strconv.Itoa(100000 + i))}, {Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(time.Now()))},
			{Key: headers.Reason, Value: []byte(headers.ReasonUndeliverable)}, {Key: headers.ErrorType, Value: []byte("Bulk")},
			{Key: headers.Pipeline, Value: []byte(rpNS + "/rp")}, {Key: headers.Attempts, Value: []byte("1")},
		}})
	}
	g.Expect(cl.ProduceSync(ctx, rs...).FirstErr()).To(Succeed())
	before := countReplays(t, adm, stack, tier, "bulk-")

	a := &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{Namespace: rpNS, Name: "replay-bulk"}, Spec: retryv1alpha1.DeadLetterActionSpec{
		Queue: "rp-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "e2e",
		Selector: &retryv1alpha1.DeadLetterSelector{ErrorTypes: []retryv1alpha1.DeadLetterName{"Bulk"}},
		Rate:     &retryv1alpha1.ReplayRate{RecordsPerSecond: 1000},
	}}
	g.Expect(c.Create(ctx, a)).To(Succeed())
	g.Eventually(func() int64 { _ = c.Get(ctx, client.ObjectKeyFromObject(a), a); return a.Status.Done }, time.Minute, 20*time.Millisecond).
		Should(BeNumerically(">=", rpBulk/5))
	t.Logf("restarting the manager at progress %s", a.Status.Progress)
	g.Expect(stack.RestartManager()).To(Succeed())
	g.Eventually(func() retryv1alpha1.DeadLetterActionPhase {
		_ = c.Get(ctx, client.ObjectKeyFromObject(a), a)
		return a.Status.Phase
	}, 2*time.Minute, 200*time.Millisecond).
		Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(a.Status.Matched).To(Equal(int64(rpBulk)))
	g.Expect(before).To(BeEmpty())
	counts := countReplays(t, adm, stack, tier, "bulk-")
	dups := 0
	for _, n := range counts {
		dups += n - 1
	}
	t.Logf("after the restart: %d of %d produced, %d produced twice, status.duplicates %d", len(counts), rpBulk, dups, a.Status.Duplicates)
	g.Expect(counts).To(HaveLen(rpBulk), "every dead letter is produced")
	g.Expect(int64(dups)).To(BeNumerically("<=", a.Status.Duplicates), "duplicates are at most what status says")
	g.Expect(a.Status.Duplicates).To(BeNumerically("<=", 100), "at most one batch in flight")
}

// countReplays counts, per replayed dead letter, the replays in tier of dead letters whose key
// starts with prefix.
func countReplays(t *testing.T, adm *kadm.Client, stack *devenv.Stack, tier, prefix string) map[string]int {
	out := map[string]int{}
	for _, r := range readAll(t, adm, stack, tier) {
		if of := header(r, headers.ReplayOf); of != "" && header(r, headers.Attempts) == "0" && strings.HasPrefix(string(r.Key), prefix) {
			out[of]++
		}
	}
	return out
}
