package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	hostileNS     = "hostile"
	hostileSource = "hostile-tasks"
	hostileDLQ    = "hostile-tasks.dlq"
	// goodRecords are the well-formed retry records queued behind the two hostile ones.
	goodRecords = 20
	// Delivery of a due retry record: the dispatcher resumes a paused tier partition a second before
	// its head falls due and fetches within half a second (fetchMaxWait), then the scheduler's timer
	// starts the delivery at the due time; a local sink answers in milliseconds. 5 s covers that with
	// room for a loaded machine, while a record held up behind a hostile one (due in year 9999, or
	// behind a crash loop with its 10 s restart back-off) is far outside it.
	lateBound = 5 * time.Second
	// earlyTolerance allows for nothing but scheduling noise: a record is never started before its
	// due time, and the sink stamps its arrival after that.
	earlyTolerance = 100 * time.Millisecond
)

func hostileManifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + hostileNS + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: hostile, namespace: ` + hostileNS + `}
spec:
  # Two retry tiers: retry 1 after exactly 2s, retry 2 after 4s (no jitter).
  maxAttempts: 3
  backoff: {initialDelay: 2s, multiplier: "2", maxDelay: 10s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: hostile-dlq, namespace: ` + hostileNS + `}
spec:
  topic: {name: ` + hostileDLQ + `, partitions: 1}
  deletionPolicy: Retain
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: hostile, namespace: ` + hostileNS + `}
spec:
  source: {topic: ` + hostileSource + `, create: {partitions: 1}}
  retryTopics: {naming: ByAttempt, partitions: 1}
  retryPolicyRef: {name: hostile}
  deadLetterQueueRef: {name: hostile-dlq}
  sink: {uri: "` + sinkURL + `"}
  replicas: 1
