package render

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// PrometheusRuleGVK is the kind PrometheusRule renders. The controller applies it when the API server
// serves it (a RESTMapper lookup of its GroupKind does not fail with a NoKindMatchError) and
// AlertConfigMap otherwise.
var PrometheusRuleGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}

// RuleFile is a Prometheus rule file (the format of `promtool check rules` and of a PrometheusRule's
// spec).
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a group of rules evaluated together.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is an alerting rule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// YAML returns the rule file as YAML, keys sorted.
func (f RuleFile) YAML() ([]byte, error) { return yaml.Marshal(f) }

// Alert names.
const (
	AlertConsumerLagHigh              = "ConsumerLagHigh"
	AlertRetryBacklogHigh             = "RetryBacklogHigh"
	AlertCircuitOpen                  = "CircuitOpen"
	AlertDispatcherDown               = "DispatcherDown"
	AlertDeadLettersStuck             = "DeadLettersStuck"
	AlertDeadLetterQueueSize          = "DeadLetterQueueSize"
	AlertDeadLetterQueueGrowth        = "DeadLetterQueueGrowth"
	AlertDeadLetterQueueOldestMessage = "DeadLetterQueueOldestMessage"
)

// Severities.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Fixed durations of the alerts whose duration is not a resource field.
const (
	// CircuitOpenFor is how long a circuit must stay open (or half-open) before CircuitOpen fires.
	CircuitOpenFor = time.Minute
	// DispatcherDownFor is how long no consumer may be ready before DispatcherDown fires.
	DispatcherDownFor = 5 * time.Minute
	// DeadLettersStuckFor is how long a dead letter may stay unwritable (the dispatcher retries it
	// every 30s meanwhile) before DeadLettersStuck fires.
	DeadLettersStuckFor = 5 * time.Minute
	// OldestMessageFor is how long the oldest dead letter must stay too old before
	// DeadLetterQueueOldestMessage fires (it damps a refresh that briefly misses a purge).
	OldestMessageFor = 5 * time.Minute
	// GrowthWindow is the least range over which DeadLetterQueueGrowth measures the growth rate; it
	// is widened to three status refreshes when spec.statusRefreshInterval is longer.
	GrowthWindow = 5 * time.Minute
)

// selector renders metric{k1="v1",k2="v2"} with the values quoted.
func selector(metric string, kv ...string) string {
	var b strings.Builder
	b.WriteString(metric)
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(strconv.Quote(kv[i+1]))
	}
	b.WriteByte('}')
	return b.String()
}

// PromDuration formats d as a Prometheus duration ("5m", "1h30m", "24h", "500ms").
func PromDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}} {
		if n := d / u.d; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10) + u.unit)
			d -= n * u.d
		}
	}
	if b.Len() == 0 {
		return "1ms"
	}
	return b.String()
}

