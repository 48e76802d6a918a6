package ruleapi

import (
	"context"
	"fmt"
	"reflect"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/apply"
)

// Rules are the two renderings of one set of alert rules.
type Rules struct {
	// Rule renders the PrometheusRule; ConfigMap the ConfigMap holding the same rule file. An error
	// of either is returned as it is (a *render.SpecError for a mistake in the spec).
	Rule      func() (*unstructured.Unstructured, error)
	ConfigMap func() (*corev1.ConfigMap, error)
	// Key is the name and namespace both share.
	Key client.ObjectKey
}

// Apply applies owner's alert rules as a PrometheusRule when the kind is served, and then deletes
// the ConfigMap of the same name that held them before; otherwise as a ConfigMap. It returns what
// was applied, in words (the message of a True AlertsReady), or the error of the rendering or of
// apply.Owned (an *apply.ConflictError for a name taken by another owner).
func (a *API) Apply(ctx context.Context, c client.Client, owner client.Object, objs Rules) (string, error) {
	served, err := a.Served()
	if err != nil {
		return "", err
	}
	log := ctrl.LoggerFrom(ctx).WithValues(logKey(owner), klog.KObj(owner))
	if !served {
		cm, err := objs.ConfigMap()
		if err != nil {
			return "", err
		}
		_, applied, err := apply.Owned(ctx, c, owner, cm, apply.Cached(ctx, c, objs.Key, &corev1.ConfigMap{}))
		if err != nil {
			return "", err
		}
		if applied {
			log.Info("Applied alert rules", "configMap", objs.Key.Name)
		}
		return fmt.Sprintf("alert rules in ConfigMap %s (the PrometheusRule kind is not served: load the rule file into Prometheus)", objs.Key.Name), nil
	}
	pr, err := objs.Rule()
	if err != nil {
		return "", err
	}
	// When the cache cannot tell, the rules are applied without comparing.
	var live client.Object
	if u, err := a.live(ctx, objs.Key); err == nil && u != nil {
		live = u
	}
	if _, applied, err := apply.Owned(ctx, c, owner, pr, live); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// The CRD went between the lookup and the apply: not served until an event about it says otherwise.
			a.forget()
		}
		return "", err
	} else if applied {
		log.Info("Applied alert rules", "prometheusRule", objs.Key.Name)
	}
	// The ConfigMap that held the rules before the kind was served.
	old := &corev1.ConfigMap{}
	if err := c.Get(ctx, objs.Key, old); err == nil && metav1.IsControlledBy(old, owner) {
		if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return "", err
		}
		log.Info("Deleted alert ConfigMap", "configMap", objs.Key.Name, "replacedBy", "PrometheusRule")
	} else if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	return fmt.Sprintf("alert rules in PrometheusRule %s", objs.Key.Name), nil
}

// logKey is the log key of an owner: its kind in lower camel case ("deadLetterQueue").
func logKey(o client.Object) string {
	t := reflect.TypeOf(o)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	r := []rune(t.Name())
	if len(r) == 0 {
		return "owner"
	}
	r[0] = unicode.ToLower(r[0])
	return string(r)
}
