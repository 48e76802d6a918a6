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
// Replay's explicit target, an adoption), not for every reconcile. A record that does not say whose
// it is counts as held by kind "unknown".
func (l *Ledger) Holders(ctx context.Context, topic string) ([]Holder, error) {
	by, err := l.HoldersOf(ctx, topic)
	return by[topic], err
}

// HoldersOf is Holders for several topics in one list of the ledger: the holders of each topic any
// record holds.
func (l *Ledger) HoldersOf(ctx context.Context, topics ...string) (map[string][]Holder, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	list := &corev1.ConfigMapList{}
	if err := l.Reader.List(ctx, list, client.InNamespace(l.Namespace), client.HasLabels{LedgerLabel}, client.Limit(maxSweptRecords)); err != nil {
		return nil, fmt.Errorf("listing the topic ledger: %w", err)
	}
	out := map[string][]Holder{}
	for i := range list.Items {
		cm := &list.Items[i]
		if !strings.HasPrefix(cm.Name, "topics-") {
			continue
		}
		held := parseLedger(cm.Data[ledgerTopicsKey])
		h := Holder{Kind: "unknown", Topics: held}
		kind, nsName, ok := strings.Cut(cm.Annotations[ledgerResourceAnnotation], " ")
		ns, name, ok2 := strings.Cut(nsName, "/")
		if ok && ok2 && kind != "" {
			h.Kind, h.Namespace, h.Name = kind, ns, name
		}
		for _, topic := range topics {
			if slices.Contains(held, topic) {
				out[topic] = append(out[topic], h)
			}
		}
	}
	return out, nil
}

// Is reports whether h is the record of the resource of kind named namespace/name.
func (h Holder) Is(kind, namespace, name string) bool {
	return h.Kind == kind && h.Namespace == namespace && h.Name == name
}
