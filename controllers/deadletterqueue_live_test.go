package controllers_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// deadLetter is one dead letter a test produces, with the context headers the dispatcher writes.
type deadLetter struct {
	partition                 int32
	reason, errType, pipeline string
	at                        time.Time
	offset                    int64 // filled in by produceDeadLetters
}

// produceDeadLetters writes the dead letters to topic, in order, each to its partition, and fills in
// their offsets.
func produceDeadLetters(t *testing.T, addrs []string, topic string, dls []*deadLetter) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, d := range dls {
		r := &kgo.Record{Topic: topic, Partition: d.partition, Value: []byte("payload"), Timestamp: d.at, Headers: []kgo.RecordHeader{
			{Key: kafkastats.HeaderReason, Value: []byte(d.reason)},
			{Key: kafkastats.HeaderErrorType, Value: []byte(d.errType)},
			{Key: kafkastats.HeaderPipeline, Value: []byte(d.pipeline)},
		}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		d.offset = r.Offset
	}
}

// expectedFigures is what status should show of the dead letters held: those at or past each
// partition's start offset.
type expectedFigures struct {
	messages                     int64
	oldest, newest               time.Time
	reasons, errTypes, pipelines []retryv1alpha1.NamedCount
}

func expectFigures(dls []*deadLetter, starts map[int32]int64) expectedFigures {
	var e expectedFigures
	reasons, types, pipelines := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, d := range dls {
		if d.offset < starts[d.partition] {
			continue
		}
		e.messages++
		reasons[d.reason]++
		types[d.errType]++
		pipelines[d.pipeline]++
		if e.oldest.IsZero() || d.at.Before(e.oldest) {
			e.oldest = d.at
		}
		if d.at.After(e.newest) {
			e.newest = d.at
		}
	}
	e.reasons, e.errTypes, e.pipelines = sortedCounts(reasons), sortedCounts(types), sortedCounts(pipelines)
	return e
}

// sortedCounts orders counts as status does: the largest first, ties by name.
func sortedCounts(m map[string]int64) []retryv1alpha1.NamedCount {
	var out []retryv1alpha1.NamedCount
	for n, c := range m {
		out = append(out, retryv1alpha1.NamedCount{Name: n, Count: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// figuresOf is what a test compares of a queue's status.
func figuresOf(st retryv1alpha1.DeadLetterQueueStatus) expectedFigures {
	var e expectedFigures
	if st.Messages != nil {
		e.messages = *st.Messages
	}
	if st.OldestMessageTime != nil {
		e.oldest = st.OldestMessageTime.UTC()
	}
	if st.NewestMessageTime != nil {
		e.newest = st.NewestMessageTime.UTC()
	}
	e.reasons, e.errTypes, e.pipelines = st.Reasons, st.ErrorTypes, st.Pipelines
	return e
}

// dlqFigures reads the queue afresh and returns its figures.
func dlqFigures(q *retryv1alpha1.DeadLetterQueue) func() (expectedFigures, error) {
	return func() (expectedFigures, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(q), q)
		return figuresOf(q.Status), err
	}
}

// dlqHealthy reads the queue afresh and returns its Healthy condition for its generation.
func dlqHealthy(q *retryv1alpha1.DeadLetterQueue) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(q), q); err != nil {
			return nil, err
		}
		c := meta.FindStatusCondition(q.Status.Conditions, retryv1alpha1.ConditionHealthy)
		if c == nil || c.ObservedGeneration != q.Generation {
			return nil, nil
		}
		return c, nil
	}
}

