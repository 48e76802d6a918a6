package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestOneQueueAndOnePipelineWriteOnlyWhatTheyMake: the Kubernetes writes (dry runs included) that
// bring one queue and one pipeline to Ready, with the cache the manager runs with, are one apply per
// child, one finalizer and one status patch per resource, the policy's status and the topic ledger's
// records; and nothing more once Ready, however many resyncs follow. Each child used to cost a
// dry-run create before its apply (40,000 of 117,704 writes to Ready at 10,000 resources).
func TestOneQueueAndOnePipelineWriteOnlyWhatTheyMake(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := newNamespace(t)
	// A record another test's resource left in the topic ledger, old enough for a sweep: the
	// manager below sweeps it at start, a delete that is not this test's.
	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(uuid.NewUUID()),
		Labels:      map[string]string{kafkaspec.LedgerLabel: "deadletterqueue"},
		Annotations: map[string]string{"retry.retryops.dev/resource": "DeadLetterQueue " + ns + "/gone"},
	}, Data: map[string]string{"topics": ns + ".gone"}}
	g.Expect(env.Client.Create(ctx, orphan)).To(Succeed())
	// A manager of its own, on this test's objects only (the suite manager ignores the label), its
	// clock standing still (past the orphan's sweep age): no figure ages, so a resync has nothing
	// new to write.
	label := map[string]string{benchmarkLabel: ns}
	writes := &verbCounter{}
	reconciles := &reconcileCounter{}
	startOwnManager(t, ctx, ns, clocktesting.NewFakeClock(time.Now().Add(kafkaspec.LedgerSweepMinAge+time.Minute)), func(cl client.Client) client.Client {
		return verbCountingClient{Client: readCountingClient{Client: cl, reads: reconciles}, writes: writes}
	})
	t.Cleanup(cancel)

	rp := backoffPolicy(ns, "p", 3, time.Second, time.Minute)
	q := newDLQ(ns, "q", ns+".dlq")
	p := newPipeline(ns, "p", ns+".src", rp.Name, q.Name)
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	for _, o := range []client.Object{rp, q, p} {
		o.SetLabels(label)
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}

	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), orphan))
	},
		wait, poll).Should(BeTrue(), "the orphan swept")

	// Ready as the scale benchmark counts it: the queue Ready with its first counts by state, the
	// pipeline's topics ready with its dead letters counted (no Deployment controller runs here);
	// and the policy showing its pipeline.
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(q.Status.Conditions, retryv1alpha1.ConditionReady)).To(BeTrue())
		g.Expect(q.Status.Pending).NotTo(BeNil())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)).To(BeTrue())
		g.Expect(p.Status.DeadLetterMessages).NotTo(BeNil())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rp), rp)).To(Succeed())
		g.Expect(rp.Status.Pipelines).To(Equal(ptr.To[int32](1)))
	}, wait, poll).Should(Succeed())
	// Only this test's own writes count: its manager sweeps, once at start, the topic ledger's
	// records that earlier tests' resources left behind, and those deletes are not its objects'.
	mine := func(w write) bool {
		return w.namespace == ns || w.name == "topics-"+string(q.UID) || w.name == "topics-"+string(p.UID)
	}
	toReady := writes.snapshot(mine)
	g.Expect(toReady.over(maxWritesToReady)).To(BeEmpty(), "writes to Ready above their bound: %v", toReady)
	g.Expect(toReady.total()).To(BeNumerically("<=", 17), "writes to Ready: %v", toReady)
	// Through two whole reconciles of both (counted by their reads of the queue and the pipeline:
	// with the describe snapshot, a resync no longer describes its topics), nothing more.
	before := reconciles.snapshot()
	g.Eventually(func() (bool, error) {
		if now := writes.snapshot(mine); !maps.Equal(now, toReady) {
			return false, StopTrying(fmt.Sprintf("a write at a resync: %v, at Ready %v", now, toReady))
		}
		return reconciles.resyncedTwice(before, 1, 1), nil
	}, wait, poll).Should(BeTrue(), "no write through two resyncs of each")
	// And one event for the queue's way to Ready: both its topics created (its first Ready would
	// only say again that the topic is as specified).
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ConsistOf(And(HaveField("Reason", "TopicCreated"),
		HaveField("Note", And(ContainSubstring(ns+".dlq created"), ContainSubstring(ns+".dlq.state created"))))))
}

