package dlqapi_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	clocktesting "k8s.io/utils/clock/testing"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// fakeConn reaches the kafkafake Fake; downConn is a broker that cannot be reached.
var (
	fakeConn = kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	downConn = kafka.Connection{BootstrapServers: []string{"down:9092"}}
)

// fakeKafka is a kafkafake Fake as the API's Kafka: every Scan is counted and steps clock when set
// (a chunk taking a second); the broker of downConn cannot be reached.
type fakeKafka struct {
	*kafkafake.Fake
	scans atomic.Int64
	clock *clocktesting.FakeClock
}

var errDown = errors.New("dial tcp down:9092: connection refused")

func (k *fakeKafka) Admin(ctx context.Context, conn kafka.Connection) (kafka.Admin, error) {
	if conn.BootstrapServers[0] == downConn.BootstrapServers[0] {
		return nil, errDown
	}
	return k.Fake.Admin(ctx, conn)
}

func (k *fakeKafka) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	k.scans.Add(1)
	if k.clock != nil {
		k.clock.Step(time.Second)
	}
	return k.Fake.Scan(ctx, conn, ranges, fn)
}

// letter is a dead letter record with the context headers given (name, value, ...).
func letter(i int, hdrs ...string) kafka.ProduceRecord {
	r := kafka.ProduceRecord{Key: []byte("k-" + strconv.Itoa(i)), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`),
		Timestamp: time.Date(2026, 11, 1, 0, 0, i, 0, time.UTC)}
	for j := 0; j+1 < len(hdrs); j += 2 {
		r.Headers = append(r.Headers, kafka.Header{Key: hdrs[j], Value: []byte(hdrs[j+1])})
	}
	return r
}

// put writes records to topic (made with one partition when missing).
func put(t testing.TB, f *kafkafake.Fake, topic string, recs ...kafka.ProduceRecord) {
	t.Helper()
	if !f.Topic(topic).Exists {
		f.AddTopic(topic, 1, 1, nil)
	}
	if len(recs) == 0 {
		return
	}
	if _, err := f.ProduceRecords(context.Background(), fakeConn, topic, recs); err != nil {
		t.Fatal(err)
	}
}

func inShop() context.Context {
	return genericapirequest.WithNamespace(context.Background(), "shop")
}

// listAll follows the continue tokens from opts: the names in order, and the number of pages.
func listAll(g Gomega, ctx context.Context, s *dlqapi.Storage, opts metainternalversion.ListOptions) ([]string, int) {
	out, pages, err := follow(ctx, s, opts)
	g.Expect(err).NotTo(HaveOccurred())
	return out, pages
}

func follow(ctx context.Context, s *dlqapi.Storage, opts metainternalversion.ListOptions) ([]string, int, error) {
	var out []string
	pages := 0
	for {
		obj, err := s.List(ctx, &opts)
		if err != nil {
			return out, pages, err
		}
		l := obj.(*dlv1.DeadLetterList)
		if len(l.Items) > dlv1.MaxListItems {
			return out, pages, fmt.Errorf("a page of %d", len(l.Items))
		}
		for _, d := range l.Items {
			out = append(out, d.Name)
		}
		pages++
		if l.Continue == "" {
			return out, pages, nil
		}
		opts.Continue = l.Continue
	}
}

// distinct counts the distinct names.
func distinct(names []string) int {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return len(m)
}

// A huge limit neither spins for ever nor repeats dead letters: the limit is bounded, and a list
// ends once its context ends (franz-go's scan of an empty range returns at once without looking at
// the context, so the loop must).
func TestListEndsWithItsContext(t *testing.T) {
	g := NewWithT(t)
	const n = 25000 // more than the largest chunk in one partition
	kf := newKafka(t, "spin.dlq", 1, n, 8)
	k := &countingScanner{Kafka: kf.f}
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: "spin-dlq", Topic: kf.topic, Conn: kf.conn}}}, Kafka: k}

	// Cancelled at its second scan (the first reads a whole chunk, the next ones were empty and
	// never looked at the context), with a selector that matches nothing: the list ends.
	ctx, cancel := context.WithCancel(inShop())
	k.mu.Lock()
	k.onScan = func() {
		if k.scans.Load() == 2 {
			cancel()
		}
	}
	k.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := s.List(ctx, &metainternalversion.ListOptions{Limit: 1 << 61, LabelSelector: labels.SelectorFromSet(labels.Set{dlv1.LabelReason: "none"})})
		done <- err
	}()
	var err error
	g.Eventually(done).WithTimeout(20*time.Second).Should(Receive(&err), func() string {
		return fmt.Sprintf("the list did not end after its context was cancelled (%d scans so far)", k.scans.Load())
	})
	g.Expect(err).To(HaveOccurred())
	g.Expect(k.scans.Load()).To(BeEquivalentTo(2))

	// limit=4e18 pages through the queue once.
	k.mu.Lock()
	k.onScan = nil
	k.mu.Unlock()
	type result struct {
		names []string
		pages int
		err   error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(inShop(), time.Minute)
		defer cancel()
		names, pages, err := follow(ctx, s, metainternalversion.ListOptions{Limit: 4e18})
		res <- result{names, pages, err}
	}()
	var r result
	g.Eventually(res).WithTimeout(2*time.Minute).Should(Receive(&r), "limit=4e18 did not end")
	t.Logf("limit=4e18: %d items in %d pages, %d distinct", len(r.names), r.pages, distinct(r.names))
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(len(r.names)).To(Equal(n), "items listed")
	g.Expect(distinct(r.names)).To(Equal(n))
}

// countingScanner counts the scans of Kafka and calls onScan at each.
type countingScanner struct {
	dlqapi.Kafka
	scans  atomic.Int64
	mu     sync.Mutex
	onScan func()
}

func (c *countingScanner) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	c.scans.Add(1)
	c.mu.Lock()
	f := c.onScan
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return c.Kafka.Scan(ctx, conn, ranges, fn)
}

// A list matching 1 dead letter in 10 million returns, within its scan budget, what it found with a
// continue token, page by page, until it reaches the one.
func TestSelectiveListOfAHugeQueueGoesOnPageByPage(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	put(t, f, "huge.dlq")
	f.SetOffsets("huge.dlq", 0, 0, 10_000_000)
	put(t, f, "huge.dlq", letter(1, headers.Reason, "needle"))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	k := &fakeKafka{Fake: f, clock: clk}
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: "huge-dlq", Topic: "huge.dlq", Conn: fakeConn}}}, Kafka: k,
		Clock: clk, ScanBudget: 5 * time.Second}
	opts := metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldReason, "needle")}
	var found []string
	pages, most := 0, int64(0)
	for {
		before := k.scans.Load()
		ctx, cancel := context.WithTimeout(inShop(), time.Minute)
		obj, err := s.List(ctx, &opts)
		cancel()
		g.Expect(err).NotTo(HaveOccurred())
		most = max(most, k.scans.Load()-before)
		g.Expect(k.scans.Load()-before).To(BeNumerically("<=", 6), "page %d: one request read %d chunks (a second each), beyond its budget of 5s", pages, k.scans.Load()-before)
		l := obj.(*dlv1.DeadLetterList)
		for _, d := range l.Items {
			found = append(found, d.Name)
		}
		pages++
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	t.Logf("%d pages, at most %d chunks a page, found %v", pages, most, found)
	g.Expect(found).To(Equal([]string{"huge-dlq.0.10000000"}))
	g.Expect(pages).To(BeNumerically(">", 100))
}

// A list without limit returns a bounded page (items and bytes) with a continue token; headers are
// cut in lists as keys and values are, and whole on get.
func TestListPageIsBounded(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	var recs []kafka.ProduceRecord
	for i := range 1200 {
		recs = append(recs, letter(i, headers.Reason, "r"))
	}
	recs[5].Headers = append(recs[5].Headers, kafka.Header{Key: "huge", Value: []byte(strings.Repeat("h", 900<<10))})
	put(t, f, "many.dlq", recs...)
	recs = nil
	for i := range 100 {
		r := letter(i)
		r.Value = []byte(strings.Repeat("v", 60<<10))
		recs = append(recs, r)
	}
	put(t, f, "big.dlq", recs...)
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: "many-dlq", Topic: "many.dlq", Conn: fakeConn}, {Name: "big-dlq", Topic: "big.dlq", Conn: fakeConn}}},
		Kafka: &fakeKafka{Fake: f}}
	many := metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "many-dlq")}

	obj, err := s.List(inShop(), &many)
	g.Expect(err).NotTo(HaveOccurred())
	l := obj.(*dlv1.DeadLetterList)
	t.Logf("no limit: %d items, continue %v", len(l.Items), l.Continue != "")
	g.Expect(len(l.Items)).To(Equal(dlv1.MaxListItems), "items in one page")
	g.Expect(l.Continue).NotTo(BeEmpty())
	h := l.Items[5].Headers[len(l.Items[5].Headers)-1]
	t.Logf("a 900 KiB header in a list: %d bytes, truncated %v, size %d", len(h.Value), h.Truncated, h.Size)
	g.Expect(h.Value).To(HaveLen(dlv1.MaxListPayloadBytes))
	g.Expect(h.Truncated).To(BeTrue())
	g.Expect(h.Size).To(BeEquivalentTo(900 << 10))
	whole, err := s.Get(inShop(), "many-dlq.0.5", nil)
	g.Expect(err).NotTo(HaveOccurred())
	wh := whole.(*dlv1.DeadLetter).Headers
	g.Expect(wh[len(wh)-1].Value).To(HaveLen(900 << 10))
	g.Expect(wh[len(wh)-1].Truncated).To(BeFalse())

	names, pages := listAll(g, inShop(), s, many)
	g.Expect(len(names)).To(Equal(1200), "items listed")
	g.Expect(distinct(names)).To(Equal(1200))
	g.Expect(pages).To(Equal(3))

	// 100 values of 60 KiB: a page holds about MaxListBytes.
	big := metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "big-dlq")}
	obj, err = s.List(inShop(), &big)
	g.Expect(err).NotTo(HaveOccurred())
	l = obj.(*dlv1.DeadLetterList)
	size := 0
	for _, d := range l.Items {
		size += len(d.Value.Data)
	}
	t.Logf("60 KiB values: %d items, %d KiB of values, continue %v", len(l.Items), size>>10, l.Continue != "")
	g.Expect(size).To(BeNumerically("<=", dlv1.MaxListBytes))
	g.Expect(l.Continue).NotTo(BeEmpty())
	names, _ = listAll(g, inShop(), s, big)
	g.Expect(len(names)).To(Equal(100), "items listed")
	g.Expect(distinct(names)).To(Equal(100))
}

// warnings records the warnings a request adds.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// One queue whose broker cannot be reached is passed over with a warning naming it; the others are
// listed, page by page too; a list of that queue alone fails.
func TestAQueueThatCannotBeReadIsPassedOverWithAWarning(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	for _, topic := range []string{"a.dlq", "c.dlq"} {
		put(t, f, topic, letter(1), letter(2), letter(3))
	}
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {
		{Name: "a-dlq", Topic: "a.dlq", Conn: fakeConn}, {Name: "b-dlq", Topic: "b.dlq", Conn: downConn}, {Name: "c-dlq", Topic: "c.dlq", Conn: fakeConn},
	}}, Kafka: &fakeKafka{Fake: f}}

	w := &warnings{}
	obj, err := s.List(warning.WithWarningRecorder(inShop(), w), &metainternalversion.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var got []string
	for _, d := range obj.(*dlv1.DeadLetterList).Items {
		got = append(got, d.Name)
	}
	g.Expect(got).To(Equal([]string{"a-dlq.0.0", "a-dlq.0.1", "a-dlq.0.2", "c-dlq.0.0", "c-dlq.0.1", "c-dlq.0.2"}))
	g.Expect(w.all()).To(ConsistOf(ContainSubstring("DeadLetterQueue shop/b-dlq could not be read")))
	t.Logf("warning: %s", w.all()[0])

	w = &warnings{}
	names, pages := listAll(g, warning.WithWarningRecorder(inShop(), w), s, metainternalversion.ListOptions{Limit: 2})
	g.Expect(len(names)).To(Equal(6), "items listed")
	g.Expect(pages).To(BeNumerically(">=", 3))
	g.Expect(w.all()).To(ConsistOf(ContainSubstring("shop/b-dlq")))

	_, err = s.List(inShop(), &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "b-dlq")})
	g.Expect(apierrors.IsServiceUnavailable(err)).To(BeTrue(), "%v", err)
}

// slowDownKafka is fakeKafka whose downConn broker answers nothing: each try to reach it spends the
// client's request timeout (10s on clock) before it fails.
type slowDownKafka struct {
	*fakeKafka
	clock *clocktesting.FakeClock
	tries atomic.Int64
}

func (k *slowDownKafka) Admin(ctx context.Context, conn kafka.Connection) (kafka.Admin, error) {
	if conn.BootstrapServers[0] == downConn.BootstrapServers[0] {
		k.tries.Add(1)
		k.clock.Step(10 * time.Second)
	}
	return k.fakeKafka.Admin(ctx, conn)
}

// Queues that cannot be read spend the list's time as a scan does: a namespace with many of them
// (a broker gone, a blackholed address) returns a page with a continue token within the scan budget
// and goes on after them page by page, instead of one request trying every queue, beyond the
// budget and the request's deadline, so that the namespace's list never ends.
func TestQueuesThatCannotBeReadSpendTheScanBudget(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	put(t, f, "z.dlq", letter(1), letter(2))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	var qs []dlqapi.Queue
	for i := range 20 {
		qs = append(qs, dlqapi.Queue{Name: fmt.Sprintf("down-%02d", i), Topic: fmt.Sprintf("down-%02d.dlq", i), Conn: downConn})
	}
	qs = append(qs, dlqapi.Queue{Name: "z-dlq", Topic: "z.dlq", Conn: fakeConn})
	k := &slowDownKafka{fakeKafka: &fakeKafka{Fake: f}, clock: clk}
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": qs}, Kafka: k, Clock: clk, ScanBudget: 10 * time.Second}

	obj, err := s.List(warning.WithWarningRecorder(inShop(), &warnings{}), &metainternalversion.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.tries.Load()).To(BeNumerically("<=", 2), "queues one request tried to reach (10s each), beyond its budget of 10s; continue %q", obj.(*dlv1.DeadLetterList).Continue)
	g.Expect(obj.(*dlv1.DeadLetterList).Continue).NotTo(BeEmpty())

	w := &warnings{}
	names, pages := listAll(g, warning.WithWarningRecorder(inShop(), w), s, metainternalversion.ListOptions{})
	g.Expect(names).To(Equal([]string{"z-dlq.0.0", "z-dlq.0.1"}))
	g.Expect(pages).To(BeNumerically(">=", 10))
	g.Expect(w.all()).To(HaveLen(20))
}
