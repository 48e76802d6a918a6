package v1alpha1_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func validAction(ns string) *retryv1alpha1.DeadLetterAction {
	return &retryv1alpha1.DeadLetterAction{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dla-", Namespace: ns},
		Spec: retryv1alpha1.DeadLetterActionSpec{
			Queue:       "orders-dlq",
			Action:      retryv1alpha1.DeadLetterReplay,
			RequestedBy: "jane@example.com",
			Selector: &retryv1alpha1.DeadLetterSelector{
				Reasons:    []retryv1alpha1.DeadLetterName{"max_retries_exceeded"},
				ErrorTypes: []retryv1alpha1.DeadLetterName{"TimeoutError"},
				Pipelines:  []retryv1alpha1.DeadLetterName{"shop/orders"},
				States:     []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending, retryv1alpha1.DeadLetterReplayed},
				After:      &metav1.Time{Time: time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)},
				Before:     &metav1.Time{Time: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)},
				Keys:       []retryv1alpha1.RecordKey{"order-1"},
				Headers:    []retryv1alpha1.HeaderMatch{{Name: "tenant", Value: "eu"}},
				Records:    []retryv1alpha1.RecordRef{"0/0", "2/1234567"},
			},
			Rate: &retryv1alpha1.ReplayRate{RecordsPerSecond: 200},
		},
	}
}

func TestValidDeadLetterActionsAreAcceptedWithDefaults(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	a := validAction(ns)
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatalf("valid replay rejected: %v", err)
	}
	if a.Spec.MaxReplays != 3 || a.Spec.Mode != retryv1alpha1.ActionModeRun {
		t.Errorf("defaults: maxReplays %d mode %q, want 3 and Run", a.Spec.MaxReplays, a.Spec.Mode)
	}
	r := validAction(ns)
	r.Spec.Rate = &retryv1alpha1.ReplayRate{}
	if err := env.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.Spec.Rate.RecordsPerSecond != 100 {
		t.Errorf("rate.recordsPerSecond defaulted to %d, want 100", r.Spec.Rate.RecordsPerSecond)
	}
	for name, spec := range map[string]retryv1alpha1.DeadLetterActionSpec{
		"replay of everything pending":   {Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "u"},
		"replay to a pipeline":           {Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "u", Target: &retryv1alpha1.ReplayTarget{Pipeline: "orders"}},
		"replay to a topic, dry run":     {Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "u", Target: &retryv1alpha1.ReplayTarget{Topic: "orders.replay"}, Mode: retryv1alpha1.ActionModeDryRun, MaxRecords: ptr.To[int64](10)},
		"resolve with a note":            {Queue: "q", Action: retryv1alpha1.DeadLetterResolve, RequestedBy: "u", Note: "fixed upstream"},
		"ignore with a note":             {Queue: "q", Action: retryv1alpha1.DeadLetterIgnore, RequestedBy: "u", Note: "test traffic"},
		"purge of resolved, before time": {Queue: "q", Action: retryv1alpha1.DeadLetterPurge, RequestedBy: "u", Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: time.Now()}, States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterResolved}}},
	} {
		obj := &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{GenerateName: "dla-", Namespace: ns}, Spec: spec}
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("%s rejected: %v", name, err)
		}
	}
}

