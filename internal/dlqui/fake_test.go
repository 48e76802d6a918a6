package dlqui

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// fakeBackend is the console's Kubernetes in memory: queues whose status is counted from their dead
// letters, and actions the fake "runs" as they are read: a dry run finishes at once; a run moves by
// step dead letters at each GetAction and, once done, changes the dead letters' states.
type fakeBackend struct {
	mu      sync.Mutex
	ns      string
	user    string
	now     time.Time
	step    int64
	queues  map[string]*retryv1alpha1.DeadLetterQueue
	letters map[string][]dlv1.DeadLetter
	actions map[string]*retryv1alpha1.DeadLetterAction
	seq     int
	// created are the actions created, in order; filters the filters ListLetters was given.
	created []retryv1alpha1.DeadLetterAction
	filters []Filter
	// err, when set, is returned by every call.
	err error
	// dryRunReads is how many reads of a dry run find it still running (0: done when created).
	dryRunReads int
	reads       map[string]int
}

var groupResource = schema.GroupResource{Group: dlv1.GroupName, Resource: dlv1.Resource}

func newFakeBackend(now time.Time) *fakeBackend {
	return &fakeBackend{ns: "shop", user: "alice@example.com", now: now, step: 1,
		queues: map[string]*retryv1alpha1.DeadLetterQueue{}, letters: map[string][]dlv1.DeadLetter{}, actions: map[string]*retryv1alpha1.DeadLetterAction{}}
}

