package controllers

import (
	"context"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// What the manager caches, and why (least privilege and memory):
//
//   - Secrets are never cached, nor watched: the Kafka credentials of a resource's spec.kafka are
//     read with an uncached GET (the manager's API reader, see secretsFromAPI) each time the
//     connection is resolved, which is every resync (Options.StatusRefreshInterval, 30s by default)
//     and every reconcile. So the ClusterRole grants only get on Secrets: no list or watch, and no
//     Secret of the cluster sits in the manager's memory. A rotated password is picked up at the next
//     resync instead of at once; a resource naming Secrets resyncs even while stalled (see
//     resyncWhileStalled), so a Secret fixed after a spec error is noticed too. A metadata-only
//     watch would still need list and watch on every Secret of the cluster, hence none.
//   - The kinds the operator owns (ConfigMaps, Deployments, ServiceAccounts, Roles, RoleBindings)
//     are cached only with its label app.kubernetes.io/managed-by=retry-operator, which every child
//     carries (internal/render), and PrometheusRules the same way (internal/ruleapi). An object of a
//     child's name without the label is not seen: apply.Owned checks such a name with an uncached
//     GET (hence get on the owned kinds), a read rather than the dry-run create it once was: a
//     child of the operator's whose label was removed is applied again, anything else is a
//     ChildConflict, never adopted.
//   - Reads of a kind without an informer fail (ReaderFailOnMissingInformer) instead of starting a
//     cluster-wide informer behind the operator's back.
//   - With namespaces (--watch-namespaces), every namespaced kind is cached in those namespaces only.
//   - Every cached object is stored without its managedFields and without kubectl's last-applied
//     annotation (stripUnread): nothing reads them from the cache, and on server-side-applied
//     children they are a large part of each object (memory at 10,000 resources).
//     apply.Owned compares only the fields its desired object sets, which never include either.
//   - The alert-rule ConfigMaps (label retry.retryops.dev/alert-rules=true, rule files only) are
//     cached without their data, the rendered rule files, with a digest of it instead (apply.DropData): the manager only
//     compares that data with what it renders (apply.Owned), never reads it; at 10,000 resources it
//     was the largest part of the cache. Every other ConfigMap keeps its data: the manager reads the
//     dispatcher config (keptDraining), the circuit reports (readCircuit) and the topic ledgers.

// CacheOptions are the manager cache's options: the owned kinds by label only, no lazily started
// informers, and, when namespaces is not empty, only those namespaces (cluster-scoped kinds, the
// CRDs, are not affected). Pass the same namespaces in Options.WatchNamespaces.
func CacheOptions(namespaces []string) cache.Options {
	managed := ManagedSelector()
	opts := cache.Options{
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            StripUnread,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:                      {Label: managed},
			&appsv1.Deployment{}:                     {Label: managed},
			&corev1.ServiceAccount{}:                 {Label: managed},
			&rbacv1.Role{}:                           {Label: managed},
			&rbacv1.RoleBinding{}:                    {Label: managed},
			&autoscalingv2.HorizontalPodAutoscaler{}: {Label: managed},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// StripUnread is the cache's transform: it drops what no reader of the cache uses, the
// managedFields and kubectl's last-applied-configuration annotation (a copy of the whole object
// on anything once kubectl-applied: queues, pipelines, policies from GitOps), and the data of the
// alert-rule ConfigMaps, replaced by its digest (apply.DropData). Objects that are not
// metav1.Object pass unchanged.
func StripUnread(obj any) (any, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		if cm.Labels[render.LabelAlertRules] == "true" && onlyRuleFiles(cm.Data) {
			apply.DropData(cm)
		} else {
			apply.ForgetDigest(cm)
		}
	}
	o.SetManagedFields(nil)
	if a := o.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			if len(a) == 0 {
				a = nil
			}
			o.SetAnnotations(a)
		}
	}
	return obj, nil
}

// onlyRuleFiles reports whether every key of data names a rule file (render.RuleFileKey). A tenant
// can label any ConfigMap of their namespace as alert rules, the dispatcher config and the circuit
// reports the manager reads included: those keep their data.
func onlyRuleFiles(data map[string]string) bool {
	for k := range data {
		if !strings.HasSuffix(k, ".rules.yaml") {
			return false
		}
	}
	return true
}

// ManagedSelector selects the objects the operator makes: app.kubernetes.io/managed-by=retry-operator.
func ManagedSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.LabelManagedByValue})
}

// secretsFromAPI is a client that reads Secrets from the API server (uncached) and everything else
// from the cache: the controllers resolve Kafka credentials through it, so that a Secret read never
// starts an informer (which would need list and watch on every Secret).
type secretsFromAPI struct {
	client.Client
	api client.Reader
}

// Get reads a Secret from the API server, anything else from the cache.
func (c secretsFromAPI) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return c.api.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// List lists Secrets from the API server (which the operator's role refuses: it never lists them),
// anything else from the cache.
func (c secretsFromAPI) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.SecretList); ok {
		return c.api.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}

// UncachedReader reads from the API server: apply.Owned checks with it an object of a child's name
// the cache does not show (a child of the operator's whose label was removed is applied again).
func (c secretsFromAPI) UncachedReader() client.Reader { return c.api }

// resyncWhileStalled is the requeue of a resource whose reconcile met only user errors, which
// otherwise waits for a spec change: a resource whose spec.kafka names Secrets is looked at again
// after interval, since a change to a Secret is no event (Secrets are not watched).
func resyncWhileStalled(secrets []string, interval time.Duration) time.Duration {
	if len(secrets) == 0 {
		return 0
	}
	return interval
}