// AlertRules renders the pipeline's alert rules, one group:
//
//   - ConsumerLagHigh (warning): the operator's consumer-lag gauge above spec.alerts.maxConsumerLag for
//     spec.alerts.for.
//   - RetryBacklogHigh (warning): the operator's retry-backlog gauge above maxRetryBacklog for
//     spec.alerts.for; only when the policy allows retries.
//   - CircuitOpen (warning): a consumer's circuit breaker not closed (open, or cycling through
//     half-open) for CircuitOpenFor; only when the policy has a circuit breaker. "Not closed" rather
//     than "open": a breaker that keeps failing its half-open probes alternates between the two, and
//     an "== open" condition would restart its pending timer at every probe and never fire.
//   - DispatcherDown (critical): no consumer reporting ready for DispatcherDownFor, including when
//     no series exist at all (nothing scraped); only when replicas > 0. The library mode exports the
//     dispatcher's metrics too, so this applies in template mode as well.
//   - DeadLettersStuck (critical): a consumer holds a record whose dead-letter write failed even
//     stripped to its context headers, for DeadLettersStuckFor: nothing past it is committed on its
//     partition; only when replicas > 0.
//
// Severities come from AlertTiers and every rule has a runbook_url (RunbookURL). The operator's
// gauges are aggregated with max by (namespace, consumerpipeline) so that two operator replicas
// exporting during a leader hand-over raise one alert. Every selector is scoped to the
// pipeline's namespace and name.
func AlertRules(in *Inputs) (RuleFile, error) {
	if err := in.check(); err != nil {
		return RuleFile{}, err
	}
	p := in.Pipeline
	ns, name := p.Namespace, p.Name
	th := PipelineAlertThresholds(p)
	forStr := PromDuration(th.For)
	labels := func() map[string]string {
		return map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelConsumerPipeline: name}
	}
	op := func(metric string) string {
		return "max by (namespace, consumerpipeline) (" +
			selector(metric, opmetrics.LabelNamespace, ns, opmetrics.LabelConsumerPipeline, name) + ")"
	}
	dp := func(metric string) string {
		return selector(metric, "namespace", ns, metrics.LabelPipeline, name)
	}
	what := "ConsumerPipeline " + ns + "/" + name
	getCmd := "kubectl get consumerpipeline " + name + " -n " + ns
	podsCmd := "kubectl get pods -n " + ns + " -l " + LabelPipeline + "=" + labelValue(name)

	rules := []Rule{{
		Alert:  AlertConsumerLagHigh,
		Expr:   op(opmetrics.ConsumerPipelineConsumerLag) + " > " + strconv.FormatInt(th.MaxConsumerLag, 10),
		For:    forStr,
		Labels: labels(),
		Annotations: map[string]string{
			"summary": what + " is falling behind its source topic",
			"description": fmt.Sprintf("The consumer group of %s has had more than %d unconsumed records on topic %s for %s (now {{ $value | humanize }}). Check the consumers and the sink: %s -o wide; %s.",
				what, th.MaxConsumerLag, p.Spec.Source.Topic, forStr, getCmd, podsCmd),
		},
	}}
	comp, err := in.compile()
	if err != nil {
		return RuleFile{}, err
	}
	if comp.MaxAttempts() > 1 {
		rules = append(rules, Rule{
			Alert:  AlertRetryBacklogHigh,
			Expr:   op(opmetrics.ConsumerPipelineRetryBacklog) + " > " + strconv.FormatInt(th.MaxRetryBacklog, 10),
			For:    forStr,
			Labels: labels(),
			Annotations: map[string]string{
				"summary": what + " has a large retry backlog",
				"description": fmt.Sprintf("More than %d records of %s have been waiting in its retry tiers for %s (now {{ $value | humanize }}): deliveries keep failing. Check the sink and the dead letters: %s -o wide; kubectl get deadletterqueue %s -n %s -o yaml.",
					th.MaxRetryBacklog, what, forStr, getCmd, in.DLQ.Name, ns),
			},
		})
	}
	if in.Policy.Spec.CircuitBreaker != nil {
		rules = append(rules, Rule{
			Alert:  AlertCircuitOpen,
			Expr:   "max by (namespace, pipeline) (" + dp(metrics.CircuitState) + ") > " + strconv.Itoa(metrics.CircuitClosed),
			For:    PromDuration(CircuitOpenFor),
			Labels: labels(),
			Annotations: map[string]string{
				"summary": "The circuit breaker of " + what + " is open",
				"description": fmt.Sprintf("A consumer of %s has had its circuit breaker open or half-open for %s: the sink fails most deliveries, so consumption is paused rather than spending attempts. Check the sink: kubectl describe consumerpipeline %s -n %s.",
					what, PromDuration(CircuitOpenFor), name, ns),
			},
		})
	}
	if Replicas(p) > 0 {
		down, while := "(sum("+dp(metrics.Ready)+") or vector(0)) < 1", fmt.Sprintf("although spec.replicas is %d", Replicas(p))
		switch a := AutoscalingOf(p, 0); {
		case a != nil && a.ScaleToZero:
			// A pipeline that may scale to zero runs no pod while nothing is due: only a due lag
			// without a ready consumer is down.
			down += " and on() " + op(opmetrics.ConsumerPipelineDueLag) + " > 0"
			while = "although records are due"
		case a != nil:
			// Not spec.replicas, which the autoscaler changes: each scale would rewrite the rules.
			while = fmt.Sprintf("although spec.autoscaling.minReplicas is %d", a.Min)
		}
		rules = append(rules, Rule{
			Alert:  AlertDispatcherDown,
			Expr:   down,
			For:    PromDuration(DispatcherDownFor),
			Labels: labels(),
			Annotations: map[string]string{
				"summary": "No consumer of " + what + " is ready",
				"description": fmt.Sprintf("No consumer pod of %s has reported ready (%s) for %s %s: its records are not being consumed. Check the pods and their logs: %s; kubectl logs -n %s deployment/%s.",
					what, metrics.Ready, PromDuration(DispatcherDownFor), while, podsCmd, ns, DeploymentName(p)),
			},
		}, Rule{
			Alert:  AlertDeadLettersStuck,
			Expr:   "max by (namespace) (" + dp(metrics.StuckDeadLetters) + ") > 0",
			For:    PromDuration(DeadLettersStuckFor),
			Labels: labels(),
			Annotations: map[string]string{
				"summary": "Dead letters of " + what + " cannot be written",
				"description": fmt.Sprintf("A consumer of %s has held {{ $value | humanize }} record(s) for %s whose dead-letter write to topic %s failed even stripped to its context headers (is the topic there, and may the consumer write to it?): nothing past them is committed on their partitions, and the pod is not ready. The pod's log names topic, partition, offset and the broker's error: %s; kubectl logs -n %s deployment/%s.",
					what, PromDuration(DeadLettersStuckFor), in.DLQ.Spec.Topic.Name, podsCmd, ns, DeploymentName(p)),
			},
		})
	}
	for i := range rules {
		rules[i] = annotate(in.RunbookBaseURL, rules[i])
	}
	return RuleFile{Groups: []RuleGroup{{Name: "retryops.consumerpipeline." + ns + "." + name, Rules: rules}}}, nil
}

