package dlqcli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// actKind describes one of the commands that create a DeadLetterAction.
type actKind struct {
	action  v1.DeadLetterActionType
	short   string
	long    string
	example string
}

var (
	actReplay = actKind{
		action: v1.DeadLetterReplay,
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
		action: v1.DeadLetterResolve,
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
		action: v1.DeadLetterIgnore,
		short:  "Mark dead letters Ignored (not worth handling), with a note",
		long: `Ignore creates a DeadLetterAction that records the selected dead letters as Ignored, with your
note and your name, in the queue's record of decisions. Name dead letters as PARTITION/OFFSET, or
select them with flags.`,
		example: `  # Test traffic that reached production
  kubectl dlq ignore orders-dlq --reason non_retriable_error --key test-1 --key test-2 --note "load test"`,
	}
	actPurge = actKind{
		action: v1.DeadLetterPurge,
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
	verb := strings.ToLower(string(kind.action))
	use := verb + " QUEUE [PARTITION/OFFSET...]"
	if kind.action == v1.DeadLetterPurge {
		use = verb + " QUEUE --before AGE"
	}
	cmd := &cobra.Command{
		Use:               use,
		Short:             kind.short,
		Long:              kind.long,
		Example:           kind.example,
		Args:              queueArgs(kind.action != v1.DeadLetterPurge),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.run(cmd, o, args[0], args[1:])
		},
	}
	f := cmd.Flags()
	a.sel.addFlags(cmd, o, kind.action == v1.DeadLetterPurge)
	f.StringArrayVar(&a.keys, "key", nil, "select dead letters whose record key is exactly this (repeatable)")
	f.StringArrayVar(&a.headers, "header", nil, "select dead letters carrying this header, NAME=VALUE (repeatable)")
	f.StringVar(&a.note, "note", "", "why: kept with the decision in the record of decisions")
	if kind.action == v1.DeadLetterResolve || kind.action == v1.DeadLetterIgnore {
		_ = cmd.MarkFlagRequired("note")
	}
	if kind.action == v1.DeadLetterReplay {
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
	f.StringVarP(&o.output, "output", "o", "", "output format: name, json or yaml (default: a line naming the action)")
	return cmd
}

// spec builds the DeadLetterAction's spec from the flags.
func (a *actOptions) spec(o *Options, queue string, records []string, user string) (v1.DeadLetterActionSpec, error) {
	spec := v1.DeadLetterActionSpec{Queue: queue, Action: a.kind.action, Note: a.note, RequestedBy: user, Mode: v1.ActionModeRun}
	if a.dryRun {
		spec.Mode = v1.ActionModeDryRun
	}
	sel, err := a.sel.actionSelector(o)
	if err != nil {
		return spec, err
	}
	for _, k := range a.keys {
		sel.Keys = append(sel.Keys, v1.RecordKey(k))
	}
	for _, h := range a.headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || name == "" {
			return spec, usagef("--header %q: want NAME=VALUE", h)
		}
		sel.Headers = append(sel.Headers, v1.HeaderMatch{Name: name, Value: value})
	}
	for _, r := range records {
		ref, err := parseRecordRef(r)
		if err != nil {
			return spec, err
		}
		sel.Records = append(sel.Records, v1.RecordRef(ref))
	}
	if a.kind.action == v1.DeadLetterPurge && sel.Before == nil {
		return spec, usagef("purge needs --before (for example --before 30d): only dead letters older than that are deleted")
	}
	if !sel.empty() {
		spec.Selector = &sel.DeadLetterSelector
	}
	switch {
	case a.toPipeline != "":
		spec.Target = &v1.ReplayTarget{Pipeline: a.toPipeline}
	case a.toTopic != "":
		spec.Target = &v1.ReplayTarget{Topic: v1.TopicName(a.toTopic)}
	}
	if a.rate != 0 {
		spec.Rate = &v1.ReplayRate{RecordsPerSecond: a.rate}
	}
	if a.maxRecords != 0 {
		spec.MaxRecords = ptr.To(a.maxRecords)
	}
	if a.maxReplays != 0 {
		spec.MaxReplays = a.maxReplays
	}
	return spec, nil
}

func (a *actOptions) run(cmd *cobra.Command, o *Options, queue string, records []string) error {
	switch o.output {
	case "", "name", "json", "yaml":
	default:
		return usagef("-o %q: %s takes name, json or yaml", o.output, cmd.Name())
	}
	ctx := ctxOf(cmd)
	c, err := o.client()
	if err != nil {
		return err
	}
	if _, err := c.getQueue(ctx, queue); err != nil {
		return queueError(err, queue, c.namespace)
	}
	user, err := c.whoAmI(ctx)
	if err != nil {
		return err
	}
	spec, err := a.spec(o, queue, records, user)
	if err != nil {
		return err
	}
	obj := &v1.DeadLetterAction{
		ObjectMeta: metav1.ObjectMeta{GenerateName: generateName(a.kind.action, queue), Namespace: c.namespace},
		Spec:       spec,
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

// generateName is "<action>-<queue>-", cut so the generated name stays short.
func generateName(action v1.DeadLetterActionType, queue string) string {
	p := strings.ToLower(string(action)) + "-" + queue
	if len(p) > 50 {
		p = strings.TrimRight(p[:50], "-.")
	}
	return p + "-"
}

// parseRecordRef checks a PARTITION/OFFSET argument.
func parseRecordRef(s string) (string, error) {
	var p int32
	var off int64
	if n, err := fmt.Sscanf(s, "%d/%d", &p, &off); err != nil || n != 2 || p < 0 || off < 0 || fmt.Sprintf("%d/%d", p, off) != s {
		return "", usagef("%q is not a dead letter: want PARTITION/OFFSET, for example 0/42", s)
	}
	return s, nil
}

// printCreated says what was created, kubectl create's way.
func printCreated(o *Options, a *v1.DeadLetterAction) error {
	switch o.output {
	case "json", "yaml":
		return printObject(o, a)
	case "name":
		_, err := fmt.Fprintln(o.streams.Out, actionRef(a.Name))
		return err
	}
	mode := ""
	if a.Spec.Mode == v1.ActionModeDryRun {
		mode = " (dry run)"
	}
	_, err := fmt.Fprintf(o.streams.Out, "%s created%s\n", actionRef(a.Name), mode)
	return err
}

// actionRef is kubectl's name for an action: deadletteraction.retry.retryops.dev/NAME.
func actionRef(name string) string { return "deadletteraction." + v1.GroupVersion.Group + "/" + name }