func TestInvalidDeadLetterActionsAreRejectedWithTheirMessage(t *testing.T) {
	ns := newNamespace(t)
	dla := func(mut func(*retryv1alpha1.DeadLetterAction)) *retryv1alpha1.DeadLetterAction {
		a := validAction(ns)
		mut(a)
		return a
	}
	long := strings.Repeat("x", 1025)
	for _, c := range []struct {
		name string
		obj  *retryv1alpha1.DeadLetterAction
		want []string
	}{
		{"unknown action", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Action = "Delete" }), []string{`Unsupported value: "Delete"`}},
		{"no queue", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Queue = "" }), []string{"spec.queue"}},
		{"queue that is no object name", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Queue = "Orders DLQ" }), []string{"spec.queue", "should match"}},
		{"no requestedBy", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.RequestedBy = "" }), []string{"spec.requestedBy"}},
		{"requestedBy too long", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.RequestedBy = strings.Repeat("u", 254) }), []string{"spec.requestedBy", "may not be more than 253"}},
		{"resolve without a note", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate = retryv1alpha1.DeadLetterResolve, nil
		}), []string{"note is required for Resolve and Ignore"}},
		{"ignore without a note", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate = retryv1alpha1.DeadLetterIgnore, nil
		}), []string{"note is required for Resolve and Ignore"}},
		{"note too long", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Note = long }), []string{"spec.note", "may not be more than 1024"}},
		{"rate on a resolve", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Note = retryv1alpha1.DeadLetterResolve, "n"
		}), []string{"target and rate apply to Replay only"}},
		{"target on an ignore", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Note, a.Spec.Rate, a.Spec.Target = retryv1alpha1.DeadLetterIgnore, "n", nil, &retryv1alpha1.ReplayTarget{Pipeline: "p"}
		}), []string{"target and rate apply to Replay only"}},
		{"target with pipeline and topic", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Target = &retryv1alpha1.ReplayTarget{Pipeline: "p", Topic: "t"}
		}), []string{"set exactly one of target.pipeline and target.topic"}},
		{"empty target", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Target = &retryv1alpha1.ReplayTarget{} }), []string{"set exactly one of target.pipeline and target.topic"}},
		{"target topic that is no topic", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: "a b"} }), []string{"spec.target.topic", "should match"}},
		{"rate zero", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Rate.RecordsPerSecond = -1 }), []string{"recordsPerSecond", "greater than or equal to 1"}},
		{"rate too high", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Rate.RecordsPerSecond = 10001 }), []string{"recordsPerSecond", "less than or equal to 10000"}},
		{"maxReplays too high", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.MaxReplays = 101 }), []string{"maxReplays", "less than or equal to 100"}},
		{"maxRecords zero", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.MaxRecords = ptr.To[int64](0) }), []string{"maxRecords", "greater than or equal to 1"}},
		{"unknown mode", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Mode = "Maybe" }), []string{`Unsupported value: "Maybe"`}},
		{"purge without before", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate, a.Spec.Selector.Before = retryv1alpha1.DeadLetterPurge, nil, nil
		}), []string{"Purge needs selector.before"}},
		{"purge without selector", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate, a.Spec.Selector = retryv1alpha1.DeadLetterPurge, nil, nil
		}), []string{"Purge needs selector.before"}},
		{"purge of pending dead letters", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate = retryv1alpha1.DeadLetterPurge, nil
		}), []string{"Purge never deletes Pending dead letters"}},
		{"after not before before", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Selector.After = a.Spec.Selector.Before }), []string{"selector.after must be before selector.before"}},
		{"unknown state", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.States = []retryv1alpha1.DeadLetterState{"Retried"}
		}), []string{`Unsupported value: "Retried"`}},
		{"record without an offset", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Selector.Records = []retryv1alpha1.RecordRef{"3"} }), []string{"spec.selector.records[0]"}},
		{"record with a sign", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Selector.Records = []retryv1alpha1.RecordRef{"0/-1"} }), []string{"spec.selector.records[0]", "should match"}},
		{"record with leading zeros", dla(func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Selector.Records = []retryv1alpha1.RecordRef{"01/2"} }), []string{"spec.selector.records[0]", "should match"}},
		{"too many records", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.Records = nil
			for i := range 1001 {
				a.Spec.Selector.Records = append(a.Spec.Selector.Records, retryv1alpha1.RecordRef("0/"+strconv.Itoa(i)))
			}
		}), []string{"spec.selector.records", "must have at most 1000 items"}},
		{"duplicate reason", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.Reasons = []retryv1alpha1.DeadLetterName{"x", "x"}
		}), []string{"Duplicate value"}},
		{"empty error type", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.ErrorTypes = []retryv1alpha1.DeadLetterName{""}
		}), []string{"spec.selector.errorTypes[0]"}},
		{"key too long", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.Keys = []retryv1alpha1.RecordKey{retryv1alpha1.RecordKey(long)}
		}), []string{"spec.selector.keys[0]", "may not be more than 1024"}},
		{"header without a name", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.Headers = []retryv1alpha1.HeaderMatch{{Value: "v"}}
		}), []string{"spec.selector.headers[0].name"}},
		{"too many headers", dla(func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Selector.Headers = make([]retryv1alpha1.HeaderMatch, 17)
			for i := range a.Spec.Selector.Headers {
				a.Spec.Selector.Headers[i] = retryv1alpha1.HeaderMatch{Name: "h", Value: "v"}
			}
		}), []string{"spec.selector.headers", "must have at most 16 items"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), c.obj)
			if err == nil {
				t.Fatalf("accepted; want rejection mentioning %q", c.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

// The spec is immutable once created; the status (the reconciler's) is not.
func TestDeadLetterActionSpecIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	a := validAction(ns)
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*retryv1alpha1.DeadLetterAction){
		"rate": func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Rate.RecordsPerSecond = 300 },
		"action": func(a *retryv1alpha1.DeadLetterAction) {
			a.Spec.Action, a.Spec.Rate, a.Spec.Note = retryv1alpha1.DeadLetterResolve, nil, "n"
		},
		"selector": func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Selector.Reasons = nil },
		"mode":     func(a *retryv1alpha1.DeadLetterAction) { a.Spec.Mode = retryv1alpha1.ActionModeDryRun },
	} {
		changed := a.DeepCopy()
		mut(changed)
		err := env.Client.Update(ctx, changed)
		if err == nil || !strings.Contains(err.Error(), "the spec of a DeadLetterAction is immutable") {
			t.Errorf("changing %s: %v, want the immutability rule", name, err)
		}
	}
	// Metadata and status may change.
	labelled := a.DeepCopy()
	labelled.Labels = map[string]string{"incident": "42"}
	if err := env.Client.Update(ctx, labelled); err != nil {
		t.Fatalf("labelling: %v", err)
	}
	labelled.Status = retryv1alpha1.DeadLetterActionStatus{
		Phase: retryv1alpha1.ActionRunning, Matched: 10, Done: 4, Progress: "4/10",
		SkippedReasons:  []retryv1alpha1.NamedCount{{Name: "ReplayLimit", Count: 1}},
		Snapshot:        []retryv1alpha1.PartitionOffset{{Partition: 0, Offset: 100}},
		Checkpoint:      []retryv1alpha1.PartitionOffset{{Partition: 0, Offset: 40}},
		BlockingRecords: []retryv1alpha1.RecordRef{"0/40"},
	}
	if err := env.Client.Status().Update(ctx, labelled); err != nil {
		t.Fatalf("status update: %v", err)
	}
}
