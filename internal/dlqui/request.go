package dlqui

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// ActionRequest is a DeadLetterAction as kubectl dlq's flags and the console's forms ask for it, in
// typed values. Build makes it: the one place both surfaces make an action, so that the same
// request selects the same dead letters and is refused for the same reasons.
type ActionRequest struct {
	Kind   retryv1alpha1.DeadLetterActionType
	Queue  string
	Filter Filter
	// Keys, Headers and Records narrow the filter: record keys, headers (name and value) and
	// positions, any of each.
	Keys    []string
	Headers []retryv1alpha1.HeaderMatch
	Records []Record
	Note    string
	// Target is a Replay's destination instead of each dead letter's own pipeline.
	Target     *retryv1alpha1.ReplayTarget
	DryRun     bool
	Rate       int32
	MaxRecords int64
	MaxReplays int32
}

// MaxRecords is the most dead letters one action names (the CRD's maxItems of selector.records).
const MaxRecords = 1000

// The requests Build refuses. Their messages name no flag or form field: a surface that names its
// inputs otherwise says which (errors.Is).
var (
	ErrPurgeWithoutBefore = errors.New("purge needs an upper time bound: only dead letters older than it are deleted")
	// A purge deletes a prefix of each partition: a lower time bound cannot keep older dead letters.
	ErrPurgeSince   = errors.New("purge takes no lower time bound: it deletes every matching dead letter older than its upper bound")
	ErrPurgePending = errors.New("purge never deletes Pending dead letters: select Resolved, Ignored or Replayed")
	ErrNoNote       = errors.New("needs a note: say why")
	// ErrTargetNotReplay and ErrTwoTargets refuse a target Build cannot honour.
	ErrTargetNotReplay = errors.New("a target applies to replay only")
	ErrTwoTargets      = errors.New("replay to a pipeline or to a topic, not both")
	// ErrRecordTwice and ErrTooManyRecords are what the API server would refuse (records is a set
	// of at most MaxRecords).
	ErrRecordTwice    = errors.New("names a dead letter twice")
	ErrTooManyRecords = fmt.Errorf("names more than %d dead letters: select them with a filter instead", MaxRecords)
)

// Check refuses what Build would, without the namespace and the user: a surface checks a request
// before it contacts the cluster.
func (r ActionRequest) Check() error {
	verb := strings.ToLower(string(r.Kind))
	if (r.Kind == retryv1alpha1.DeadLetterResolve || r.Kind == retryv1alpha1.DeadLetterIgnore) && strings.TrimSpace(r.Note) == "" {
		return fmt.Errorf("%s %w", verb, ErrNoNote)
	}
	if t := r.Target; t != nil {
		switch {
		case r.Kind != retryv1alpha1.DeadLetterReplay:
			return ErrTargetNotReplay
		case t.Pipeline != "" && t.Topic != "":
			return ErrTwoTargets
		}
	}
	if r.Kind == retryv1alpha1.DeadLetterPurge {
		switch {
		case r.Filter.Until.IsZero():
			return ErrPurgeWithoutBefore
		case !r.Filter.Since.IsZero():
			return ErrPurgeSince
		case slices.Contains(r.Filter.States, string(retryv1alpha1.DeadLetterPending)):
			return ErrPurgePending
		}
	}
	if len(r.Records) > MaxRecords {
		return fmt.Errorf("%s %w", verb, ErrTooManyRecords)
	}
	seen := make(map[Record]bool, len(r.Records))
	for _, rec := range r.Records {
		if seen[rec] {
			return fmt.Errorf("%s %w: %s", verb, ErrRecordTwice, rec)
		}
		seen[rec] = true
	}
	return nil
}

// Build is the DeadLetterAction r asks for, in namespace, requested by user. The note is kept
// without blanks around it, pipelines as written (Filter.Selector), on both surfaces alike.
func (r ActionRequest) Build(namespace, user string) (*retryv1alpha1.DeadLetterAction, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	sel := r.Filter.Selector(namespace)
	for _, k := range r.Keys {
		sel.Keys = append(sel.Keys, retryv1alpha1.RecordKey(k))
	}
	sel.Headers = append(sel.Headers, r.Headers...)
	for _, rec := range r.Records {
		sel.Records = append(sel.Records, retryv1alpha1.RecordRef(rec.String()))
	}
	spec := retryv1alpha1.DeadLetterActionSpec{Queue: r.Queue, Action: r.Kind, Note: strings.TrimSpace(r.Note), RequestedBy: user, Mode: retryv1alpha1.ActionModeRun, Target: r.Target,
		MaxReplays: r.MaxReplays}
	if r.DryRun {
		spec.Mode = retryv1alpha1.ActionModeDryRun
	}
	if !emptySelector(&sel) {
		spec.Selector = &sel
	}
	if r.Rate != 0 {
		spec.Rate = &retryv1alpha1.ReplayRate{RecordsPerSecond: r.Rate}
	}
	if r.MaxRecords != 0 {
		spec.MaxRecords = ptr.To(r.MaxRecords)
	}
	return NewAction(namespace, spec), nil
}

// NewAction is an action of spec named <action>-<queue>-<random>, the prefix cut to stay short.
func NewAction(namespace string, spec retryv1alpha1.DeadLetterActionSpec) *retryv1alpha1.DeadLetterAction {
	p := strings.ToLower(string(spec.Action)) + "-" + spec.Queue
	if len(p) > 50 {
		p = strings.TrimRight(p[:50], "-.")
	}
	return &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{GenerateName: p + "-", Namespace: namespace}, Spec: spec}
}

func emptySelector(s *retryv1alpha1.DeadLetterSelector) bool {
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

// maxEcho bounds what an error quotes of its input: the input may be any size.
const maxEcho = 64

// cut is s, or its first n bytes (whole runes) and "...".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// ParseRecord reads PARTITION/OFFSET: two non-negative decimal numbers, written as String writes
// them (no sign, no leading zero).
func ParseRecord(s string) (Record, error) {
	p, off, ok := strings.Cut(s, "/")
	part, err1 := strconv.ParseInt(p, 10, 32)
	offset, err2 := strconv.ParseInt(off, 10, 64)
	r := Record{Partition: int32(part), Offset: offset}
	if !ok || err1 != nil || err2 != nil || r.Partition < 0 || r.Offset < 0 || r.String() != s {
		return Record{}, fmt.Errorf("%q is not a dead letter: want PARTITION/OFFSET, for example 0/42", cut(s, maxEcho))
	}
	return r, nil
}
