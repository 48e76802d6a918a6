package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestAQueueAdoptsItsTwoTopicsInOneChange: a queue adopting its topic and the record of decisions
// beside it records both in the ledger and says so in one event (two of one reason would join one
// series, which keeps the first note only).
func TestAQueueAdoptsItsTwoTopicsInOneChange(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + ".existing"
	createTopic(t, adm, topic, 3)
	createTopic(t, adm, topic+".state", 1)
	q := newDLQ(ns, "adopted", topic)
	q.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	t.Cleanup(func() { letGo(t, q) })

	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	ledger := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(q.UID)}, ledger)).To(Succeed())
	g.Expect(ledger.Data).To(HaveKeyWithValue("topics", topic+"\n"+topic+".state"))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(HaveField("Reason", "TopicAdopted"),
		HaveField("Note", ContainSubstring(topic+" and "+topic+".state adopted")))))
}
