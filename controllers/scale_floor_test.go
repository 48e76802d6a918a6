package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// BenchmarkFloor500DLQsAnd500Pipelines is the floor under BenchmarkReconcile500DLQsAnd500Pipelines:
// on an API server of its own, a bare client writes what the operator leaves behind at Ready (the
// children, the topic-ledger records), each object once and with no read, no Kafka, no event and no logic: the run's queues, pipelines and
// policies, each child the operator made for one queue and one pipeline copied for every other, and
// one status write per resource. What the API server and etcd take for that, on the same machine,
// is what any operator that makes these objects must spend; s-to-ready over s-floor is ours against
// that bare alternative.
func BenchmarkFloor500DLQsAnd500Pipelines(b *testing.B) {
	benchmarkFloor(b, scaleSpec{dlqs: 500, pipelines: 500, sharedPolicies: 4})
}

// BenchmarkFloor5000DLQsAnd5000Pipelines is BenchmarkFloor500DLQsAnd500Pipelines with 10,000.
func BenchmarkFloor5000DLQsAnd5000Pipelines(b *testing.B) {
	benchmarkFloor(b, scaleSpec{dlqs: 5000, pipelines: 5000, sharedPolicies: 4})
}

// BenchmarkFloorMinimal500DLQsAnd500Pipelines is the floor under any design of the operator, however
// few objects it made: each resource, its status and, for a pipeline, only what runs its consumers
// (its Deployment and the dispatcher ConfigMap the Deployment mounts). No topic ledger, no alert
// rules, no circuit report: what a user creates and reads back as Ready, and the pods' spec.
func BenchmarkFloorMinimal500DLQsAnd500Pipelines(b *testing.B) {
	benchmarkFloor(b, scaleSpec{dlqs: 500, pipelines: 500, sharedPolicies: 4, minimalFloor: true})
}

// BenchmarkFloorMinimal5000DLQsAnd5000Pipelines is BenchmarkFloorMinimal500DLQsAnd500Pipelines with
// 10,000.
func BenchmarkFloorMinimal5000DLQsAnd5000Pipelines(b *testing.B) {
	benchmarkFloor(b, scaleSpec{dlqs: 5000, pipelines: 5000, sharedPolicies: 4, minimalFloor: true})
}

// minimal keeps of t only what BenchmarkFloorMinimal500DLQsAnd500Pipelines writes: the Deployments
// and the dispatcher ConfigMaps among the children, no ledger record.
func (t *floorTemplate) minimal() {
	for kind, cs := range t.children {
		var kept []*unstructured.Unstructured
		for _, c := range cs {
			if c.GetKind() == "Deployment" || (c.GetKind() == "ConfigMap" && c.GetLabels()[render.LabelComponent] == "config") {
				kept = append(kept, c)
			}
		}
		t.children[kind] = kept
	}
	t.ledger = map[string]*unstructured.Unstructured{}
}

// floorKinds are the kinds of the children the operator makes in a resource's namespace.
var floorKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
}

// floorTemplate is what the operator left at Ready for one policy, one queue and one pipeline:
// their children by the kind of their owner, their topic-ledger records, and their status by kind.
type floorTemplate struct {
	children map[string][]*unstructured.Unstructured
	ledger   map[string]*unstructured.Unstructured
	status   map[string]any
	names    map[string]string    // the template's resource name, by kind
	uids     map[string]types.UID // and its UID
}

func benchmarkFloor(b *testing.B, spec scaleSpec) {
	tmpl := floorTemplate{children: map[string][]*unstructured.Unstructured{}, ledger: map[string]*unstructured.Unstructured{},
		status: map[string]any{}, names: map[string]string{}, uids: map[string]types.UID{}}
	runScale(b, scaleSpec{dlqs: 1, pipelines: 1, isolated: true, readyOnly: true, atReady: tmpl.read}, 30*time.Second)
	if spec.minimalFloor {
		tmpl.minimal()
	}
	for kind, cs := range tmpl.children {
		for _, c := range cs {
			b.Logf("floor: a %s has %s %s", kind, c.GetKind(), c.GetName())
		}
	}
	for kind, l := range tmpl.ledger {
		b.Logf("floor: a %s has its topic-ledger record in %s", kind, l.GetNamespace())
	}
	for b.Loop() {
		ownMemoryLimitOnly()
		own, err := envtestutil.Start()
		if err != nil {
			b.Fatal(err)
		}
		cfg := rest.CopyConfig(own.Config)
		cfg.QPS, cfg.Burst = 1000, 2000
		api, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		namespaces := []string{"floor"}
		for _, l := range tmpl.ledger {
			namespaces = append(namespaces, l.GetNamespace())
		}
		for _, name := range namespaces {
			ns := &unstructured.Unstructured{}
			ns.SetAPIVersion("v1")
			ns.SetKind("Namespace")
			ns.SetName(name)
			if err := api.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		}
		var writes atomic.Int64
		cpuStart := cpuSeconds()
		start := time.Now()
		writeAll(ctx, b, scaleObjects("floor", spec), func(ctx context.Context, o client.Object) error {
			n, err := tmpl.write(ctx, api, o)
			writes.Add(int64(n))
			return err
		})
		took, cpu := time.Since(start), cpuSince(cpuStart)
		_ = own.Stop()
		resources := float64(spec.dlqs + spec.pipelines)
		b.Logf("floor: %d writes in %v; CPU seconds %v", writes.Load(), took.Round(time.Millisecond), cpu)
		b.ReportMetric(took.Seconds(), "s-floor")
		b.ReportMetric(float64(writes.Load()), "k8s-writes-floor")
		b.ReportMetric(float64(writes.Load())/resources, "k8s-writes-floor/resource")
		b.ReportMetric(cpu["kube-apiserver"], "cpu-s-apiserver-floor")
		b.ReportMetric(cpu["etcd"], "cpu-s-etcd-floor")
	}
}

