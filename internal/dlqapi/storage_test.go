package dlqapi_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// fakeStorage serves two queues of shop from kafkafake: orders-dlq (5 dead letters, 0/0 to 0/4,
// dead-lettered a second apart) and down-dlq, whose broker cannot be reached.
func fakeStorage(t *testing.T) *dlqapi.Storage {
	f := kafkafake.New()
	reasons := []string{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable}
	for i := range 5 {
		put(t, f, "orders.dlq", letter(i, headers.Reason, reasons[i%2], headers.ErrorType, "HTTP 503", headers.Pipeline, "shop/orders"))
	}
	return &dlqapi.Storage{Kafka: &fakeKafka{Fake: f}, Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC)),
		Queues: dlqapi.StaticQueues{"shop": {{Name: "orders-dlq", Topic: "orders.dlq", Conn: fakeConn}, {Name: "down-dlq", Topic: "down.dlq", Conn: downConn}}}}
}

func inNamespace(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

func TestGet(t *testing.T) {
	s := fakeStorage(t)
	for _, tc := range []struct {
		name, ns, object string
		// wantErr is the kind of error; nil: the dead letter is returned.
		wantErr func(error) bool
	}{
		{"a dead letter", "shop", "orders-dlq.0.3", nil},
		{"the first", "shop", "orders-dlq.0.0", nil},
		{"past the end", "shop", "orders-dlq.0.5", apierrors.IsNotFound},
		{"a partition the topic has not", "shop", "orders-dlq.1.0", apierrors.IsNotFound},
		{"a queue of another namespace", "other", "orders-dlq.0.3", apierrors.IsNotFound},
		{"no such queue", "shop", "gone-dlq.0.0", apierrors.IsNotFound},
		{"not a dead letter's name", "shop", "orders-dlq", apierrors.IsNotFound},
		{"no namespace", "", "orders-dlq.0.3", apierrors.IsNotFound},
		{"a broker that cannot be reached", "shop", "down-dlq.0.0", apierrors.IsServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, err := s.Get(inNamespace(tc.ns), tc.object, &metav1.GetOptions{})
			if tc.wantErr != nil {
				g.Expect(tc.wantErr(err)).To(BeTrue(), "error %v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			d := obj.(*dlv1.DeadLetter)
			g.Expect(d.Name).To(Equal(tc.object))
			g.Expect(d.Namespace).To(Equal("shop"))
			g.Expect(d.Labels).To(Equal(dlv1.Labels("orders-dlq", "shop/orders", d.Reason, "HTTP 503", dlv1.StatePending)))
			g.Expect(dlv1.Name(d.Queue, d.Partition, d.Offset)).To(Equal(tc.object))
			g.Expect(d.Value.Data).To(Equal(`{"n":` + tc.object[len(tc.object)-1:] + `}`))
		})
	}
}

func TestList(t *testing.T) {
	s := fakeStorage(t)
	at := func(sec int) string { return time.Date(2026, 11, 1, 0, 0, sec, 0, time.UTC).Format(time.RFC3339) }
	for _, tc := range []struct {
		name string
		ns   string
		opts metainternalversion.ListOptions
		want []string
		// pages is how many pages the list takes, following its continue tokens.
		pages int
		// warned: the unreadable queue is passed over (a warning); err: the list fails.
		err func(error) bool
	}{
		{"every dead letter of the namespace, the unreadable queue passed over", "shop", metainternalversion.ListOptions{},
			[]string{"orders-dlq.0.0", "orders-dlq.0.1", "orders-dlq.0.2", "orders-dlq.0.3", "orders-dlq.0.4"}, 1, nil},
		{"one queue", "shop", metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "orders-dlq")},
			[]string{"orders-dlq.0.0", "orders-dlq.0.1", "orders-dlq.0.2", "orders-dlq.0.3", "orders-dlq.0.4"}, 1, nil},
		{"by reason, a field selector", "shop", metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldReason, headers.ReasonNonRetriable)},
			[]string{"orders-dlq.0.1", "orders-dlq.0.3"}, 1, nil},
		{"by reason, not equal", "shop", metainternalversion.ListOptions{FieldSelector: fields.OneTermNotEqualSelector(dlv1.FieldReason, headers.ReasonNonRetriable)},
			[]string{"orders-dlq.0.0", "orders-dlq.0.2", "orders-dlq.0.4"}, 1, nil},
		{"by label", "shop", metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{dlv1.LabelReason: headers.ReasonMaxRetriesExceeded, dlv1.LabelState: "Pending"})},
			[]string{"orders-dlq.0.0", "orders-dlq.0.2", "orders-dlq.0.4"}, 1, nil},
		{"by sanitised label: the error type's", "shop", metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{dlv1.LabelErrorType: dlv1.LabelValue("HTTP 503")})},
			[]string{"orders-dlq.0.0", "orders-dlq.0.1", "orders-dlq.0.2", "orders-dlq.0.3", "orders-dlq.0.4"}, 1, nil},
		{"since inclusive, until exclusive", "shop", metainternalversion.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector(dlv1.FieldSince, at(1)), fields.OneTermEqualSelector(dlv1.FieldUntil, at(3)))},
			[]string{"orders-dlq.0.1", "orders-dlq.0.2"}, 1, nil},
		{"two to a page", "shop", metainternalversion.ListOptions{Limit: 2, FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "orders-dlq")},
			[]string{"orders-dlq.0.0", "orders-dlq.0.1", "orders-dlq.0.2", "orders-dlq.0.3", "orders-dlq.0.4"}, 3, nil},
		{"a state nobody has", "shop", metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{dlv1.LabelState: "Resolved"})},
			nil, 1, nil},
		{"a namespace without queues", "other", metainternalversion.ListOptions{}, nil, 1, nil},
		{"only the queue that cannot be read", "shop", metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector(dlv1.FieldQueue, "down-dlq")},
			nil, 0, apierrors.IsServiceUnavailable},
		{"no namespace", "", metainternalversion.ListOptions{}, nil, 0, apierrors.IsBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			names, pages, err := follow(inNamespace(tc.ns), s, tc.opts)
			if tc.err != nil {
				g.Expect(tc.err(err)).To(BeTrue(), "error %v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names).To(Equal(tc.want))
			g.Expect(pages).To(Equal(tc.pages))
		})
	}
}

// The table's age column reads the storage's clock.
func TestTableAgeReadsTheClock(t *testing.T) {
	g := NewWithT(t)
	s := fakeStorage(t)
	obj, err := s.Get(inNamespace("shop"), "orders-dlq.0.0", &metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	table, err := s.ConvertToTable(context.Background(), obj, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(table.Rows).To(HaveLen(1))
	g.Expect(table.Rows[0].Cells[7]).To(Equal("60m"))
}
