package dlqui

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// ActionRequest is a DeadLetterAction as kubectl dlq's flags and the console's forms ask for it, in
// typed values. Build makes it: the one place both surfaces make an action, so that the same
// request selects the same dead letters and is refused for the same reasons.
type ActionRequest struct {
	Kind   v1.DeadLetterActionType
	Queue  string
	Filter Filter
	// Keys, Headers and Records narrow the filter: record keys, headers (name and value) and
	// positions, any of each.
	Keys    []string
	Headers []v1.HeaderMatch
	Records []Record
	Note    string
	// Target is a Replay's destination instead of each dead letter's own pipeline.
	Target     *v1.ReplayTarget
	DryRun     bool
	Rate       int32
	MaxRecords int64
	MaxReplays int32
}

// The requests Build refuses. Their messages name no flag or form field: a surface that names its
// inputs otherwise says which (errors.Is).
var (
	ErrPurgeWithoutBefore = errors.New("purge needs an upper time bound: only dead letters older than it are deleted")
	ErrNoNote             = errors.New("needs a note: say why")
	ErrTargetNotReplay    = errors.New("a target applies to replay only")
	ErrTwoTargets         = errors.New("replay to a pipeline or to a topic, not both")
)

// Build is the DeadLetterAction r asks for, in namespace, requested by user.
func (r ActionRequest) Build(namespace, user string) (*v1.DeadLetterAction, error) {
	if (r.Kind == v1.DeadLetterResolve || r.Kind == v1.DeadLetterIgnore) && strings.TrimSpace(r.Note) == "" {
		return nil, fmt.Errorf("%s %w", strings.ToLower(string(r.Kind)), ErrNoNote)
	}
	if t := r.Target; t != nil {
		switch {
		case r.Kind != v1.DeadLetterReplay:
			return nil, ErrTargetNotReplay
		case t.Pipeline != "" && t.Topic != "":
			return nil, ErrTwoTargets
		}
	}
	sel := r.Filter.Selector(namespace)
	for _, k := range r.Keys {
		sel.Keys = append(sel.Keys, v1.RecordKey(k))
	}
	sel.Headers = append(sel.Headers, r.Headers...)
	for _, rec := range r.Records {
		sel.Records = append(sel.Records, v1.RecordRef(rec.String()))
	}
	if r.Kind == v1.DeadLetterPurge && sel.Before == nil {
		return nil, ErrPurgeWithoutBefore
	}
	spec := v1.DeadLetterActionSpec{Queue: r.Queue, Action: r.Kind, Note: r.Note, RequestedBy: user, Mode: v1.ActionModeRun, Target: r.Target,
		MaxReplays: r.MaxReplays}
	if r.DryRun {
		spec.Mode = v1.ActionModeDryRun
	}
	if !emptySelector(&sel) {
		spec.Selector = &sel
	}
	if r.Rate != 0 {
		spec.Rate = &v1.ReplayRate{RecordsPerSecond: r.Rate}
	}
	if r.MaxRecords != 0 {
		spec.MaxRecords = ptr.To(r.MaxRecords)
	}
	return NewAction(namespace, spec), nil
}

// NewAction is an action of spec named <action>-<queue>-<random>, the prefix cut to stay short.
func NewAction(namespace string, spec v1.DeadLetterActionSpec) *v1.DeadLetterAction {
	p := strings.ToLower(string(spec.Action)) + "-" + spec.Queue
	if len(p) > 50 {
		p = strings.TrimRight(p[:50], "-.")
	}
	return &v1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{GenerateName: p + "-", Namespace: namespace}, Spec: spec}
}

func emptySelector(s *v1.DeadLetterSelector) bool {
	return len(s.Reasons)+len(s.ErrorTypes)+len(s.Pipelines)+len(s.States)+len(s.Keys)+len(s.Headers)+len(s.Records) == 0 &&
		s.After == nil && s.Before == nil
}

// Record is a dead letter's position in its queue's topic.
type Record struct {
	Partition int32
	Offset    int64
}

// String is PARTITION/OFFSET, as a selector's records and kubectl dlq's arguments write it.
func (r Record) String() string {
	return strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}

// ParseRecord reads PARTITION/OFFSET: two non-negative decimal numbers, written as String writes
// them (no sign, no leading zero).
func ParseRecord(s string) (Record, error) {
	p, off, ok := strings.Cut(s, "/")
	part, err1 := strconv.ParseInt(p, 10, 32)
	offset, err2 := strconv.ParseInt(off, 10, 64)
	r := Record{Partition: int32(part), Offset: offset}
	if !ok || err1 != nil || err2 != nil || r.Partition < 0 || r.Offset < 0 || r.String() != s {
		return Record{}, fmt.Errorf("%q is not a dead letter: want PARTITION/OFFSET, for example 0/42", s)
	}
	return r, nil
}
