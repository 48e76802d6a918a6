package dlqcli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

var stateNames = []string{string(v1.DeadLetterPending), string(v1.DeadLetterReplayed), string(v1.DeadLetterResolved), string(v1.DeadLetterIgnored)}

// selectorFlags are the filters list and the actions share.
type selectorFlags struct {
	reasons, errorTypes, pipelines, states []string
	since, until                           string
	// purge: --before and --states instead of --since, --until and --state.
	purge bool
}

func (s *selectorFlags) addFlags(cmd *cobra.Command, o *Options, purge bool) {
	f := cmd.Flags()
	s.purge = purge
	f.StringSliceVar(&s.reasons, "reason", nil, "only dead letters with one of these reasons (max_retries_exceeded, non_retriable_error, deadline_exceeded, undeliverable, malformed)")
	f.StringSliceVar(&s.errorTypes, "error-type", nil, "only dead letters whose last error has one of these types")
	f.StringSliceVar(&s.pipelines, "pipeline", nil, "only dead letters from one of these ConsumerPipelines (NAME in the namespace, or NAMESPACE/NAME)")
	_ = cmd.RegisterFlagCompletionFunc("pipeline", completeNames(o, "consumerpipelines"))
	statesFlag := "state"
	if purge {
		statesFlag = "states"
		f.StringVar(&s.until, "before", "", "only dead letters older than this: an age (30d, 12h) or a time (2026-11-01T00:00:00Z)")
		f.StringSliceVar(&s.states, statesFlag, nil, "only dead letters in these states (Resolved, Ignored, Replayed; the default is all three)")
	} else {
		f.StringSliceVar(&s.states, statesFlag, nil, "only dead letters in these states (Pending, Replayed, Resolved, Ignored)")
		f.StringVar(&s.since, "since", "", "only dead letters dead-lettered at or after this: an age back from now (2h, 7d) or a time (2026-11-23T10:00:00Z)")
		f.StringVar(&s.until, "until", "", "only dead letters dead-lettered before this: an age back from now or a time")
	}
	_ = cmd.RegisterFlagCompletionFunc(statesFlag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return stateNames, cobra.ShellCompDirectiveNoFileComp
	})
}

// states checks --state values, accepting any capitalisation.
func (s *selectorFlags) checkedStates() ([]string, error) {
	var out []string
	for _, st := range s.states {
		i := slices.IndexFunc(stateNames, func(n string) bool { return strings.EqualFold(n, st) })
		if i < 0 {
			return nil, usagef("state %q: want one of %s", st, strings.Join(stateNames, ", "))
		}
		out = append(out, stateNames[i])
	}
	return out, nil
}

// actionSelector is a DeadLetterSelector with its emptiness test.
type actionSelector struct{ v1.DeadLetterSelector }

func (s *actionSelector) empty() bool {
	return len(s.Reasons)+len(s.ErrorTypes)+len(s.Pipelines)+len(s.States)+len(s.Keys)+len(s.Headers)+len(s.Records) == 0 &&
		s.After == nil && s.Before == nil
}

// actionSelector builds a DeadLetterAction's selector from the flags.
func (s *selectorFlags) actionSelector(o *Options) (actionSelector, error) {
	var sel actionSelector
	for _, r := range s.reasons {
		sel.Reasons = append(sel.Reasons, v1.DeadLetterName(r))
	}
	for _, e := range s.errorTypes {
		sel.ErrorTypes = append(sel.ErrorTypes, v1.DeadLetterName(e))
	}
	ns := ""
	if o.c != nil {
		ns = o.c.namespace
	}
	for _, p := range s.pipelines {
		if !strings.Contains(p, "/") {
			p = ns + "/" + p
		}
		sel.Pipelines = append(sel.Pipelines, v1.DeadLetterName(p))
	}
	states, err := s.checkedStates()
	if err != nil {
		return sel, err
	}
	for _, st := range states {
		sel.States = append(sel.States, v1.DeadLetterState(st))
	}
	after, before, err := s.times(o)
	if err != nil {
		return sel, err
	}
	if !after.IsZero() {
		sel.After = &after
	}
	if !before.IsZero() {
		sel.Before = &before
	}
	return sel, nil
}

func (s *selectorFlags) times(o *Options) (since, until metav1.Time, err error) {
	untilFlag := "until"
	if s.purge {
		untilFlag = "before"
	}
	a, err := parseTime("since", s.since, o.now())
	if err != nil {
		return since, until, err
	}
	b, err := parseTime(untilFlag, s.until, o.now())
	if err != nil {
		return since, until, err
	}
	if !a.IsZero() && !b.IsZero() && !a.Before(b) {
		return since, until, usagef("--since must be before --until")
	}
	return metav1.Time{Time: a}, metav1.Time{Time: b}, nil
}

// listOptions builds the deadletters API list options for queue: label selectors for the queue,
// reason, error type, pipeline and state, and the since/until field selectors.
func (s *selectorFlags) listOptions(o *Options, queue string) (metav1.ListOptions, error) {
	sel := labels.NewSelector()
	add := func(key string, values []string) error {
		if len(values) == 0 {
			return nil
		}
		vals := make([]string, 0, len(values))
		for _, v := range values {
			vals = append(vals, labelValue(v))
		}
		op := selection.Equals
		if len(vals) > 1 {
			op = selection.In
		}
		r, err := labels.NewRequirement(key, op, vals)
		if err != nil {
			return usagef("%v", err)
		}
		sel = sel.Add(*r)
		return nil
	}
	states, err := s.checkedStates()
	if err != nil {
		return metav1.ListOptions{}, err
	}
	pipelines := make([]string, 0, len(s.pipelines))
	for _, p := range s.pipelines {
		// the label holds the pipeline's name without its namespace
		pipelines = append(pipelines, p[strings.LastIndex(p, "/")+1:])
	}
	for _, kv := range []struct {
		key    string
		values []string
	}{
		{dlv1.LabelQueue, []string{queue}},
		{dlv1.LabelReason, s.reasons},
		{dlv1.LabelErrorType, s.errorTypes},
		{dlv1.LabelPipeline, pipelines},
		{dlv1.LabelState, states},
	} {
		if err := add(kv.key, kv.values); err != nil {
			return metav1.ListOptions{}, err
		}
	}
	opts := metav1.ListOptions{LabelSelector: sel.String()}
	since, until, err := s.times(o)
	if err != nil {
		return opts, err
	}
	var fields []string
	if !since.IsZero() {
		fields = append(fields, fmt.Sprintf("%s=%s", dlv1.FieldSince, since.UTC().Format("2006-01-02T15:04:05Z")))
	}
	if !until.IsZero() {
		fields = append(fields, fmt.Sprintf("%s=%s", dlv1.FieldUntil, until.UTC().Format("2006-01-02T15:04:05Z")))
	}
	opts.FieldSelector = strings.Join(fields, ",")
	return opts, nil
}

// labelValue sanitises a value the way the deadletters API does for its labels: at most 63
// characters of [A-Za-z0-9._-], starting and ending with an alphanumeric, anything else '_'.
func labelValue(s string) string {
	alnum := func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }
	b := []byte(strings.Map(func(r rune) rune {
		if alnum(r) || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s))
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.TrimFunc(string(b), func(r rune) bool { return !alnum(r) })
}