// startOffsets lists the start offset of each partition of topic.
func startOffsets(t *testing.T, adm *testKafka, topic string) map[int32]int64 {
	t.Helper()
	starts, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// fetchLog records, for one topic, the offsets each Fetch request asks for, and counts the
// ListOffsets requests (one round of the status refresh is two of them).
type fetchLog struct {
	mu          sync.Mutex
	topic       string
	topicID     [16]byte
	fetches     [][]fetchedPartition // one entry per Fetch request naming the topic
	listOffsets int
}

type fetchedPartition struct {
	partition int32
	offset    int64
}

func watchFetches(c *kfake.Cluster, topic string) *fetchLog {
	fl := &fetchLog{topic: topic}
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fl.mu.Lock()
		defer fl.mu.Unlock()
		var ps []fetchedPartition
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if rt.Topic != fl.topic && (rt.TopicID == [16]byte{} || rt.TopicID != fl.topicID) {
				continue
			}
			for _, p := range rt.Partitions {
				ps = append(ps, fetchedPartition{p.Partition, p.FetchOffset})
			}
		}
		if len(ps) > 0 {
			fl.fetches = append(fl.fetches, ps)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fl.mu.Lock()
		fl.listOffsets++
		fl.mu.Unlock()
		return nil, nil, false
	})
	return fl
}

// setTopicID tells the log the topic's ID (Fetch v13+ names topics by ID).
func (fl *fetchLog) setTopicID(t *testing.T, adm *testKafka) {
	t.Helper()
	details, err := adm.ListTopics(context.Background(), fl.topic)
	if err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	fl.topicID = details[fl.topic].ID
	fl.mu.Unlock()
}

func (fl *fetchLog) counts() (fetches, listOffsets int) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return len(fl.fetches), fl.listOffsets
}

func (fl *fetchLog) since(n int) [][]fetchedPartition {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return append([][]fetchedPartition(nil), fl.fetches[n:]...)
}

// waitRefreshes waits for n more ListOffsets rounds (two requests each) of the status refresh.
func (fl *fetchLog) waitRefreshes(g Gomega, n int) {
	_, before := fl.counts()
	g.Eventually(func() int { _, lo := fl.counts(); return lo }, wait, poll).Should(BeNumerically(">=", before+2*n))
}