// addQueue adds a queue with n dead letters spread over reasons, error types and pipelines; every
// third letter's value is JSON naming its order.
func (f *fakeBackend) addQueue(name string, n int) {
	reasons := []string{"max_retries_exceeded", "non_retriable_error", "deadline_exceeded"}
	errTypes := []string{"HTTP5xx", "HTTP422", "timeout"}
	pipes := []string{"orders", "payments"}
	q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	q.Status.Topic = name
	q.Status.Conditions = []metav1.Condition{{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"}}
	var ls []dlv1.DeadLetter
	for i := range n {
		p, off := int32(i%2), int64(i/2)
		t := f.now.Add(-time.Duration(n-i) * time.Minute)
		value := fmt.Sprintf(`{"order":"o-%d","amount":%d.50,"items":[{"sku":"A-%d","qty":%d}]}`, 1000+i, 10+i, i, 1+i%3)
		l := dlv1.DeadLetter{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%d.%d", name, p, off), Namespace: f.ns, CreationTimestamp: metav1.NewTime(t)},
			Queue:      name, Topic: name, Partition: p, Offset: off,
			Pipeline: f.ns + "/" + pipes[i%len(pipes)], ConsumerGroup: "retry-" + pipes[i%len(pipes)],
			Reason: reasons[i%len(reasons)], ErrorType: errTypes[i%len(errTypes)], ErrorMessage: "sink answered " + errTypes[i%len(errTypes)],
			HTTPStatus: []int32{503, 422, 0}[i%3], Attempts: int32(3 + i%4),
			FirstFailureTime: ptr.To(metav1.NewTime(t.Add(-10 * time.Minute))), LastFailureTime: ptr.To(metav1.NewTime(t)),
			Original: &dlv1.Original{Topic: "orders", Partition: p, Offset: 5000 + int64(i)},
			Key:      &dlv1.Payload{Encoding: dlv1.EncodingText, Data: fmt.Sprintf("order-%d", 1000+i), Size: 10},
			Value:    &dlv1.Payload{Encoding: dlv1.EncodingText, Data: value, Size: int64(len(value))},
			Headers: []dlv1.Header{{Name: "retryops.reason", Value: reasons[i%len(reasons)], Encoding: dlv1.EncodingText},
				{Name: "retryops.error.type", Value: errTypes[i%len(errTypes)], Encoding: dlv1.EncodingText},
				{Name: "Idempotency-Key", Value: fmt.Sprintf("idem-%d", i), Encoding: dlv1.EncodingText}},
			State: dlv1.DeadLetterStatus{State: dlv1.StatePending},
		}
		ls = append(ls, l)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queues[name] = q
	f.letters[name] = ls
	f.countLocked(name)
}

// countLocked sets a queue's status from its dead letters, as the operator would.
func (f *fakeBackend) countLocked(name string) {
	q := f.queues[name]
	count := func(key func(*dlv1.DeadLetter) string) []retryv1alpha1.NamedCount {
		m := map[string]int64{}
		for i := range f.letters[name] {
			m[key(&f.letters[name][i])]++
		}
		var out []retryv1alpha1.NamedCount
		for k, v := range m {
			out = append(out, retryv1alpha1.NamedCount{Name: k, Count: v})
		}
		slices.SortFunc(out, func(a, b retryv1alpha1.NamedCount) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	ls := f.letters[name]
	q.Status.Messages = ptr.To(int64(len(ls)))
	q.Status.Reasons = count(func(l *dlv1.DeadLetter) string { return l.Reason })
	q.Status.ErrorTypes = count(func(l *dlv1.DeadLetter) string { return l.ErrorType })
	q.Status.Pipelines = count(func(l *dlv1.DeadLetter) string { return l.Pipeline })
	q.Status.States = count(func(l *dlv1.DeadLetter) string { return string(l.State.State) })
	var pending int64
	q.Status.OldestPendingTime = nil
	for i := range ls {
		if ls[i].State.State == dlv1.StatePending {
			pending++
			if q.Status.OldestPendingTime == nil {
				q.Status.OldestPendingTime = ptr.To(ls[i].CreationTimestamp)
			}
		}
	}
	q.Status.Pending = ptr.To(pending)
	if len(ls) > 0 {
		q.Status.OldestMessageTime = ptr.To(ls[0].CreationTimestamp)
		q.Status.NewestMessageTime = ptr.To(ls[len(ls)-1].CreationTimestamp)
	}
	q.Status.LastRefreshTime = ptr.To(metav1.NewTime(f.now))
}

func (f *fakeBackend) Namespace() string { return f.ns }

func (f *fakeBackend) ListQueues(context.Context) ([]retryv1alpha1.DeadLetterQueue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []retryv1alpha1.DeadLetterQueue
	for _, q := range f.queues {
		out = append(out, *q.DeepCopy())
	}
	return out, nil
}

func (f *fakeBackend) GetQueue(_ context.Context, name string) (*retryv1alpha1.DeadLetterQueue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	q, ok := f.queues[name]
	if !ok {
		return nil, apierrors.NewNotFound(retryv1alpha1.GroupVersion.WithResource("deadletterqueues").GroupResource(), name)
	}
	return q.DeepCopy(), nil
}

// matches applies an action's selector to a dead letter, as the engine would.
func matches(sel *retryv1alpha1.DeadLetterSelector, l *dlv1.DeadLetter) bool {
	if sel == nil {
		return true
	}
	in := func(vals []retryv1alpha1.DeadLetterName, v string) bool {
		return len(vals) == 0 || slices.Contains(vals, retryv1alpha1.DeadLetterName(v))
	}
	ref := retryv1alpha1.RecordRef(fmt.Sprintf("%d/%d", l.Partition, l.Offset))
	return in(sel.Reasons, l.Reason) && in(sel.ErrorTypes, l.ErrorType) && in(sel.Pipelines, l.Pipeline) &&
		(len(sel.States) == 0 || slices.Contains(sel.States, retryv1alpha1.DeadLetterState(l.State.State))) &&
		(sel.After == nil || !l.CreationTimestamp.Before(sel.After)) && (sel.Before == nil || l.CreationTimestamp.Before(sel.Before)) &&
		(len(sel.Records) == 0 || slices.Contains(sel.Records, ref))
}

func (f *fakeBackend) ListLetters(_ context.Context, queue string, flt Filter, limit int64, cont string) (*dlv1.DeadLetterList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.filters = append(f.filters, flt)
	sel := flt.Selector(f.ns)
	var all []dlv1.DeadLetter
	for i := range f.letters[queue] {
		if matches(&sel, &f.letters[queue][i]) {
			all = append(all, f.letters[queue][i])
		}
	}
	start := 0
	if cont != "" {
		var err error
		if start, err = strconv.Atoi(cont); err != nil || start > len(all) {
			return nil, apierrors.NewBadRequest("bad continue token")
		}
	}
	end := min(start+int(limit), len(all))
	out := &dlv1.DeadLetterList{Items: slices.Clone(all[start:end])}
	if end < len(all) {
		out.Continue = strconv.Itoa(end)
		out.RemainingItemCount = ptr.To(int64(len(all) - end))
	}
	return out, nil
}

func (f *fakeBackend) GetLetter(_ context.Context, queue string, p int32, off int64) (*dlv1.DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	for _, l := range f.letters[queue] {
		if l.Partition == p && l.Offset == off {
			return l.DeepCopy(), nil
		}
	}
	return nil, apierrors.NewNotFound(groupResource, fmt.Sprintf("%s.%d.%d", queue, p, off))
}

func (f *fakeBackend) ListActions(context.Context) ([]retryv1alpha1.DeadLetterAction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []retryv1alpha1.DeadLetterAction
	for _, a := range f.actions {
		out = append(out, *a.DeepCopy())
	}
	return out, nil
}

// GetAction moves a running action on by step dead letters, as the manager would between reads.
func (f *fakeBackend) GetAction(_ context.Context, name string) (*retryv1alpha1.DeadLetterAction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	a, ok := f.actions[name]
	if !ok {
		return nil, apierrors.NewNotFound(retryv1alpha1.GroupVersion.WithResource("deadletteractions").GroupResource(), name)
	}
	st := &a.Status
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun && st.Phase == retryv1alpha1.ActionRunning {
		if f.reads == nil {
			f.reads = map[string]int{}
		}
		if f.reads[name]++; f.reads[name] > f.dryRunReads {
			st.Phase, st.Done, st.CompletionTime = retryv1alpha1.ActionSucceeded, st.Matched, ptr.To(metav1.NewTime(f.now))
		}
	}
	if a.Spec.Mode == retryv1alpha1.ActionModeRun && (st.Phase == retryv1alpha1.ActionPending || st.Phase == retryv1alpha1.ActionRunning) {
		if st.Phase == retryv1alpha1.ActionPending {
			st.Phase, st.StartTime = retryv1alpha1.ActionRunning, ptr.To(metav1.NewTime(f.now))
		} else {
			st.Done = min(st.Done+f.step, st.Matched)
		}
		if st.Done == st.Matched && st.Phase == retryv1alpha1.ActionRunning && st.Done > 0 || st.Matched == 0 {
			f.finishLocked(a)
		}
		st.Progress = fmt.Sprintf("%d/%d", st.Done, st.Matched)
	}
	return a.DeepCopy(), nil
}

// finishLocked records the action's decisions on its dead letters.
func (f *fakeBackend) finishLocked(a *retryv1alpha1.DeadLetterAction) {
	state := map[retryv1alpha1.DeadLetterActionType]dlv1.State{retryv1alpha1.DeadLetterReplay: dlv1.StateReplayed,
		retryv1alpha1.DeadLetterResolve: dlv1.StateResolved, retryv1alpha1.DeadLetterIgnore: dlv1.StateIgnored}[a.Spec.Action]
	ls := f.letters[a.Spec.Queue]
	for i := range ls {
		if matches(a.Spec.Selector, &ls[i]) && state != "" {
			ls[i].State = dlv1.DeadLetterStatus{State: state, Note: a.Spec.Note, RequestedBy: a.Spec.RequestedBy, Time: ptr.To(metav1.NewTime(f.now)),
				Action: &dlv1.ActionRef{Namespace: a.Namespace, Name: a.Name}}
		}
	}
	a.Status.Phase, a.Status.CompletionTime = retryv1alpha1.ActionSucceeded, ptr.To(metav1.NewTime(f.now))
	f.countLocked(a.Spec.Queue)
}

func (f *fakeBackend) CreateAction(_ context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterAction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.seq++
	a = a.DeepCopy()
	a.Name = fmt.Sprintf("%s%05d", a.GenerateName, f.seq)
	a.UID = types.UID(fmt.Sprintf("uid-%05d", f.seq))
	a.CreationTimestamp = metav1.NewTime(f.now.Add(time.Duration(f.seq) * time.Second))
	f.created = append(f.created, *a.DeepCopy())
	var matched []retryv1alpha1.RecordRef
	for _, l := range f.letters[a.Spec.Queue] {
		if matches(a.Spec.Selector, &l) {
			matched = append(matched, retryv1alpha1.RecordRef(fmt.Sprintf("%d/%d", l.Partition, l.Offset)))
		}
	}
	a.Status.Matched = int64(len(matched))
	a.Status.Phase = retryv1alpha1.ActionPending
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		a.Status.Phase, a.Status.Done = retryv1alpha1.ActionSucceeded, a.Status.Matched
		a.Status.MatchedRecords = matched[:min(len(matched), retryv1alpha1.MaxListedRecords)]
		a.Status.StartTime, a.Status.CompletionTime = ptr.To(metav1.NewTime(f.now)), ptr.To(metav1.NewTime(f.now))
		if f.dryRunReads > 0 {
			a.Status.Phase, a.Status.Done, a.Status.CompletionTime = retryv1alpha1.ActionRunning, 0, nil
		}
	}
	f.actions[a.Name] = a
	return a.DeepCopy(), nil
}

func (f *fakeBackend) WhoAmI(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.user, f.err
}