// DeadLetterQueueInputs is what a DeadLetterQueue's alert rules are rendered from.
type DeadLetterQueueInputs struct {
	// DLQ is the DeadLetterQueue. Required.
	DLQ *retryv1alpha1.DeadLetterQueue
	// RuleLabels are extra labels on the PrometheusRule and the alert ConfigMap (see Inputs).
	RuleLabels map[string]string
	// RunbookBaseURL is the runbooks' page (see Inputs).
	RunbookBaseURL string
}

// DeadLetterQueueAlertRules renders a DeadLetterQueue's alert rules, one group, from the operator's
// gauges (which count every dead letter in the topic, whoever wrote it: the dispatchers, library-mode
// consumers, a replay):
//
//   - DeadLetterQueueSize (warning): more than spec.alerts.maxMessages dead letters for maxMessagesFor.
//   - DeadLetterQueueGrowth (critical): the queue grew by more than maxGrowthPerMinute per minute,
//     measured as deriv() of the message gauge over GrowthWindow, for maxGrowthFor. This is net growth:
//     while retention deletes old dead letters it understates arrivals, but then the queue is at its
//     retention limit and DeadLetterQueueSize speaks instead.
//   - DeadLetterQueueOldestMessage (warning): the oldest dead letter older than maxOldestAge for
//     OldestMessageFor. The timestamp gauge is absent while the queue is empty, and a zero value is
//     ignored.
//   - DeadLetterQueueSizeEscalation and DeadLetterQueueOldestMessageEscalation (critical, escalation
//     engineering-lead): the same two measures past escalateMessages (for maxMessagesFor) and
//     escalateOldestAge (for OldestMessageEscalationFor).
//
// Severities and the escalation label come from AlertTiers; every rule has a runbook_url.
func DeadLetterQueueAlertRules(in *DeadLetterQueueInputs) (RuleFile, error) {
	if in == nil || in.DLQ == nil {
		return RuleFile{}, fmt.Errorf("render: DeadLetterQueueInputs.DLQ is required")
	}
	d := in.DLQ
	ns, name := d.Namespace, d.Name
	th := DeadLetterQueueAlertThresholds(d)
	labels := func() map[string]string {
		return map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelDeadLetterQueue: name}
	}
	sel := func(metric string) string {
		return selector(metric, opmetrics.LabelNamespace, ns, opmetrics.LabelDeadLetterQueue, name)
	}
	const by = "max by (namespace, deadletterqueue) ("
	window := DeadLetterQueueGrowthWindow(d)
	what := "DeadLetterQueue " + ns + "/" + name
	topic := string(d.Spec.Topic.Name)
	inspect := "kubectl get deadletterqueue " + name + " -n " + ns + " -o yaml"
	rules := []Rule{{
		Alert:  AlertDeadLetterQueueSize,
		Expr:   by + sel(opmetrics.DeadLetterQueueMessages) + ") > " + strconv.FormatInt(th.MaxMessages, 10),
		For:    PromDuration(th.MaxMessagesFor),
		Labels: labels(),
		Annotations: map[string]string{
			"summary": fmt.Sprintf("%s holds more than %d dead letters", what, th.MaxMessages),
			"description": fmt.Sprintf("%s (topic %s) has held more than %d dead letters for %s (now {{ $value | humanize }}). Inspect them (reasons, pipelines), then replay or purge: %s.",
				what, topic, th.MaxMessages, PromDuration(th.MaxMessagesFor), inspect),
		},
	}, {
		Alert:  AlertDeadLetterQueueGrowth,
		Expr:   by + "deriv(" + sel(opmetrics.DeadLetterQueueMessages) + "[" + PromDuration(window) + "])) * 60 > " + strconv.FormatInt(th.MaxGrowthPerMinute, 10),
		For:    PromDuration(th.MaxGrowthFor),
		Labels: labels(),
		Annotations: map[string]string{
			"summary": "Dead letters are arriving fast in " + what,
			"description": fmt.Sprintf("%s (topic %s) has grown by more than %d dead letters per minute for %s (now {{ $value | humanize }} per minute). Find the failing pipelines and reasons: %s.",
				what, topic, th.MaxGrowthPerMinute, PromDuration(th.MaxGrowthFor), inspect),
		},
	}, {
		Alert:  AlertDeadLetterQueueOldestMessage,
		Expr:   "time() - min by (namespace, deadletterqueue) (" + sel(opmetrics.DeadLetterQueueOldestMessageTimestamp) + " > 0) > " + strconv.FormatInt(int64(th.MaxOldestAge/time.Second), 10),
		For:    PromDuration(OldestMessageFor),
		Labels: labels(),
		Annotations: map[string]string{
			"summary": fmt.Sprintf("%s has dead letters older than %s", what, PromDuration(th.MaxOldestAge)),
			"description": fmt.Sprintf("The oldest dead letter in %s (topic %s) is {{ $value | humanizeDuration }} old, more than %s: nobody is handling the queue. Replay or purge it: %s.",
				what, topic, PromDuration(th.MaxOldestAge), inspect),
		},
	}, {
		Alert:  AlertDeadLetterQueueSizeEscalation,
		Expr:   by + sel(opmetrics.DeadLetterQueueMessages) + ") > " + strconv.FormatInt(th.EscalateMessages, 10),
		For:    PromDuration(th.MaxMessagesFor),
		Labels: labels(),
		Annotations: map[string]string{
			"summary": fmt.Sprintf("%s holds more than %d dead letters: escalate to the engineering lead", what, th.EscalateMessages),
			"description": fmt.Sprintf("%s (topic %s) has held more than %d dead letters for %s (now {{ $value | humanize }}), past spec.alerts.escalateMessages: declare an incident, find the failing pipelines and reasons, then replay or purge: %s.",
				what, topic, th.EscalateMessages, PromDuration(th.MaxMessagesFor), inspect),
		},
	}, {
		Alert:  AlertDeadLetterQueueOldestMessageEscalation,
		Expr:   "time() - min by (namespace, deadletterqueue) (" + sel(opmetrics.DeadLetterQueueOldestMessageTimestamp) + " > 0) > " + strconv.FormatInt(int64(th.EscalateOldestAge/time.Second), 10),
		For:    PromDuration(OldestMessageEscalationFor),
		Labels: labels(),
		Annotations: map[string]string{
			"summary": fmt.Sprintf("%s has dead letters older than %s: escalate to the engineering lead", what, PromDuration(th.EscalateOldestAge)),
			"description": fmt.Sprintf("The oldest pending dead letter in %s (topic %s) is {{ $value | humanizeDuration }} old, past spec.alerts.escalateOldestAge (%s): the warning went unanswered. Declare an incident and decide its fate (replay, resolve or purge): %s.",
				what, topic, PromDuration(th.EscalateOldestAge), inspect),
		},
	}}
	for i := range rules {
		rules[i] = annotate(in.RunbookBaseURL, rules[i])
	}
	return RuleFile{Groups: []RuleGroup{{Name: "retryops.deadletterqueue." + ns + "." + name, Rules: rules}}}, nil
}