// TestDeadLetterQueueLiveStatus is the acceptance scenario of the DeadLetterQueue status: N dead
// letters with known headers and timestamps show in status within one refresh (count, oldest and
// newest time, exact counts by reason, error type and pipeline); the refresh reads only records new
// since the last one (none when nothing arrived, and then status is not written); a crossing of
// maxMessages flips Healthy with a Warning event and going back flips it again with a Normal one;
// count-based retention trims the queue and the counts fall accordingly; an old dead letter crosses
// maxOldestAge; and `kubectl get dlq` shows the count.
func TestDeadLetterQueueLiveStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(c.Close)
	adm := newKadm(t, c.ListenAddrs()...)
	topic := "live.dlq"
	fl := watchFetches(c, topic)

	const refresh = time.Second
	q := newDLQ(ns, "live", topic)
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: c.ListenAddrs()}
	q.Spec.StatusRefreshInterval = &metav1.Duration{Duration: refresh}
	// Growth is checked by unit tests: here it must not mask the thresholds under test.
	q.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](100), MaxGrowthPerMinute: ptr.To[int32](math.MaxInt32)}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Eventually(dlqHealthy(q), wait, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonHealthy)))
	fl.setTopicID(t, adm)

	// N dead letters, ten per partition, timestamps a second apart starting ten minutes ago.
	const n = 30
	// Whole seconds: status times are metav1.Time, which keeps seconds.
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UTC()
	reasons := []string{"max_retries_exceeded", "non_retriable_error", "max_retries_exceeded", "deadline_exceeded", "undeliverable", "max_retries_exceeded"}
	errTypes := []string{"TimeoutError", "HTTP503", "TimeoutError", "ConnectionError"}
	var dls []*deadLetter
	for i := range n {
		dls = append(dls, &deadLetter{
			partition: int32(i % 3), reason: reasons[i%len(reasons)], errType: errTypes[i%len(errTypes)],
			pipeline: fmt.Sprintf("%s/p%d", ns, i%2), at: base.Add(time.Duration(i) * time.Second),
		})
	}
	produceDeadLetters(t, c.ListenAddrs(), topic, dls)
	produced := time.Now()
	want := expectFigures(dls, nil)
	g.Expect(want.messages).To(Equal(int64(n)))
	g.Expect(want.reasons).To(Equal([]retryv1alpha1.NamedCount{{Name: "max_retries_exceeded", Count: 15}, {Name: "deadline_exceeded", Count: 5},
		{Name: "non_retriable_error", Count: 5}, {Name: "undeliverable", Count: 5}}))
	g.Eventually(dlqFigures(q), refresh+3*time.Second, poll).Should(Equal(want), "within one refresh interval")
	t.Logf("status showed the %d dead letters %v after they were produced (refresh interval %v)", n, time.Since(produced).Round(time.Millisecond), refresh)
	g.Expect(q.Status.OldestMessageTime.UTC()).To(Equal(base))
	g.Expect(q.Status.NewestMessageTime.UTC()).To(Equal(base.Add((n - 1) * time.Second)))
	g.Expect(q.Status.LastRefreshTime).NotTo(BeNil())

	// Nothing new: refreshes read no record and write nothing.
	fetchesBefore, _ := fl.counts()
	version := q.ResourceVersion
	fl.waitRefreshes(g, 3)
	fetchesAfter, _ := fl.counts()
	g.Expect(fetchesAfter).To(Equal(fetchesBefore), "a refresh with no new records reads none")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
	g.Expect(q.ResourceVersion).To(Equal(version), "a refresh that changes no figure does not write status")

	// Six more: the next refresh reads only them.
	var more []*deadLetter
	for i := range 6 {
		more = append(more, &deadLetter{partition: int32(i % 3), reason: "undeliverable", errType: "Undeliverable",
			pipeline: ns + "/p9", at: base.Add(time.Duration(n+i) * time.Second)})
	}
	produceDeadLetters(t, c.ListenAddrs(), topic, more)
	dls = append(dls, more...)
	g.Eventually(dlqFigures(q), refresh+3*time.Second, poll).Should(Equal(expectFigures(dls, nil)))
	newFetches := fl.since(fetchesBefore)
	g.Expect(newFetches).NotTo(BeEmpty())
	for _, f := range newFetches {
		for _, p := range f {
			g.Expect(p.offset).To(BeNumerically(">=", 10), "partition %d fetched from %d: records already counted were read again", p.partition, p.offset)
		}
	}
	t.Logf("the 6 new dead letters took %d Fetch requests: %v", len(newFetches), newFetches)

	// maxMessages below the count: Healthy turns False with a Warning event; back above it, True
	// again with a Normal event.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Alerts.MaxMessages = ptr.To[int64](20) })
	g.Eventually(dlqHealthy(q), oneResync, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", retryv1alpha1.ReasonTooManyMessages), HaveField("Message", "holds 36 dead letters, more than maxMessages 20")))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(HaveField("Type", corev1.EventTypeWarning),
		HaveField("Reason", retryv1alpha1.ReasonTooManyMessages), HaveField("Note", ContainSubstring("more than maxMessages 20")))))
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Alerts.MaxMessages = ptr.To[int64](100) })
	g.Eventually(dlqHealthy(q), oneResync, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonHealthy)))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(HaveField("Type", corev1.EventTypeNormal),
		HaveField("Reason", retryv1alpha1.ReasonHealthy))))

	// Count-based retention trims the oldest: the counts fall to what the topic still holds.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) {
		q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To[int64](12)}
	})
	g.Eventually(held(adm, topic), oneResync, poll).Should(Equal(int64(12)))
	starts := startOffsets(t, adm, topic)
	wantTrimmed := expectFigures(dls, starts)
	g.Expect(wantTrimmed.messages).To(Equal(int64(12)))
	g.Eventually(dlqFigures(q), oneResync, poll).Should(Equal(wantTrimmed))
	t.Logf("after trimming to 12 (start offsets %v): reasons %v, oldest %s", starts, wantTrimmed.reasons, wantTrimmed.oldest.Format(time.RFC3339))

	// The oldest dead letter is about ten minutes old: a maxOldestAge of 5m is crossed.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) {
		q.Spec.Alerts.MaxOldestAge = &metav1.Duration{Duration: 5 * time.Minute}
	})
	g.Eventually(dlqHealthy(q), oneResync, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonOldMessages)))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonOldMessages))))

	// Real kubectl shows the count in the Messages column.
	out, err := env.Kubectl(nil, "get", "dlq", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubectl get dlq:\n%s", out)
	rows := kubectlTable(g, out, "NAME", "TOPIC", "MESSAGES", "PENDING", "OLDEST", "READY", "AGE")
	g.Expect(rows).To(ConsistOf(And(HaveKeyWithValue("NAME", "live"), HaveKeyWithValue("TOPIC", topic), HaveKeyWithValue("MESSAGES", "12"),
		HaveKeyWithValue("READY", "True"))))
	out, err = env.Kubectl(nil, "get", "dlq", "-n", ns, "-o", "wide")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kubectlTable(g, out, "NAME", "TOPIC", "MESSAGES", "PENDING", "OLDEST", "READY", "HEALTHY", "AGE")).To(ConsistOf(HaveKeyWithValue("HEALTHY", "False")))

	// The gauges are the status figures.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
	m := scrapeMetrics(t)
	labels := map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelDeadLetterQueue: q.Name}
	g.Expect(m.value(opmetrics.DeadLetterQueueMessages, labels)).To(Equal(float64(*q.Status.Messages)))
	g.Expect(m.value(opmetrics.DeadLetterQueueOldestMessageTimestamp, labels)).To(Equal(float64(q.Status.OldestMessageTime.UnixMilli()) / 1000))
	for _, r := range q.Status.Reasons {
		g.Expect(m.value(opmetrics.DeadLetterQueueMessagesByReason, with(labels, opmetrics.LabelReason, r.Name))).To(Equal(float64(r.Count)), r.Name)
	}
	g.Expect(m.series(opmetrics.DeadLetterQueueMessagesByReason, labels)).To(Equal(len(q.Status.Reasons)))

	// A deleted queue's series go.
	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Eventually(gone(q), wait, poll).Should(BeTrue())
	g.Eventually(func() int { return scrapeMetrics(t).series(opmetrics.DeadLetterQueueMessages, labels) }, wait, poll).Should(BeZero())
	g.Expect(scrapeMetrics(t).series(opmetrics.DeadLetterQueueMessagesByReason, labels)).To(BeZero())
}

