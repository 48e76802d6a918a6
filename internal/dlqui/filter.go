package dlqui

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Filter selects dead letters: in a list of the deadletters API (ListOptions) and in the
// DeadLetterAction created from the same filter (Selector), the same dead letters. It is the one
// place where both are built, for the console and for kubectl dlq: the list selects with the API's
// exact-match field selectors (reason, errorType, pipeline, queue), never with the sanitised and cut
// label values, because an action's selector matches the values whole. Empty fields select
// everything; several values of one field select any of them.
type Filter struct {
	Reasons    []string
	ErrorTypes []string
	// Pipelines are ConsumerPipeline names in the namespace, or "<namespace>/<name>".
	Pipelines []string
	States    []string
	// Since is inclusive, Until exclusive; zero means unbounded. Both are used to the second (as
	// an action's selector stores them).
	Since, Until time.Time
}

// Empty reports whether f selects every dead letter.
func (f Filter) Empty() bool {
	return len(f.Reasons)+len(f.ErrorTypes)+len(f.Pipelines)+len(f.States) == 0 && f.Since.IsZero() && f.Until.IsZero()
}

// QualifiedPipeline is a pipeline a user names as a dead letter names it: a bare NAME is the
// ConsumerPipeline of that name in namespace ("<namespace>/NAME"); anything with a '/' is taken as
// written, matched whole. Prefixing every value would make the dead letters whose pipeline header
// names another namespace, or has more parts (a producer wrote it), impossible to select; taking a
// bare name as written would select nothing, as every pipeline header has a namespace.
func QualifiedPipeline(namespace, p string) string {
	if strings.Contains(p, "/") {
		return p
	}
	return namespace + "/" + p
}

// ShortPipeline is how a pipeline is shown: its bare name when it is a ConsumerPipeline's of namespace
// (a DNS-1123 subdomain after "<namespace>/"), else whole; QualifiedPipeline(namespace,
// ShortPipeline(namespace, p)) is p for any p with a '/'.
func ShortPipeline(namespace, p string) string {
	if name, ok := strings.CutPrefix(p, namespace+"/"); ok && len(validation.IsDNS1123Label(namespace)) == 0 &&
		len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return p
}

// Selector is f as a DeadLetterAction's selector, pipelines qualified with namespace.
func (f Filter) Selector(namespace string) retryv1alpha1.DeadLetterSelector {
	var s retryv1alpha1.DeadLetterSelector
	for _, r := range f.Reasons {
		s.Reasons = append(s.Reasons, retryv1alpha1.DeadLetterName(r))
	}
	for _, e := range f.ErrorTypes {
		s.ErrorTypes = append(s.ErrorTypes, retryv1alpha1.DeadLetterName(e))
	}
	for _, p := range f.Pipelines {
		s.Pipelines = append(s.Pipelines, retryv1alpha1.DeadLetterName(QualifiedPipeline(namespace, p)))
	}
	for _, st := range f.States {
		s.States = append(s.States, retryv1alpha1.DeadLetterState(st))
	}
	if !f.Since.IsZero() {
		s.After = timePtr(f.Since.Truncate(time.Second))
	}
	if !f.Until.IsZero() {
		s.Before = timePtr(f.Until.Truncate(time.Second))
	}
	return s
}

// ListOptions are the deadletters API list options selecting what Selector(namespace) selects in
// queue: the exact field selectors queue, reason, errorType and pipeline (several values of one
// field: any of them), since and until, and the state label (state names are label values as they
// are).
func (f Filter) ListOptions(namespace, queue string) metav1.ListOptions {
	var sels []fields.Selector
	add := func(field string, values ...string) {
		for _, v := range values {
			sels = append(sels, fields.OneTermEqualSelector(field, v))
		}
	}
	add(dlv1.FieldQueue, queue)
	add(dlv1.FieldReason, f.Reasons...)
	add(dlv1.FieldErrorType, f.ErrorTypes...)
	for _, p := range f.Pipelines {
		add(dlv1.FieldPipeline, QualifiedPipeline(namespace, p))
	}
	if !f.Since.IsZero() {
		add(dlv1.FieldSince, f.Since.UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		add(dlv1.FieldUntil, f.Until.UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	opts := metav1.ListOptions{FieldSelector: fields.AndSelectors(sels...).String()}
	if len(f.States) > 0 {
		op := selection.Equals
		if len(f.States) > 1 {
			op = selection.In
		}
		// State names are valid label values; a wrong one selects nothing.
		if r, err := labels.NewRequirement(dlv1.LabelState, op, f.States); err == nil {
			opts.LabelSelector = labels.NewSelector().Add(*r).String()
		} else {
			opts.LabelSelector = dlv1.LabelState + "=Invalid"
		}
	}
	return opts
}