// RuleFileKey is the ConfigMap key of a rule file: "<namespace>.<name>.<kind>.rules.yaml", distinct
// across resources so that several rule ConfigMaps can be projected into one directory.
func RuleFileKey(namespace, name, kind string) string {
	suffix := "." + kind + ".rules.yaml"
	return shorten(namespace+"."+name, maxNameLength-len(suffix)) + suffix
}

func dlqLabels(d *retryv1alpha1.DeadLetterQueue) map[string]string {
	return map[string]string{
		LabelName:            "retry-deadletterqueue",
		LabelManagedBy:       LabelManagedByValue,
		LabelDeadLetterQueue: labelValue(d.Name),
		LabelComponent:       "alerts",
	}
}

// withExtra adds extra labels that ours do not already set.
func withExtra(ours, extra map[string]string) map[string]string {
	out := maps.Clone(extra)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, ours)
	return out
}

// DeadLetterQueueGrowthWindow is the range over which the DeadLetterQueueGrowth alert of d measures
// the growth rate: GrowthWindow, widened to three refreshes when spec.statusRefreshInterval is
// longer (saturating: an interval an author set near the largest Duration does not wrap).
func DeadLetterQueueGrowthWindow(d *retryv1alpha1.DeadLetterQueue) time.Duration {
	r := d.Spec.StatusRefreshInterval
	if r == nil || r.Duration <= GrowthWindow/3 {
		return GrowthWindow
	}
	if r.Duration > math.MaxInt64/3 {
		return math.MaxInt64
	}
	return 3 * r.Duration
}
