package dlqcli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqui"
)

var stateNames = []string{string(retryv1alpha1.DeadLetterPending), string(retryv1alpha1.DeadLetterReplayed), string(retryv1alpha1.DeadLetterResolved), string(retryv1alpha1.DeadLetterIgnored)}

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
	f.Var(newSelectorValues(&s.reasons), "reason", "only dead letters with one of these reasons (max_retries_exceeded, non_retriable_error, deadline_exceeded, undeliverable, malformed)")
	f.Var(newSelectorValues(&s.errorTypes), "error-type", "only dead letters whose last error has one of these types")
	f.Var(newSelectorValues(&s.pipelines), "pipeline", "only dead letters from one of these ConsumerPipelines (NAME in the namespace, or NAMESPACE/NAME)")
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

// selectorValues is a comma-separated, repeatable selector flag that refuses an empty value: an
// empty --pipeline "$PIPELINE" would otherwise leave the filter out, and an action on a queue that
// several pipelines share would act on every pipeline's dead letters.
type selectorValues struct {
	pflag.Value
}

func newSelectorValues(p *[]string) selectorValues {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.StringSliceVar(p, "v", nil, "")
	return selectorValues{fs.Lookup("v").Value}
}

func (v selectorValues) Set(s string) error {
	if slices.Contains(strings.Split(s, ","), "") {
		return fmt.Errorf("an empty value selects nothing; leave the flag out to select every dead letter")
	}
	return v.Value.Set(s)
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

// filter is the flags as the console's filter: the one place (dlqui.Filter) where a list's options
// and an action's selector are built, so that list shows what the action would act on.
func (s *selectorFlags) filter(o *Options) (dlqui.Filter, error) {
	states, err := s.checkedStates()
	if err != nil {
		return dlqui.Filter{}, err
	}
	since, until, err := s.times(o)
	if err != nil {
		return dlqui.Filter{}, err
	}
	return dlqui.Filter{Reasons: s.reasons, ErrorTypes: s.errorTypes, Pipelines: s.pipelines, States: states,
		Since: since.Time, Until: until.Time}, nil
}

// namespace is the namespace of the plugin's clients ("" before they are made).
func (o *Options) namespace() string {
	if o.c != nil {
		return o.c.namespace
	}
	return ""
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

// listOptions builds the deadletters API list options for queue: exact field selectors for the
// queue, reason, error type and pipeline, since and until, and the state label.
func (s *selectorFlags) listOptions(o *Options, queue string) (metav1.ListOptions, error) {
	f, err := s.filter(o)
	if err != nil {
		return metav1.ListOptions{}, err
	}
	return f.ListOptions(o.namespace(), queue), nil
}