// kubectlTable parses kubectl's table output into rows by column header, using the header's
// column positions (headers may hold spaces: "READY PODS", "DLQ MSGS").
func kubectlTable(g Gomega, out string, headers ...string) []map[string]string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	g.Expect(len(lines)).To(BeNumerically(">=", 1), out)
	head := lines[0]
	starts := make([]int, len(headers))
	from := 0
	for i, h := range headers {
		at := strings.Index(head[from:], h)
		g.Expect(at).To(BeNumerically(">=", 0), "column %q in %q", h, head)
		starts[i] = from + at
		from = starts[i] + len(h)
	}
	g.Expect(strings.TrimSpace(head[from:])).To(BeEmpty(), "unexpected columns in %q", head)
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, h := range headers {
			end := len(line)
			if i+1 < len(headers) {
				end = min(starts[i+1], len(line))
			}
			if starts[i] < len(line) {
				row[h] = strings.TrimSpace(line[starts[i]:end])
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// scraped are the metric families the manager's metrics endpoint serves.
type scraped map[string]*dto.MetricFamily

// scrapeMetrics scrapes controller-runtime's metrics registry over HTTP, as the manager's
// /metrics endpoint serves it (the suite's manager runs without a metrics listener).
func scrapeMetrics(t *testing.T) scraped {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// matching returns the series of name whose labels include labels.
func (s scraped) matching(name string, labels map[string]string) []*dto.Metric {
	var out []*dto.Metric
	f, ok := s[name]
	if !ok {
		return nil
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			if have[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

func (s scraped) series(name string, labels map[string]string) int {
	return len(s.matching(name, labels))
}

// value returns the value of the one series of name with labels, or NaN when there is not exactly
// one.
func (s scraped) value(name string, labels map[string]string) float64 {
	ms := s.matching(name, labels)
	if len(ms) != 1 {
		return math.NaN()
	}
	return ms[0].GetGauge().GetValue()
}

func with(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range labels {
		out[a] = b
	}
	return out
}
