package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// TestDeadLetterQueueStatesFollowTheTopic: decisions recorded where the brokers gave no topic IDs
// (none in the value) count, and are bound to the topic's ID; the decisions on dead letters retention deleted
// are tombstoned; and once the topic is deleted out of band and recreated, the new dead letters at
// the same offsets are Pending, whatever was decided on the old ones.
func TestDeadLetterQueueStatesFollowTheTopic(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	topic := ns + ".dlq"
	q := newDLQ(ns, "states", topic)
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())

	f := franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout))
	t.Cleanup(f.Close)
	conn := kafka.Connection{BootstrapServers: broker.ListenAddrs(), ClientID: "test"}
	admin, err := f.Admin(ctx, conn)
	g.Expect(err).NotTo(HaveOccurred())
	states := func() ([]retryv1alpha1.NamedCount, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)
		return q.Status.States, err
	}
	counts := func(pending, resolved int64) []retryv1alpha1.NamedCount {
		return []retryv1alpha1.NamedCount{{Name: "Pending", Count: pending}, {Name: "Replayed", Count: 0}, {Name: "Resolved", Count: resolved}, {Name: "Ignored", Count: 0}}
	}
	// latest is the record of decisions as compaction leaves it: the last state of every key.
	latest := func() (map[deadletters.ID]deadletters.State, error) {
		out := map[deadletters.ID]deadletters.State{}
		_, err := deadletters.ScanStates(ctx, admin, f, conn, topic, nil, func(id deadletters.ID, st deadletters.State, err error) {
			if err == nil {
				out[id] = st
			}
		})
		return out, err
	}

	produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 4})
	unbound := deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "alice", Time: time.Now()}
	var updates []deadletters.StateUpdate
	for off := range int64(4) {
		updates = append(updates, deadletters.StateUpdate{ID: deadletters.ID{Offset: off}, State: unbound})
	}
	_, err = deadletters.WriteStates(ctx, f, conn, topic, updates)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(states, oneResync, poll).Should(Equal(counts(0, 4)))

	// Retention deletes two: their decisions go, the other two are bound to the topic's ID.
	g.Expect(admin.DeleteRecordsBefore(ctx, topic, map[int32]int64{0: 2})).To(Succeed())
	id, err := deadletters.TopicID(ctx, admin, topic)
	g.Expect(err).NotTo(HaveOccurred())
	bound := unbound
	bound.Time = bound.Time.UTC().Round(0)
	bound.TopicID = id
	g.Eventually(func() (map[deadletters.ID]deadletters.State, error) {
		m, err := latest()
		for k, st := range m {
			st.Time = st.Time.Round(0)
			m[k] = st
		}
		return m, err
	}, 3*oneResync, poll).Should(Equal(map[deadletters.ID]deadletters.State{
		{Offset: 0}: {State: retryv1alpha1.DeadLetterPending}, {Offset: 1}: {State: retryv1alpha1.DeadLetterPending},
		{Offset: 2}: bound, {Offset: 3}: bound,
	}))
	g.Eventually(states, oneResync, poll).Should(Equal(counts(0, 2)))

	// Deleted out of band: recreated, and four new dead letters at offsets 0 to 3.
	g.Expect(admin.DeleteTopic(ctx, topic)).To(Succeed())
	g.Eventually(eventsFor(ns, q.Name), oneResync, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeNormal), HaveField("Reason", "TopicRecreated"))))
	produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 4})
	g.Eventually(states, oneResync, poll).Should(Equal(counts(4, 0)))
	holdsThroughResync(t, q, states, Equal(counts(4, 0)))
}
