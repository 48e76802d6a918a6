package dlqcli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqui"
)

// actKind describes one of the commands that create a DeadLetterAction.
type actKind struct {
	action  retryv1alpha1.DeadLetterActionType
	short   string
	long    string
	example string
}

var (
	actReplay = actKind{
		action: retryv1alpha1.DeadLetterReplay,
		short:  "Replay dead letters to their pipeline (or a pipeline or topic you name)",
		long: `Replay creates a DeadLetterAction that produces each selected dead letter's original record
again, with its Idempotency-Key, to the first retry tier of the pipeline that dead-lettered it (only that
pipeline's consumer group reads it), and records it as Replayed. Without selectors it replays every
Pending dead letter of the queue. The manager runs the action over the dead letters present when it
starts; --wait follows it to the end.`,
		example: `  # Replay what failed with a timeout in the last hour, 50 records a second, and wait
  kubectl dlq replay orders-dlq --error-type timeout --since 1h --rate 50 --wait

  # See what would be replayed, without replaying
  kubectl dlq replay orders-dlq --reason max_retries_exceeded --dry-run --wait

  # Replay two dead letters to another pipeline
  kubectl dlq replay orders-dlq 0/42 1/7 --to-pipeline orders-v2`,
	}
	actResolve = actKind{
		action: retryv1alpha1.DeadLetterResolve,
		short:  "Mark dead letters Resolved (handled), with a note",
		long: `Resolve creates a DeadLetterAction that records the selected dead letters as Resolved, with your
note and your name, in the queue's record of decisions. Name dead letters as PARTITION/OFFSET, or
select them with flags.`,
		example: `  # Two dead letters fixed by hand
  kubectl dlq resolve orders-dlq 0/42 1/7 --note "re-entered in the ERP, ticket OPS-123"

  # Every pending validation error of one pipeline
  kubectl dlq resolve orders-dlq --pipeline orders --error-type ValidationError --note "bad input, customer told"`,
	}
	actIgnore = actKind{
		action: retryv1alpha1.DeadLetterIgnore,
		short:  "Mark dead letters Ignored (not worth handling), with a note",
		long: `Ignore creates a DeadLetterAction that records the selected dead letters as Ignored, with your
note and your name, in the queue's record of decisions. Name dead letters as PARTITION/OFFSET, or
select them with flags.`,
		example: `  # Test traffic that reached production
  kubectl dlq ignore orders-dlq --reason non_retriable_error --key test-1 --key test-2 --note "load test"`,
	}
	actPurge = actKind{
		action: retryv1alpha1.DeadLetterPurge,
		short:  "Delete old dead letters that were dealt with",
		long: `Purge creates a DeadLetterAction that deletes, per partition, the longest prefix of dead letters
older than --before whose state is one of --states (by default Resolved, Ignored and Replayed; never
Pending). Kafka deletes only prefixes: the first dead letter of a partition that does not match stops
the purge there, and the outcome names it.`,
		example: `  # What would go: dealt-with dead letters older than 30 days
  kubectl dlq purge orders-dlq --before 30d --dry-run --wait

  # Delete resolved ones older than a week
  kubectl dlq purge orders-dlq --before 1w --states Resolved --wait`,
	}
)

// actOptions are the flags of replay, resolve, ignore and purge.
type actOptions struct {
	kind actKind
	sel  selectorFlags

	keys       []string
	headers    []string
	note       string
	toPipeline string
	toTopic    string
	rate       int32
	maxRecords int64
	maxReplays int32
	dryRun     bool
	wait       bool
	timeout    time.Duration
}

