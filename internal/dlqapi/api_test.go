package dlqapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	nsA = "shop"
	nsB = "other"
	// nsIntruder holds a queue naming the same topic, which the operator does not manage for it.
	nsIntruder = "intruder"
	queueName  = "orders-dlq"
	total      = 10000
)

// TestDeadLettersAPI serves the API from this process behind envtest's kube-apiserver configured
// for aggregation (an APIService whose Service is an ExternalName for localhost), with 10,000 dead
// letters in kfake, and reads it with the real kubectl as an administrator and as two
// client-certificate users.
func TestDeadLettersAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	kf := newKafka(t, "orders.dlq", 3, total, 64)
	// A value above 64 KiB: cut in lists, whole on get.
	big := kf.record(total, 0, 70<<10)
	res, err := kf.f.ProduceRecords(ctx, kf.conn, kf.topic, []kafka.ProduceRecord{big})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	bigName := dlqapi.Name(queueName, deadletters.ID{Partition: 0, Offset: res[0].Offset})

	env, err := envtestutil.StartAggregated()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	// The topic ledger, as the operator keeps it: each of these queues manages the topic (the API
	// serves only such queues' records).
	ledger := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: envtestutil.OperatorNamespace}
	for _, ns := range []string{nsA, nsB} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: queueName}}
		q.Spec.Topic.Name = retryv1alpha1.TopicName(kf.topic)
		q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: kf.conn.BootstrapServers}
		must(t, c.Create(ctx, q))
		must(t, ledger.Record(ctx, q, kf.topic))
	}

	// The route: an ExternalName Service for localhost (the API server refuses loopback
	// Endpoints) and the APIService, as make dev does.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := int32(lis.Addr().(*net.TCPAddr).Port)
	const svcName = "retry-operator-deadletters-api"
	must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: svcName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromInt32(port)}}}}))
	must(t, c.Create(ctx, apiService(envtestutil.OperatorNamespace, svcName, port)))

	srv := dlqapi.NewServer(dlqapi.Options{
		Listener: lis,
		Config:   env.Config,
		Certs:    &dlqapi.CertManager{Client: c, Namespace: envtestutil.OperatorNamespace, SecretName: "retry-operator-deadletters-api-tls", Service: svcName},
		Storage: &dlqapi.Storage{
			Queues: &dlqapi.ClientQueues{Reader: c, Secrets: c, Defaults: kafkaspec.Defaults{},
				Ledger: &kafkaspec.Ledger{Reader: c, Namespace: envtestutil.OperatorNamespace}},
			Kafka: kf.f,
		},
	})
	// The server runs as cmd/manager runs it, in a manager with leader election, on a replica that
	// is not the leader (another holds the lease): every replica serves, since an unavailable
	// aggregated API blocks namespace deletion.
	const leaseName = "retry-operator-test-leader"
	must(t, c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("the-leader"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}}))
	mgr, err := manager.New(env.Config, manager.Options{LeaderElection: true, LeaderElectionID: leaseName,
		LeaderElectionNamespace: envtestutil.OperatorNamespace, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	must(t, err)
	must(t, mgr.Add(srv))
	srvCtx, stopSrv := context.WithCancel(logf.IntoContext(ctx, testr.New(t)))
	srvDone := make(chan error, 1)
	go func() { srvDone <- mgr.Start(srvCtx) }()
	defer func() { stopSrv(); <-srvDone }()
	waitAvailable(ctx, t, c)
	t.Run("served on every replica, the leader's or not", func(t *testing.T) {
		select {
		case <-mgr.Elected():
			t.Fatal("the manager serving the API was elected: the test shows nothing of a replica that is not the leader")
		default:
		}
	})

	api := "deadletters.retryops.dev"
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := env.Kubectl(nil, args...)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return out
	}
	name := func(id deadletters.ID) string { return dlqapi.Name(queueName, id) }

	t.Run("a label selector lists exactly what a scan of the topic finds", func(t *testing.T) {
		for _, reason := range []string{headers.ReasonNonRetriable, headers.ReasonMaxRetriesExceeded} {
			want := kf.scan(t, func(e deadletters.Entry) bool { return e.Reason == reason })
			out := kubectl("get", "deadletters."+api, "-n", nsA, "-l", dlv1.LabelReason+"="+reason, "-o", "name")
			got := names(out)
			if len(got) != len(want) {
				t.Fatalf("reason %s: kubectl listed %d, the scan found %d", reason, len(got), len(want))
			}
			for id := range want {
				if !got[name(id)] {
					t.Fatalf("reason %s: %s missing", reason, name(id))
				}
			}
			t.Logf("reason=%s: %d dead letters, as the scan", reason, len(got))
		}
	})

	t.Run("paging by 20 has no gap nor repeat", func(t *testing.T) {
		reason := headers.ReasonNonRetriable
		want := kf.scan(t, func(e deadletters.Entry) bool { return e.Reason == reason })
		// kubectl follows the continue tokens itself.
		out := kubectl("get", "deadletters", "-n", nsA, "-l", dlv1.LabelReason+"="+reason, "--chunk-size=20", "-o", "name")
		if got := names(out); len(got) != len(want) || strings.Count(out, "\n") != len(want) {
			t.Fatalf("--chunk-size=20 listed %d lines, %d distinct, want %d", strings.Count(out, "\n"), len(got), len(want))
		}
		// The raw API: limit=20 and continue, page by page, over the whole queue.
		seen, pages, cont := map[string]bool{}, 0, ""
		for {
			path := "/apis/" + api + "/v1alpha1/namespaces/" + nsA + "/deadletters?limit=20&labelSelector=" + dlv1.LabelReason + "%3D" + reason
			if cont != "" {
				path += "&continue=" + cont
			}
			var list dlv1.DeadLetterList
			must(t, json.Unmarshal([]byte(kubectl("get", "--raw", path)), &list))
			if len(list.Items) > 20 {
				t.Fatalf("page of %d", len(list.Items))
			}
			for _, d := range list.Items {
				if seen[d.Name] {
					t.Fatalf("%s repeated on page %d", d.Name, pages)
				}
				seen[d.Name] = true
			}
			pages++
			if cont = list.Continue; cont == "" {
				break
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("raw paging saw %d, want %d", len(seen), len(want))
		}
		t.Logf("%d pages of 20 for %d dead letters", pages, len(seen))
		if out, err := env.Kubectl(nil, "get", "--raw", "/apis/"+api+"/v1alpha1/namespaces/"+nsA+"/deadletters?limit=20&continue=bm90LWEtdG9rZW4"); err == nil || !strings.Contains(out, "continue token") {
			t.Fatalf("a forged continue token: %v %s", err, out)
		}
	})

	t.Run("the table has the columns and a time range bounds the list", func(t *testing.T) {
		since := kf.t0.Add(100 * time.Second).Format(time.RFC3339)
		until := kf.t0.Add(110 * time.Second).Format(time.RFC3339)
		out := kubectl("get", "deadletters", "-n", nsA, "--field-selector", "since="+since+",until="+until)
		t.Logf("\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if fields := strings.Fields(lines[0]); !slices.Equal(fields, []string{"NAME", "QUEUE", "PIPELINE", "REASON", "ERROR", "ATTEMPTS", "STATE", "AGE"}) {
			t.Fatalf("header %q", lines[0])
		}
		if len(lines) != 11 {
			t.Fatalf("%d rows between %s and %s, want 10", len(lines)-1, since, until)
		}
	})

	t.Run("get shows the whole record with its headers and its state after an action", func(t *testing.T) {
		id := deadletters.ID{Partition: 1, Offset: 7}
		st := deadletters.State{State: retryv1alpha1.DeadLetterResolved, Note: "fixed upstream in INC-42", RequestedBy: "alice",
			Action: deadletters.ActionRef{Namespace: nsA, Name: "resolve-42", UID: "u-42"}, Time: time.Now().UTC().Truncate(time.Second)}
		_, err := deadletters.WriteStates(ctx, kf.f, kf.conn, kf.topic, []deadletters.StateUpdate{{ID: id, State: st}})
		must(t, err)
		out := kubectl("get", "deadletter", name(id), "-n", nsA, "-o", "yaml")
		t.Logf("\n%s", out)
		var d dlv1.DeadLetter
		must(t, yaml.Unmarshal([]byte(out), &d))
		if d.State.State != dlv1.StateResolved || d.State.Note != st.Note || d.State.RequestedBy != "alice" || d.State.Action == nil || d.State.Action.Name != "resolve-42" {
			t.Fatalf("state %+v", d.State)
		}
		if d.Labels[dlv1.LabelState] != "Resolved" || len(d.Headers) != 14 || d.Headers[0].Name != "trace-id" || d.Original == nil || d.Attempts == 0 || d.Value == nil {
			t.Fatalf("object %+v", d)
		}
		// The state label selects it.
		if got := names(kubectl("get", "deadletters", "-n", nsA, "-l", dlv1.LabelState+"=Resolved", "-o", "name")); len(got) != 1 || !got[name(id)] {
			t.Fatalf("state=Resolved listed %v", got)
		}
		// A value above 64 KiB: whole on get, cut in a list.
		var whole dlv1.DeadLetter
		must(t, json.Unmarshal([]byte(kubectl("get", "deadletter", bigName, "-n", nsA, "-o", "json")), &whole))
		if whole.Value.Truncated || int64(len(whole.Value.Data)) != whole.Value.Size || whole.Value.Size <= dlv1.MaxListPayloadBytes {
			t.Fatalf("get: value of %d bytes, size %d, truncated %v", len(whole.Value.Data), whole.Value.Size, whole.Value.Truncated)
		}
		var list dlv1.DeadLetterList
		must(t, json.Unmarshal([]byte(kubectl("get", "--raw", "/apis/"+api+"/v1alpha1/namespaces/"+nsA+"/deadletters?fieldSelector=metadata.name%3D"+bigName)), &list))
		if len(list.Items) != 1 || !list.Items[0].Value.Truncated || len(list.Items[0].Value.Data) != dlv1.MaxListPayloadBytes {
			t.Fatalf("list: %d items", len(list.Items))
		}
		if out, err := env.Kubectl(nil, "get", "deadletter", queueName+".2.999999", "-n", nsA); err == nil || !strings.Contains(out, "NotFound") {
			t.Fatalf("a missing dead letter: %v %s", err, out)
		}
	})

	t.Run("a queue naming a topic it does not manage shows none of its records", func(t *testing.T) {
		// Another tenant's queue on the same topic, which the operator neither created nor adopted for
		// it (no ledger record): the operator reads none of its records, nor may the API.
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsIntruder}}))
		q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: nsIntruder, Name: "borrowed"}}
		q.Spec.Topic.Name = retryv1alpha1.TopicName(kf.topic)
		q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: kf.conn.BootstrapServers}
		must(t, c.Create(ctx, q))
		out, err := env.Kubectl(nil, "get", "deadletters", "-n", nsIntruder, "-o", "name")
		t.Logf("list: %v\n%s", err, out)
		if err != nil || len(names(out)) != 0 || !strings.Contains(out, "does not manage its topic") {
			t.Fatalf("list in %s: %d dead letters of a topic the queue does not manage (err %v), want none and a warning", nsIntruder, len(names(out)), err)
		}
		one := dlqapi.Name("borrowed", deadletters.ID{Partition: 0, Offset: 1})
		if out, err := env.Kubectl(nil, "get", "deadletter", one, "-n", nsIntruder, "-o", "name"); err == nil || !strings.Contains(out, "NotFound") || !strings.Contains(out, "does not manage its topic") {
			t.Fatalf("get %s: %v %s", one, err, out)
		} else {
			t.Logf("get: %s", strings.TrimSpace(out))
		}
	})

	t.Run("RBAC: view cannot read dead letters; edit in A reads A, not B", func(t *testing.T) {
		applyRBAC(ctx, t, c)
		viewer := userKubeconfig(t, env, "vera")
		editor := userKubeconfig(t, env, "eddie")
		must(t, c.Create(ctx, roleBinding(nsA, "vera-view", "view", "vera")))
		must(t, c.Create(ctx, roleBinding(nsA, "eddie-edit", "edit", "eddie")))
		// Wait until RBAC sees the bindings (the DLQ CRD read is granted by edit too).
		waitFor(ctx, t, "eddie may list deadletters in A", func() bool {
			_, err := env.Kubectl(nil, "--kubeconfig", editor, "get", "deadletters", "-n", nsA, "-l", dlv1.LabelReason+"=none")
			return err == nil
		})
		if out, err := env.Kubectl(nil, "--kubeconfig", viewer, "get", "deadletters", "-n", nsA); err == nil || !strings.Contains(out, "Forbidden") {
			t.Fatalf("view: %v %s", err, out)
		} else {
			t.Logf("view in A: %s", strings.TrimSpace(out))
		}
		out, err := env.Kubectl(nil, "--kubeconfig", editor, "get", "deadletters", "-n", nsA, "-l", dlv1.LabelReason+"="+headers.ReasonUndeliverable, "-o", "name")
		must(t, err)
		if len(names(out)) != len(kf.scan(t, func(e deadletters.Entry) bool { return e.Reason == headers.ReasonUndeliverable })) {
			t.Fatalf("edit in A listed %d", len(names(out)))
		}
		if out, err := env.Kubectl(nil, "--kubeconfig", editor, "get", "deadletters", "-n", nsB); err == nil || !strings.Contains(out, "Forbidden") {
			t.Fatalf("edit in B: %v %s", err, out)
		} else {
			t.Logf("edit in B: %s", strings.TrimSpace(out))
		}
	})

	t.Run("deleting a namespace completes while the API is served", func(t *testing.T) {
		cm, err := env.StartControllerManager()
		must(t, err)
		defer cm.Stop()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
		must(t, c.Create(ctx, ns))
		must(t, c.Delete(ctx, ns))
		waitFor(ctx, t, "namespace doomed gone", func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}))
		})
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// names parses kubectl -o name output into the set of object names.
func names(out string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "Warning:") {
			continue
		}
		if _, n, ok := strings.Cut(l, "/"); ok {
			m[n] = true
		}
	}
	return m
}

