package render

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// RuleSet is a resource's alert rules and everything their two renderings are made of: a
// PrometheusRule (when the kind is served) or a ConfigMap holding the same rule file. Building it is
// cheap; encoding the rule file as YAML for the ConfigMap is not, so a caller that already applied a
// set can compare Digests instead of renderings.
type RuleSet struct {
	// Name and Namespace of both renderings.
	Name, Namespace string
	// Labels of both renderings (the ConfigMap adds LabelAlertRules).
	Labels map[string]string
	// Key is the ConfigMap's key of the rule file (RuleFileKey).
	Key string
	// File is the rule file.
	File RuleFile
}

// PipelineRuleSet is the pipeline's alert rules, named PipelineAlertsName.
func PipelineRuleSet(in *Inputs) (RuleSet, error) {
	f, err := AlertRules(in)
	if err != nil {
		return RuleSet{}, err
	}
	p := in.Pipeline
	return RuleSet{Name: PipelineAlertsName(p), Namespace: p.Namespace, Labels: withExtra(pipelineLabels(p, "alerts"), in.RuleLabels),
		Key: RuleFileKey(p.Namespace, p.Name, "consumerpipeline"), File: f}, nil
}

// DeadLetterQueueRuleSet is the queue's alert rules, named DeadLetterQueueAlertsName.
func DeadLetterQueueRuleSet(in *DeadLetterQueueInputs) (RuleSet, error) {
	f, err := DeadLetterQueueAlertRules(in)
	if err != nil {
		return RuleSet{}, err
	}
	d := in.DLQ
	return RuleSet{Name: DeadLetterQueueAlertsName(d), Namespace: d.Namespace, Labels: withExtra(dlqLabels(d), in.RuleLabels),
		Key: RuleFileKey(d.Namespace, d.Name, "deadletterqueue"), File: f}, nil
}

// ruleSetDigestVersion changes whenever what a RuleSet renders changes for the same set, so that a
// digest remembered by an older rendering never stands for a newer one.
const ruleSetDigestVersion = "1"

// Digest is a SHA-256 of everything the set renders from (encoding/json sorts map keys): two sets
// of equal digests render equal objects, in both forms.
func (s RuleSet) Digest() ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		Version string
		Set     RuleSet
	}{ruleSetDigestVersion, s})
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("render: digesting the rule set: %w", err)
	}
	return sha256.Sum256(b), nil
}

// PrometheusRule renders the set as a monitoring.coreos.com/v1 PrometheusRule.
func (s RuleSet) PrometheusRule() (*unstructured.Unstructured, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s.File)
	if err != nil {
		return nil, fmt.Errorf("render: converting the rule file: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(PrometheusRuleGVK)
	u.SetName(s.Name)
	u.SetNamespace(s.Namespace)
	u.SetLabels(cloneLabels(s.Labels))
	return u, nil
}

// ConfigMap renders the set as a ConfigMap holding the rule file under Key, labelled
// retry.retryops.dev/alert-rules=true.
func (s RuleSet) ConfigMap() (*corev1.ConfigMap, error) {
	data, err := s.File.YAML()
	if err != nil {
		return nil, fmt.Errorf("render: encoding the rule file: %w", err)
	}
	labels := cloneLabels(s.Labels)
	labels[LabelAlertRules] = "true"
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: labels},
		Data:       map[string]string{s.Key: string(data)},
	}, nil
}

// PrometheusRule renders the pipeline's rules as a monitoring.coreos.com/v1 PrometheusRule named
// PipelineAlertsName.
func PrometheusRule(in *Inputs) (*unstructured.Unstructured, error) {
	s, err := PipelineRuleSet(in)
	if err != nil {
		return nil, err
	}
	return s.PrometheusRule()
}

// AlertConfigMap renders the pipeline's rules as a ConfigMap named PipelineAlertsName holding the rule
// file under the key "<namespace>.<name>.consumerpipeline.rules.yaml", labelled
// retry.retryops.dev/alert-rules=true.
func AlertConfigMap(in *Inputs) (*corev1.ConfigMap, error) {
	s, err := PipelineRuleSet(in)
	if err != nil {
		return nil, err
	}
	return s.ConfigMap()
}

// DeadLetterQueuePrometheusRule renders the DLQ's rules as a PrometheusRule named
// DeadLetterQueueAlertsName.
func DeadLetterQueuePrometheusRule(in *DeadLetterQueueInputs) (*unstructured.Unstructured, error) {
	s, err := DeadLetterQueueRuleSet(in)
	if err != nil {
		return nil, err
	}
	return s.PrometheusRule()
}

// DeadLetterQueueAlertConfigMap renders the DLQ's rules as a ConfigMap named
// DeadLetterQueueAlertsName holding the rule file under "<namespace>.<name>.deadletterqueue.rules.yaml".
func DeadLetterQueueAlertConfigMap(in *DeadLetterQueueInputs) (*corev1.ConfigMap, error) {
	s, err := DeadLetterQueueRuleSet(in)
	if err != nil {
		return nil, err
	}
	return s.ConfigMap()
}

func cloneLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+1)
	maps.Copy(out, l)
	return out
}