func newActCommand(o *Options, kind actKind) *cobra.Command {
	a := &actOptions{kind: kind}
	var out *outputFlags
	verb := strings.ToLower(string(kind.action))
	use := verb + " QUEUE [PARTITION/OFFSET...]"
	if kind.action == retryv1alpha1.DeadLetterPurge {
		use = verb + " QUEUE --before AGE"
	}
	cmd := &cobra.Command{
		Use:               use,
		Short:             kind.short,
		Long:              kind.long,
		Example:           kind.example,
		Args:              queueArgs(kind.action != retryv1alpha1.DeadLetterPurge),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o); err != nil {
				return err
			}
			r, err := a.request(o, args[0], args[1:])
			if err != nil {
				return err
			}
			return a.run(cmd, o, r)
		},
	}
	f := cmd.Flags()
	a.sel.addFlags(cmd, o, kind.action == retryv1alpha1.DeadLetterPurge)
	f.StringArrayVar(&a.keys, "key", nil, "select dead letters whose record key is exactly this (repeatable)")
	f.StringArrayVar(&a.headers, "header", nil, "select dead letters carrying this header, NAME=VALUE (repeatable)")
	f.StringVar(&a.note, "note", "", "why: kept with the decision in the record of decisions")
	if kind.action == retryv1alpha1.DeadLetterResolve || kind.action == retryv1alpha1.DeadLetterIgnore {
		_ = cmd.MarkFlagRequired("note")
	}
	if kind.action == retryv1alpha1.DeadLetterReplay {
		f.StringVar(&a.toPipeline, "to-pipeline", "", "replay to this ConsumerPipeline's first retry tier instead of each dead letter's own pipeline")
		f.StringVar(&a.toTopic, "to-topic", "", "replay to this Kafka topic (every consumer group of it receives the records)")
		f.Int32Var(&a.rate, "rate", 0, "at most this many records a second (default 100)")
		f.Int32Var(&a.maxReplays, "max-replays", 0, "skip dead letters already replayed this many times (default 3)")
		cmd.MarkFlagsMutuallyExclusive("to-pipeline", "to-topic")
		_ = cmd.RegisterFlagCompletionFunc("to-pipeline", completeNames(o, "consumerpipelines"))
	}
	f.Int64Var(&a.maxRecords, "max-records", 0, "stop after acting on this many dead letters")
	f.BoolVar(&a.dryRun, "dry-run", false, "count and list what would be done, change nothing")
	f.BoolVar(&a.wait, "wait", false, "follow the action until it completes (a progress bar when stderr is a terminal), then print the outcome")
	f.DurationVar(&a.timeout, "timeout", 0, "with --wait, give up waiting after this long (the action goes on); 0 waits for ever")
	out = addOutputFlags(cmd, o, "a line naming the action", outName, outJSON, outYAML)
	return cmd
}

// request is the action the flags ask for, checked as Build checks it: before any request, so that
// a usage error needs no cluster.
func (a *actOptions) request(o *Options, queue string, records []string) (dlqui.ActionRequest, error) {
	f, err := a.sel.filter(o)
	if err != nil {
		return dlqui.ActionRequest{}, err
	}
	r := dlqui.ActionRequest{Kind: a.kind.action, Queue: queue, Filter: f, Keys: a.keys, Note: a.note, DryRun: a.dryRun,
		Rate: a.rate, MaxRecords: a.maxRecords, MaxReplays: a.maxReplays}
	for _, h := range a.headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || name == "" {
			return r, usagef("--header %q: want NAME=VALUE", h)
		}
		r.Headers = append(r.Headers, retryv1alpha1.HeaderMatch{Name: name, Value: value})
	}
	for _, s := range records {
		rec, err := dlqui.ParseRecord(s)
		if err != nil {
			return r, usagef("%v", err)
		}
		r.Records = append(r.Records, rec)
	}
	switch {
	case a.toPipeline != "":
		r.Target = &retryv1alpha1.ReplayTarget{Pipeline: a.toPipeline}
	case a.toTopic != "":
		r.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(a.toTopic)}
	}
	return r, flagError(r.Check())
}

// flagError is Build's refusal as a usage error in the words of the flags.
func flagError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dlqui.ErrPurgeWithoutBefore):
		return usagef("purge needs --before (for example --before 30d): only dead letters older than that are deleted")
	case errors.Is(err, dlqui.ErrPurgePending):
		return usagef("purge never deletes Pending dead letters: --states takes Resolved, Ignored and Replayed")
	}
	return usagef("%v", err)
}

func (a *actOptions) run(cmd *cobra.Command, o *Options, r dlqui.ActionRequest) error {
	ctx := ctxOf(cmd)
	c, err := o.client()
	if err != nil {
		return err
	}
	if _, err := c.getQueue(ctx, r.Queue); err != nil {
		return queueError(err, r.Queue, c.namespace)
	}
	user, err := c.whoAmI(ctx)
	if err != nil {
		return err
	}
	obj, err := r.Build(c.namespace, user)
	if err != nil {
		return flagError(err)
	}
	created, err := c.createAction(ctx, obj)
	if err != nil {
		return err
	}
	if err := printCreated(o, created); err != nil {
		return err
	}
	if !a.wait {
		return nil
	}
	return waitForAction(ctx, o, c, created, a.timeout)
}

// printCreated says what was created, kubectl create's way.
func printCreated(o *Options, a *retryv1alpha1.DeadLetterAction) error {
	switch o.output {
	case "json", "yaml":
		return printObject(o, a)
	case "name":
		_, err := fmt.Fprintln(o.streams.Out, actionRef(a.Name))
		return err
	}
	mode := ""
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		mode = " (dry run)"
	}
	_, err := fmt.Fprintf(o.streams.Out, "%s created%s\n", actionRef(a.Name), mode)
	return err
}

// actionRef is kubectl's name for an action: deadletteraction.retry.retryops.dev/NAME.
func actionRef(name string) string {
	return "deadletteraction." + retryv1alpha1.GroupVersion.Group + "/" + name
}
