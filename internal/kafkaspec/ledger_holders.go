package kafkaspec

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Holder is a resource whose ledger record holds a topic, with every topic of that record.
type Holder struct {
	Kind, Namespace, Name string
	Topics                []string
}

func (h Holder) String() string { return fmt.Sprintf("%s %s/%s", h.Kind, h.Namespace, h.Name) }

// Holders returns the resources whose ledger record holds topic: the operator manages it for them.
// It lists the whole ledger, uncached (the list the sweep makes), so it is for rare checks (a
// Replay's explicit target), not for every reconcile. A record that does not say whose it is
// counts as held by kind "unknown".
func (l *Ledger) Holders(ctx context.Context, topic string) ([]Holder, error) {
	list := &corev1.ConfigMapList{}
	if err := l.Reader.List(ctx, list, client.InNamespace(l.Namespace), client.HasLabels{LedgerLabel}, client.Limit(maxSweptRecords)); err != nil {
		return nil, fmt.Errorf("listing the topic ledger: %w", err)
	}
	var out []Holder
	for i := range list.Items {
		cm := &list.Items[i]
		if !strings.HasPrefix(cm.Name, "topics-") {
			continue
		}
		topics := parseLedger(cm.Data[ledgerTopicsKey])
		if !slices.Contains(topics, topic) {
			continue
		}
		h := Holder{Kind: "unknown", Topics: topics}
		kind, nsName, ok := strings.Cut(cm.Annotations[ledgerResourceAnnotation], " ")
		ns, name, ok2 := strings.Cut(nsName, "/")
		if ok && ok2 && kind != "" {
			h.Kind, h.Namespace, h.Name = kind, ns, name
		}
		out = append(out, h)
	}
	return out, nil
}