`
}

// hostileDelivery is one request the sink received.
type hostileDelivery struct {
	at          time.Time
	attempt     string
	idempotency string
	traceID     string
}

// recordingSink records every request by Kafka-Key. It refuses the hostile records with 503, a
// retriable failure: a dispatcher that took their headers at face value would try to retry them
// (the attempt count 2147483647 overflows there).
type recordingSink struct {
	mu  sync.Mutex
	got map[string][]hostileDelivery
}

func (s *recordingSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(headers.HTTPKafkaKey)
	d := hostileDelivery{at: time.Now(), attempt: r.Header.Get(headers.HTTPRetryAttempt),
		idempotency: r.Header.Get(headers.HTTPIdempotencyKey), traceID: r.Header.Get(headers.HeaderName("trace-id"))}
	s.mu.Lock()
	if s.got == nil {
		s.got = map[string][]hostileDelivery{}
	}
	s.got[key] = append(s.got[key], d)
	s.mu.Unlock()
	if strings.HasPrefix(key, "hostile-") {
		http.Error(w, "test sink: try again later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *recordingSink) deliveries(key string) []hostileDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hostileDelivery(nil), s.got[key]...)
}

// keys returns every Kafka-Key the sink saw whose key starts with prefix.
func (s *recordingSink) keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.got {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// retryHeaders are the headers a real retry record carries (sdk/dispatcher/produce.go,
// retryRecord): the record's own headers, its original coordinates, its pipeline, the source
// timestamp, the failure context and the due time. set overrides (or adds) some of the retryops.* values.
func retryHeaders(origOffset int64, origTime, failedAt, due time.Time, set map[string]string) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		{Key: "trace-id", Value: []byte("trace-" + strconv.FormatInt(origOffset, 10))},
	}
	for _, kv := range [][2]string{
		{headers.OriginalTopic, hostileSource},
		{headers.OriginalPartition, "0"},
		{headers.OriginalOffset, strconv.FormatInt(origOffset, 10)},
		{headers.OriginalTimestamp, headers.FormatTime(origTime)},
		{headers.Pipeline, hostileNS + "/hostile"},
		{headers.SourceTimestamp, headers.FormatTime(origTime)},
		{headers.Attempts, "1"},
		{headers.FirstFailure, headers.FormatTime(failedAt)},
		{headers.LastFailure, headers.FormatTime(failedAt)},
		{headers.ErrorType, "HTTP503"},
		{headers.ErrorMessage, "503 Service Unavailable"},
		{headers.HTTPStatus, "503"},
		{headers.Rule, "transient-http"},
		{headers.Due, headers.FormatTime(due)},
	} {
		v := kv[1]
		if o, ok := set[kv[0]]; ok {
			v = o
		}
		hs = append(hs, kgo.RecordHeader{Key: kv[0], Value: []byte(v)})
	}
	return hs
}

// TestHostileRetryHeaders: on the `make run` stack, a retry-tier record claiming 2147483647 attempts,
// one due in year 9999 and one of another pipeline, at the head of a tier partition, are
// dead-lettered at once as malformed with a message naming the header, never reach the sink, crash
// nothing, and hold up none of the well-formed retry records queued behind them.
func TestHostileRetryHeaders(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &recordingSink{}
	l := serveSink(t, sink)

	stack, _ := startStack(t, "retryops/retry-dispatcher:hostile")
	c := stack.Env.Client
	setupDone := time.Now()

	out, err := stack.Kubectl([]byte(hostileManifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)

	pipeline := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: hostileNS}}
	dlq := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Name: "hostile-dlq", Namespace: hostileNS}}
	ready := func() (bool, error) {
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pipeline), p); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, retryv1alpha1.ConditionReady), nil
	}
	g.Eventually(ready, 2*time.Minute, 250*time.Millisecond).Should(BeTrue(), "the pipeline never became Ready")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline)).To(Succeed())
	g.Expect(pipeline.Status.Topics).NotTo(BeNil())
	g.Expect(pipeline.Status.Topics.Retries).To(HaveLen(2), "maxAttempts 3 makes two retry tiers")
	tier := pipeline.Status.Topics.Retries[0]
	g.Expect(tier.Delay.Duration).To(Equal(2 * time.Second))
	g.Expect(tier.Partitions).To(Equal(int32(1)))
	t.Logf("pipeline Ready; first retry tier %s (%s, %d partition)", tier.Name, tier.Delay.Duration, tier.Partitions)

	// The dispatcher is running and consuming: a first delivery from the source topic arrives. The
	// group has one member, so it owns the retry tiers' partitions as well.
	pr, err := kgo.NewClient(stack.KafkaOptions(kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer pr.Close()
	g.Expect(pr.ProduceSync(ctx, &kgo.Record{Topic: hostileSource, Key: []byte("warmup"), Value: []byte(`{}`)}).FirstErr()).To(Succeed())
	g.Eventually(func() int { return len(sink.deliveries("warmup")) }, time.Minute, 100*time.Millisecond).Should(Equal(1),
		"the dispatcher never delivered a record from the source topic")

	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace(hostileNS))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1), "one dispatcher Pod")
	podKey := client.ObjectKeyFromObject(&pods.Items[0])
	podUID := pods.Items[0].UID

	// From here to the end, the pipeline stays Ready and the dispatcher's Pod stays the same Pod,
	// running, ready, with no restart and no termination: watched every 200 ms.
	var (
		watchMu    sync.Mutex
		violations []string
		checks     int
	)
	violate := func(format string, args ...any) {
		msg := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
		watchMu.Lock()
		defer watchMu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, msg)
		}
	}
	check := func() {
		if ok, err := ready(); err != nil || !ok {
			violate("pipeline not Ready (err %v)", err)
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, podKey, pod); err != nil {
			violate("dispatcher pod: %v", err)
			return
		}
		if pod.UID != podUID {
			violate("dispatcher pod replaced")
		}
		podReady := false
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady {
				podReady = cond.Status == corev1.ConditionTrue
			}
		}
		if !podReady || pod.Status.Phase != corev1.PodRunning {
			violate("dispatcher pod phase %s, ready %t", pod.Status.Phase, podReady)
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.RestartCount != 0 || cs.State.Running == nil || cs.LastTerminationState.Terminated != nil {
				violate("dispatcher container: restartCount %d, state %+v, last termination %+v", cs.RestartCount, cs.State, cs.LastTerminationState.Terminated)
			}
		}
		running := false
		for _, k := range stack.Runner.Running() {
			running = running || k == podKey.String()
		}
		if !running {
			violate("no live dispatcher process for %s", podKey)
		}
		watchMu.Lock()
		checks++
		watchMu.Unlock()
	}
	stopWatching := every(200*time.Millisecond, check)
	defer stopWatching()

	// The hostile records at the head of the tier's only partition, then goodRecords well-formed
	// retry records due 3 s to 4.9 s from now (a retry record is due at least the tier's 2 s delay
	// after it was written).
	now := time.Now()
	origTime := now.Add(-time.Second)
	year9999 := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	recs := []*kgo.Record{
		{Key: []byte("hostile-attempts"), Value: []byte(`{"hostile":"attempts"}`),
			Headers: retryHeaders(900, origTime, now, now.Add(time.Second), map[string]string{headers.Attempts: "2147483647"})},
		{Key: []byte("hostile-due"), Value: []byte(`{"hostile":"due"}`),
			Headers: retryHeaders(901, origTime, now, year9999, nil)},
		{Key: []byte("hostile-pipeline"), Value: []byte(`{"hostile":"pipeline"}`),
			Headers: retryHeaders(902, origTime, now, now.Add(time.Second), map[string]string{headers.Pipeline: hostileNS + "/billing"})},
	}
	due := map[string]time.Time{}
	for i := range goodRecords {
		key := fmt.Sprintf("good-%d", i)
		due[key] = now.Add(3*time.Second + time.Duration(i)*100*time.Millisecond)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"good":%d}`, i),
			Headers: retryHeaders(int64(1000+i), origTime, now, due[key], nil)})
	}
	for _, r := range recs {
		r.Topic, r.Partition = tier.Name, 0
	}
	produced := pr.ProduceSync(ctx, recs...)
	g.Expect(produced.FirstErr()).To(Succeed())
	for i, r := range produced {
		g.Expect(r.Record.Partition).To(Equal(int32(0)))
		if i > 0 {
			g.Expect(r.Record.Offset).To(Equal(produced[i-1].Record.Offset+1), "the records are consecutive in the partition")
		}
	}
	t.Logf("produced 3 hostile and %d good records to %s/0 at offsets %d..%d in %s", goodRecords, tier.Name,
		produced[0].Record.Offset, produced[len(produced)-1].Record.Offset, time.Since(now).Round(time.Millisecond))

	// Every good record is delivered once, on schedule, as the retry it is.
	last := due[fmt.Sprintf("good-%d", goodRecords-1)]
	g.Eventually(func() []string {
		var missing []string
		for key := range due {
			if len(sink.deliveries(key)) == 0 {
				missing = append(missing, key)
			}
		}
		return missing
	}, time.Until(last.Add(lateBound))+time.Second, 100*time.Millisecond).Should(BeEmpty(), "good records not delivered")
	var maxLate time.Duration
	for i := range goodRecords {
		key := fmt.Sprintf("good-%d", i)
		ds := sink.deliveries(key)
		g.Expect(ds).To(HaveLen(1), "%s delivered more than once", key)
		d := ds[0]
		late := d.at.Sub(due[key])
		maxLate = max(maxLate, late)
		g.Expect(late).To(BeNumerically(">=", -earlyTolerance), "%s delivered %s before its due time", key, -late)
		g.Expect(late).To(BeNumerically("<=", lateBound), "%s delivered %s after its due time", key, late)
		g.Expect(d.attempt).To(Equal("2"), "%s: Retry-Attempt", key)
		g.Expect(d.idempotency).To(Equal(headers.IdempotencyKey(hostileSource, 0, int64(1000+i))), "%s: Idempotency-Key", key)
		g.Expect(d.traceID).To(Equal("trace-"+strconv.Itoa(1000+i)), "%s: its own header", key)
	}
	t.Logf("%d good records delivered on schedule, at most %s after their due time", goodRecords, maxLate.Round(time.Millisecond))

	// Both hostile records are in the DLQ, malformed, with a message naming the header and value.
	cl, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(hostileDLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	dead := map[string]map[string]string{}
	deadCount := 0
	readDLQ := func() map[string]map[string]string {
		pollCtx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		cl.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			dead[string(r.Key)] = h
			deadCount++
		})
		return dead
	}
	g.Eventually(readDLQ, 30*time.Second, 10*time.Millisecond).Should(SatisfyAll(HaveKey("hostile-attempts"), HaveKey("hostile-due"), HaveKey("hostile-pipeline")))
	for key, h := range dead {
		g.Expect(key).To(HavePrefix("hostile-"), "a good record was dead-lettered: %v", h)
	}
	g.Expect(deadCount).To(Equal(3), "each hostile record is dead-lettered once")
	for key, want := range map[string][]string{
		"hostile-attempts": {headers.Attempts, `"2147483647"`, "out of range"},
		"hostile-due":      {headers.Due, `"9999-12-31T23:59:59Z"`, "later than any retry policy schedules a retry"},
		"hostile-pipeline": {headers.Pipeline, `"` + hostileNS + `/billing"`, "is not this pipeline"},
	} {
		h := dead[key]
		g.Expect(h).To(HaveKeyWithValue(headers.Reason, headers.ReasonMalformed), "%s: reason", key)
		et := headers.ErrorTypeMalformedHeaders
		if key == "hostile-pipeline" {
			et = headers.ErrorTypeOtherPipeline // a Replay without a target skips it
		}
		g.Expect(h).To(HaveKeyWithValue(headers.ErrorType, et), "%s: error type", key)
		for _, s := range want {
			g.Expect(h[headers.ErrorMessage]).To(ContainSubstring(s), "%s: error message", key)
		}
		g.Expect(h).To(HaveKeyWithValue(headers.OriginalTopic, hostileSource), "%s: original topic", key)
		g.Expect(h).To(HaveKeyWithValue(headers.Pipeline, hostileNS+"/hostile"), "%s: pipeline", key)
		g.Expect(h).To(HaveKeyWithValue("trace-id", HavePrefix("trace-90")), "%s: its own header", key)
		t.Logf("%s dead-lettered: %s: %s", key, h[headers.Reason], h[headers.ErrorMessage])
	}
	// Neither hostile record ever reached the sink.
	g.Expect(sink.keys("hostile-")).To(BeEmpty(), "a hostile record was delivered")

	// The DeadLetterQueue's status counts the three dead letters under malformed.
	g.Eventually(func() (retryv1alpha1.DeadLetterQueueStatus, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(dlq), dlq)
		return dlq.Status, err
	}, 30*time.Second, 250*time.Millisecond).Should(SatisfyAll(
		HaveField("Messages", HaveValue(Equal(int64(3)))),
		HaveField("Reasons", ConsistOf(retryv1alpha1.NamedCount{Name: headers.ReasonMalformed, Count: 3})),
		HaveField("ErrorTypes", ConsistOf(retryv1alpha1.NamedCount{Name: headers.ErrorTypeMalformedHeaders, Count: 2},
			retryv1alpha1.NamedCount{Name: headers.ErrorTypeOtherPipeline, Count: 1})),
	))

	// The tier is consumed to its end: nothing waits in it, nothing is held up.
	g.Eventually(func() (int64, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline)
		if err != nil || pipeline.Status.Topics == nil || len(pipeline.Status.Topics.Retries) == 0 {
			return -1, err
		}
		return pipeline.Status.Topics.Retries[0].Backlog + ptr.Deref(pipeline.Status.RetryBacklog, -1), nil
	}, 30*time.Second, 250*time.Millisecond).Should(BeZero(), "records still wait in the retry tiers")

	stopWatching()
	check()
	watchMu.Lock()
	defer watchMu.Unlock()
	g.Expect(violations).To(BeEmpty(), "the dispatcher or the pipeline faltered (%d checks)", checks)
	g.Expect(sink.keys("hostile-")).To(BeEmpty(), "a hostile record was delivered")
	t.Logf("pipeline Ready and dispatcher Pod running without a restart throughout (%d checks); %s after the stack started",
		checks, time.Since(setupDone).Round(time.Second))
}