func apiService(ns, svc string, port int32) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": dlqapi.APIServiceName},
		"spec": map[string]any{"group": dlv1.GroupName, "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": ns, "name": svc, "port": int64(port)}},
	}}
	return u
}

// waitAvailable waits for the APIService's Available condition.
func waitAvailable(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	var last string
	waitFor(ctx, t, "APIService Available", func() bool {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiregistration.k8s.io/v1")
		u.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: dlqapi.APIServiceName}, u); err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprint(m["reason"], ": ", m["message"])
				return m["status"] == "True"
			}
		}
		return false
	}, func() string { return last })
}

// waitFor waits (gomega's Eventually, a minute at most) until cond holds; detail says why not.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	NewWithT(t).Eventually(ctx, cond).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), func() string {
		msg := "waiting for " + what
		for _, d := range detail {
			msg += " " + d()
		}
		return msg
	})
}

// applyRBAC creates config/rbac's deadletters-reader ClusterRole and aggregates the ClusterRoles
// as kube-controller-manager's clusterrole-aggregation controller does (envtest runs no such
// controller): every ClusterRole with an aggregationRule gets the rules of the roles its selectors
// match. view has no deadletters rule after it; admin and edit do.
func applyRBAC(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "deadletters_reader_role.yaml"))
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(b, &role))
	must(t, c.Create(ctx, &role))
	var all rbacv1.ClusterRoleList
	must(t, c.List(ctx, &all))
	for i := range all.Items {
		agg := &all.Items[i]
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			must(t, err)
			for _, r := range all.Items {
				if r.Name != agg.Name && s.Matches(labels.Set(r.Labels)) {
					rules = append(rules, r.Rules...)
				}
			}
		}
		agg.Rules = rules
		must(t, c.Update(ctx, agg))
	}
	var view rbacv1.ClusterRole
	must(t, c.Get(ctx, client.ObjectKey{Name: "view"}, &view))
	for _, r := range view.Rules {
		if slices.Contains(r.APIGroups, dlv1.GroupName) {
			t.Fatalf("view grants %v", r)
		}
	}
}

func roleBinding(ns, name, clusterRole, user string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
}

// userKubeconfig writes a kubeconfig for a client-certificate user of envtest and returns its path.
func userKubeconfig(t *testing.T, env *envtestutil.Env, name string) string {
	t.Helper()
	u, err := env.Environment.AddUser(envtest.User{Name: name}, nil)
	must(t, err)
	b, err := u.KubeConfig()
	must(t, err)
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	must(t, os.WriteFile(path, b, 0o600))
	return path
}

var _ = strconv.Itoa