// read keeps the policy, queue and pipeline of ns (the only ones there) with their status, and the
// children each of them owns.
func (t *floorTemplate) read(ctx context.Context, api client.Client, ns string) {
	for _, kind := range []string{"RetryPolicy", "DeadLetterQueue", "ConsumerPipeline"} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: "retry.retryops.dev", Version: "v1alpha1", Kind: kind + "List"})
		if err := api.List(ctx, l, client.InNamespace(ns)); err != nil || len(l.Items) != 1 {
			panic(fmt.Sprintf("floor template: %d %s: %v", len(l.Items), kind, err))
		}
		t.status[kind], t.names[kind], t.uids[kind] = l.Items[0].Object["status"], l.Items[0].GetName(), l.Items[0].GetUID()
	}
	records := &unstructured.UnstructuredList{}
	records.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	if err := api.List(ctx, records, client.HasLabels{kafkaspec.LedgerLabel}); err != nil {
		panic(err)
	}
	for i := range records.Items {
		for kind, uid := range t.uids {
			if strings.HasSuffix(records.Items[i].GetName(), string(uid)) {
				t.ledger[kind] = &records.Items[i]
			}
		}
	}
	for _, gvk := range floorKinds {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := api.List(ctx, l, client.InNamespace(ns)); err != nil {
			panic(err)
		}
		for i := range l.Items {
			c := &l.Items[i]
			ref := metav1.GetControllerOf(c)
			if ref == nil {
				continue // the namespace's own: its default ServiceAccount, the root CA ConfigMap
			}
			t.children[ref.Kind] = append(t.children[ref.Kind], c)
		}
	}
}

// write creates o, the children its template has (renamed for o, owned by it), then writes its
// status as the template's: the writes it made.
func (t *floorTemplate) write(ctx context.Context, api client.Client, o client.Object) (int, error) {
	gvk, err := apiutil.GVKForObject(o, api.Scheme())
	if err != nil {
		return 0, err
	}
	if err := api.Create(ctx, o); err != nil {
		return 0, fmt.Errorf("creating %s: %w", o.GetName(), err)
	}
	n := 1
	from, to := t.names[gvk.Kind], o.GetName()
	for _, c := range t.children[gvk.Kind] {
		u := copyAs(c, strings.ReplaceAll(c.GetName(), from, to), o.GetNamespace())
		ref := *metav1.GetControllerOf(c)
		ref.Name, ref.UID = to, o.GetUID()
		u.SetOwnerReferences([]metav1.OwnerReference{ref})
		if err := api.Create(ctx, u); err != nil {
			return n, fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		n++
	}
	if l := t.ledger[gvk.Kind]; l != nil {
		u := copyAs(l, strings.ReplaceAll(l.GetName(), string(t.uids[gvk.Kind]), string(o.GetUID())), l.GetNamespace())
		if err := api.Create(ctx, u); err != nil {
			return n, fmt.Errorf("creating the ledger record of %s: %w", o.GetName(), err)
		}
		n++
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return n, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(gvk)
	u.Object["status"] = runtime.DeepCopyJSONValue(t.status[gvk.Kind])
	if err := api.Status().Update(ctx, u); err != nil {
		return n, fmt.Errorf("status of %s: %w", o.GetName(), err)
	}
	return n + 1, nil
}

// copyAs is a new object of src's kind, labels, annotations and content (no status), named name in
// namespace ns.
func copyAs(src *unstructured.Unstructured, name, ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(src.Object)}
	unstructured.RemoveNestedField(u.Object, "metadata")
	unstructured.RemoveNestedField(u.Object, "status")
	u.SetName(name)
	u.SetNamespace(ns)
	u.SetLabels(src.GetLabels())
	u.SetAnnotations(src.GetAnnotations())
	return u
}
