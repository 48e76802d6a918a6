package dlqapi_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/dlqui"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// listOptions converts the options a client sends (dlqui.Filter.ListOptions, what kubectl dlq and
// the console send) to the options the storage gets.
func listOptions(g Gomega, f dlqui.Filter, queue string) metainternalversion.ListOptions {
	opts := f.ListOptions("shop", queue)
	var out metainternalversion.ListOptions
	g.Expect(metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, &out, nil)).To(Succeed())
	return out
}

// Two queue names that share their first 63 characters (their label value): selecting one by name,
// as kubectl dlq list and the console do, lists its dead letters only.
func TestQueueSelectionMatchesTheWholeName(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	prefix := strings.Repeat("q", 63)
	q1, q2 := prefix+"-one", prefix+"-two"
	put(t, f, "one.dlq", letter(1), letter(2))
	put(t, f, "two.dlq", letter(3))
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: q1, Topic: "one.dlq", Conn: fakeConn}, {Name: q2, Topic: "two.dlq", Conn: fakeConn}}},
		Kafka: &fakeKafka{Fake: f}}
	for q, want := range map[string][]string{q1: {q1 + ".0.0", q1 + ".0.1"}, q2: {q2 + ".0.0"}} {
		names, _ := listAll(g, inShop(), s, listOptions(g, dlqui.Filter{}, q))
		g.Expect(names).To(Equal(want), "queue %s", q)
	}
	// The label, cut to 63 characters, is the same for both: kept for display.
	g.Expect(dlv1.LabelValue(q1)).To(Equal(dlv1.LabelValue(q2)))
}

// A list and the action built from the same filter select the same dead letters, whatever the
// producer wrote: error types, reasons and pipelines that sanitise to the same label value, and
// values with the selector syntax's own characters.
func TestListAndActionSelectTheSame(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	errorTypes := []string{"HTTP 500", "HTTP/500", "HTTP_500", " HTTP 500", "HTTP,500=x", `HTTP\500`, "HTTP 500!=", "ÜTTP 500"}
	reasonsOf := []string{headers.ReasonNonRetriable, "non retriable error", "non-retriable-error"}
	pipelines := []string{"shop/orders", "shop/orders!", "other/orders", "shop/orders,x"}
	var recs []kafka.ProduceRecord
	for i := range 96 {
		recs = append(recs, letter(i, headers.ErrorType, errorTypes[i%len(errorTypes)], headers.Reason, reasonsOf[i%len(reasonsOf)],
			headers.Pipeline, pipelines[i%len(pipelines)]))
	}
	put(t, f, "hostile.dlq", recs...)
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: "hostile-dlq", Topic: "hostile.dlq", Conn: fakeConn}}}, Kafka: &fakeKafka{Fake: f}}
	for _, flt := range []dlqui.Filter{
		{ErrorTypes: []string{"HTTP 500"}},
		{ErrorTypes: []string{"HTTP/500", "HTTP,500=x"}},
		{ErrorTypes: []string{`HTTP\500`, "HTTP 500!="}},
		{Reasons: []string{"non retriable error"}},
		{Reasons: []string{headers.ReasonNonRetriable}, ErrorTypes: []string{"HTTP_500"}},
		{Pipelines: []string{"orders"}},
		{Pipelines: []string{"other/orders", "orders,x"}},
		{States: []string{"Pending"}, Since: time.Date(2026, 11, 1, 0, 0, 10, 0, time.UTC), Until: time.Date(2026, 11, 1, 0, 0, 50, 0, time.UTC)},
	} {
		listed, _ := listAll(g, inShop(), s, listOptions(g, flt, "hostile-dlq"))
		sel := flt.Selector("shop")
		m, err := deadletters.Compile(retryv1alpha1.DeadLetterReplay, &sel)
		g.Expect(err).NotTo(HaveOccurred())
		var acted []string
		for _, r := range f.Records("hostile.dlq", 0) {
			if e := deadletters.ParseEntry(r); m.Match(&e, deadletters.State{}) {
				acted = append(acted, dlqapi.Name("hostile-dlq", e.ID))
			}
		}
		t.Logf("%+v: listed %d, the action selects %d", flt, len(listed), len(acted))
		g.Expect(acted).NotTo(BeEmpty())
		g.Expect(listed).To(Equal(acted), "filter %+v", flt)
	}
}
