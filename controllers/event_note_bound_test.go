package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTheAPIServerRefusesAnEventNoteOver1024Bytes is why the manager's recorders cut their notes
// (boundedNotes): an event whose note is one byte over is refused, and so lost.
func TestTheAPIServerRefusesAnEventNoteOver1024Bytes(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	event := func(name string, note int) *eventsv1.Event {
		return &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: "retry.retryops.dev/test", ReportingInstance: "test",
			Action: "Reconcile", Reason: "ReferenceNotFound", Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{Kind: "ConsumerPipeline", Namespace: ns, Name: "p"},
			Note:      strings.Repeat("x", note),
		}
	}
	g.Expect(env.Client.Create(context.Background(), event("fits", 1024))).To(Succeed())
	err := env.Client.Create(context.Background(), event("over", 1025))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
}
