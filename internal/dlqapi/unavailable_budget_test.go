package dlqapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// wrappingKafka fails every Admin with an API status wrapped in another error (a Secret that could
// not be read, say, as a client factory reports it).
type wrappingKafka struct{ *kafkafake.Fake }

func (k *wrappingKafka) Admin(context.Context, kafka.Connection) (kafka.Admin, error) {
	return nil, fmt.Errorf("connecting to the queue's cluster: %w",
		apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "kafka-creds", fmt.Errorf("no")))
}

// A Kafka error that wraps an API status is 503 ServiceUnavailable: the apiserver
// (ErrorToAPIStatus, a type switch) would answer the wrapping error as it is 500 InternalError.
func TestAWrappedStatusIsStillUnavailable(t *testing.T) {
	f := kafkafake.New()
	put(t, f, "orders.dlq", letter(0, headers.Reason, headers.ReasonNonRetriable))
	s := &dlqapi.Storage{Kafka: &wrappingKafka{Fake: f}, Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC)),
		Queues: dlqapi.StaticQueues{"shop": {{Name: "orders-dlq", Topic: "orders.dlq", Conn: fakeConn}}}}
	_, getErr := s.Get(inNamespace("shop"), "orders-dlq.0.0", &metav1.GetOptions{})
	_, listErr := s.List(inNamespace("shop"), &metainternalversion.ListOptions{})
	for name, err := range map[string]error{"get": getErr, "list": listErr} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(err).To(HaveOccurred())
			st := responsewriters.ErrorToAPIStatus(err)
			g.Expect(st.Code).To(Equal(int32(http.StatusServiceUnavailable)), "the client is answered %d %s: %s", st.Code, st.Reason, st.Message)
		})
	}
}

// The scan budget reads Storage.Clock and the request's deadline the real clock, never one
// against the other: a fake clock ahead of the wall clock, frozen, cuts no page.
func TestTheScanBudgetReadsOneClock(t *testing.T) {
	g := NewWithT(t)
	f := kafkafake.New()
	for i := range 3 {
		put(t, f, "a.dlq", letter(i, headers.Reason, headers.ReasonNonRetriable))
		put(t, f, "b.dlq", letter(i, headers.Reason, headers.ReasonNonRetriable))
	}
	deadline := time.Now().Add(time.Minute)
	s := &dlqapi.Storage{Kafka: &fakeKafka{Fake: f}, Clock: clocktesting.NewFakePassiveClock(deadline.Add(time.Hour)),
		Queues: dlqapi.StaticQueues{"shop": {{Name: "a-dlq", Topic: "a.dlq", Conn: fakeConn}, {Name: "b-dlq", Topic: "b.dlq", Conn: fakeConn}}}}
	ctx, cancel := context.WithDeadline(inNamespace("shop"), deadline)
	defer cancel()
	names, pages, err := follow(ctx, s, metainternalversion.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(HaveLen(6))
	g.Expect(pages).To(Equal(1), "a list of 6 dead letters in 2 queues, under a frozen clock")
}
