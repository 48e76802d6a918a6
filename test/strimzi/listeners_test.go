package strimzi_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// listenerProblems says what in a Kafka lets a client in as no production cluster would: a
// listener without TLS or without authentication, no authorization (the KafkaUsers' ACLs would be
// ignored), or no User Operator (no KafkaUser would become a user).
func listenerProblems(kafka *unstructured.Unstructured) []string {
	var problems []string
	listeners, _, _ := unstructured.NestedSlice(kafka.Object, "spec", "kafka", "listeners")
	if len(listeners) == 0 {
		problems = append(problems, "no listener")
	}
	for _, l := range listeners {
		l, _ := l.(map[string]any)
		name, _, _ := unstructured.NestedString(l, "name")
		if tls, _, _ := unstructured.NestedBool(l, "tls"); !tls {
			problems = append(problems, fmt.Sprintf("listener %q is not TLS", name))
		}
		switch auth, _, _ := unstructured.NestedString(l, "authentication", "type"); auth {
		case "scram-sha-512", "tls":
		default:
			problems = append(problems, fmt.Sprintf("listener %q has authentication %q, not scram-sha-512 or tls", name, auth))
		}
	}
	if authz, _, _ := unstructured.NestedString(kafka.Object, "spec", "kafka", "authorization", "type"); authz != "simple" {
		problems = append(problems, fmt.Sprintf("authorization %q, not simple", authz))
	}
	if _, ok, _ := unstructured.NestedMap(kafka.Object, "spec", "entityOperator", "userOperator"); !ok {
		problems = append(problems, "no User Operator")
	}
	return problems
}

// scramListener returns the port of the Kafka's internal TLS listener with SCRAM-SHA-512, or 0.
func scramListener(kafka *unstructured.Unstructured) int64 {
	listeners, _, _ := unstructured.NestedSlice(kafka.Object, "spec", "kafka", "listeners")
	for _, l := range listeners {
		l, _ := l.(map[string]any)
		typ, _, _ := unstructured.NestedString(l, "type")
		tls, _, _ := unstructured.NestedBool(l, "tls")
		auth, _, _ := unstructured.NestedString(l, "authentication", "type")
		port, _, _ := unstructured.NestedFieldNoCopy(l, "port")
		if typ == "internal" && tls && auth == "scram-sha-512" {
			switch p := port.(type) {
			case int64:
				return p
			case float64: // decoded from YAML through JSON
				return int64(p)
			}
		}
	}
	return 0
}

// TestKindScriptKafkaIsSecured checks the script's Kafka is secured as a production cluster is:
// every listener TLS and authenticated, simple authorization, the User Operator, and the internal
// TLS listener with SCRAM-SHA-512 on 9093 that config/strimzi's users and manager use. Each way of
// undoing it, such as putting back the plain listener the script once had, is caught.
func TestKindScriptKafkaIsSecured(t *testing.T) {
	g := NewWithT(t)
	kafka, _ := kafkaObjects(t)
	g.Expect(listenerProblems(kafka)).To(BeEmpty())
	g.Expect(scramListener(kafka)).To(Equal(int64(9093)))

	listener := func(k *unstructured.Unstructured, i int) map[string]any {
		ls, _, _ := unstructured.NestedSlice(k.Object, "spec", "kafka", "listeners")
		return ls[i].(map[string]any)
	}
	setListeners := func(k *unstructured.Unstructured, edit func([]any) []any) {
		ls, _, _ := unstructured.NestedSlice(k.Object, "spec", "kafka", "listeners")
		g.Expect(unstructured.SetNestedSlice(k.Object, edit(ls), "spec", "kafka", "listeners")).To(Succeed())
	}
	for _, tc := range []struct {
		name string
		undo func(k *unstructured.Unstructured)
	}{
		{"the plain listener put back", func(k *unstructured.Unstructured) {
			setListeners(k, func(ls []any) []any {
				return append(ls, map[string]any{"name": "plain", "port": int64(9092), "type": "internal", "tls": false})
			})
		}},
		{"TLS without authentication", func(k *unstructured.Unstructured) {
			setListeners(k, func(ls []any) []any { delete(ls[0].(map[string]any), "authentication"); return ls })
		}},
		{"SCRAM without TLS", func(k *unstructured.Unstructured) {
			setListeners(k, func(ls []any) []any { ls[0].(map[string]any)["tls"] = false; return ls })
		}},
		{"no authorization", func(k *unstructured.Unstructured) {
			unstructured.RemoveNestedField(k.Object, "spec", "kafka", "authorization")
		}},
		{"no User Operator", func(k *unstructured.Unstructured) {
			unstructured.RemoveNestedField(k.Object, "spec", "entityOperator", "userOperator")
		}},
	} {
		k := kafka.DeepCopy()
		tc.undo(k)
		g.Expect(listenerProblems(k)).NotTo(BeEmpty(), tc.name)
	}
	// Not TLS: no SCRAM listener for the manager either.
	k := kafka.DeepCopy()
	setListeners(k, func(ls []any) []any { ls[0].(map[string]any)["tls"] = false; return ls })
	g.Expect(scramListener(k)).To(BeZero())
	g.Expect(listener(kafka, 0)["tls"]).To(BeTrue(), "the edits above worked on copies")
}