// maxWritesToReady bounds the writes, by verb and kind, that bring one queue and one pipeline on a
// policy to Ready; 17 in all. Anything else (a dry-run create, an update) is one too many.
var maxWritesToReady = writeCounts{
	// The dispatcher ConfigMap, the queue's and the pipeline's alert rules (the PrometheusRule kind
	// is not served here), the consumers' circuit ConfigMap; the consumers' Deployment and access.
	"apply ConfigMap": 4, "apply Deployment": 1, "apply Role": 1, "apply RoleBinding": 1, "apply ServiceAccount": 1,
	// The ledger: the queue's record made with its topic and its record of decisions' topic in one
	// write (it was two: the state topic added by a patch); the pipeline's.
	"create ConfigMap": 2,
	// Finalizers.
	"patch ConsumerPipeline": 1, "patch DeadLetterQueue": 1,
	// The pipeline's topics ready, then its dead letters counted once the queue has counted them;
	// the queue Ready; the policy valid, then used by the pipeline (once if the pipeline came first).
	"patch status ConsumerPipeline": 2, "patch status DeadLetterQueue": 1, "patch status RetryPolicy": 2,
}

// writeCounts are writes by "verb kind".
type writeCounts map[string]int

// over are the counts of w above their bound in max (absent: 0).
func (w writeCounts) over(max writeCounts) writeCounts {
	out := writeCounts{}
	for k, n := range w {
		if n > max[k] {
			out[k] = n
		}
	}
	return out
}

func (w writeCounts) total() int {
	n := 0
	for _, v := range w {
		n += v
	}
	return n
}

// verbCounter keeps successful writes, to be counted by verb and kind ("apply Deployment", "patch
// status DeadLetterQueue", "create (dry run) ConfigMap").
type verbCounter struct {
	mu     sync.Mutex
	writes []write
}

// write is one successful write: "verb kind" and the object written.
type write struct {
	verb            string
	namespace, name string
}

func (w *verbCounter) count(scheme *runtime.Scheme, verb string, obj any, err error) error {
	if err != nil {
		return err
	}
	kind := "?"
	if o, ok := obj.(interface{ GetKind() string }); ok && o.GetKind() != "" {
		kind = o.GetKind() // unstructured objects and their apply configurations
	} else if o, ok := obj.(runtime.Object); ok {
		if gvk, err := apiutil.GVKForObject(o, scheme); err == nil {
			kind = gvk.Kind
		}
	}
	ns, name := objectKey(obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, write{verb: verb + " " + kind, namespace: ns, name: name})
	return nil
}

// snapshot counts the writes so far that keep holds for.
func (w *verbCounter) snapshot(keep func(write) bool) writeCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := writeCounts{}
	for _, x := range w.writes {
		if keep(x) {
			out[x.verb]++
		}
	}
	return out
}

// objectKey is the namespace and name of obj: an object, or an apply configuration.
func objectKey(obj any) (namespace, name string) {
	switch o := obj.(type) {
	case client.Object:
		return o.GetNamespace(), o.GetName()
	case interface {
		GetNamespace() *string
		GetName() *string
	}:
		return ptr.Deref(o.GetNamespace(), ""), ptr.Deref(o.GetName(), "")
	}
	return "", ""
}

// verbCountingClient counts the writes of a manager by verb and kind; events have a client of their
// own and are not counted.
type verbCountingClient struct {
	client.Client
	writes *verbCounter
}

func (c verbCountingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	verb := "create"
	if o := (&client.CreateOptions{}).ApplyOptions(opts); len(o.DryRun) > 0 {
		verb = "create (dry run)"
	}
	return c.writes.count(c.Scheme(), verb, obj, c.Client.Create(ctx, obj, opts...))
}

func (c verbCountingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.writes.count(c.Scheme(), "update", obj, c.Client.Update(ctx, obj, opts...))
}

func (c verbCountingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.writes.count(c.Scheme(), "patch", obj, c.Client.Patch(ctx, obj, patch, opts...))
}

func (c verbCountingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return c.writes.count(c.Scheme(), "apply", obj, c.Client.Apply(ctx, obj, opts...))
}

func (c verbCountingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.writes.count(c.Scheme(), "delete", obj, c.Client.Delete(ctx, obj, opts...))
}

func (c verbCountingClient) Status() client.SubResourceWriter {
	return verbCountingSubResource{SubResourceClient: c.Client.SubResource("status"), writes: c.writes, scheme: c.Scheme(), name: "status"}
}

func (c verbCountingClient) SubResource(name string) client.SubResourceClient {
	return verbCountingSubResource{SubResourceClient: c.Client.SubResource(name), writes: c.writes, scheme: c.Scheme(), name: name}
}

type verbCountingSubResource struct {
	client.SubResourceClient
	writes *verbCounter
	scheme *runtime.Scheme
	name   string
}

func (c verbCountingSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return c.writes.count(c.scheme, "create "+c.name, obj, c.SubResourceClient.Create(ctx, obj, sub, opts...))
}

func (c verbCountingSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return c.writes.count(c.scheme, "update "+c.name, obj, c.SubResourceClient.Update(ctx, obj, opts...))
}

func (c verbCountingSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return c.writes.count(c.scheme, "patch "+c.name, obj, c.SubResourceClient.Patch(ctx, obj, patch, opts...))
}

func (c verbCountingSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return c.writes.count(c.scheme, "apply "+c.name, obj, c.SubResourceClient.Apply(ctx, obj, opts...))
}
