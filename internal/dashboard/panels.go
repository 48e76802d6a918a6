package dashboard

import (
	"fmt"
	"time"

	"github.com/retryops/retry-operator/internal/render"
)

// Rows, in order.
const (
	RowRetryPolicy   = "Retry Policy Monitoring"
	RowDeadLetters   = "Dead-letter queues"
	RowConsumers     = "Consumers"
	rateInterval     = "$__rate_interval"
	legendPipeline   = "{{namespace}}/{{consumerpipeline}}"
	legendDispatcher = "{{namespace}}/{{pipeline}}"
	legendQueue      = "{{namespace}}/{{deadletterqueue}}"
)

// Seed 003's escalation to the engineering lead: more than 1000 failed documents or one stuck for
// more than 7 days.
const (
	escalationDeadLetters = 1000
	escalationOldestAge   = 7 * 24 * time.Hour
)

// Selectors of each family, scoped by the dashboard's variables. The dispatcher's series carry the
// pipeline as "pipeline" and the namespace as Prometheus' target label; the operator's name the
// resource by its kind.
const (
	pipelineScope   = `namespace=~"$namespace", consumerpipeline=~"$pipeline"`
	dispatcherScope = `namespace=~"$namespace", pipeline=~"$pipeline"`
	queueScope      = `namespace=~"$namespace", deadletterqueue=~"$queue"`
)

// Variables are the dashboard's variables besides the data source, in order.
var Variables = []Variable{
	{Name: "namespace", Label: "Namespace", Description: "Namespaces with a ConsumerPipeline.",
		Selector: "retryops_consumerpipeline_ready_replicas", Of: "namespace"},
	{Name: "pipeline", Label: "Pipeline", Description: "ConsumerPipelines of the namespaces chosen.",
		Selector: `retryops_consumerpipeline_ready_replicas{namespace=~"$namespace"}`, Of: "consumerpipeline"},
	{Name: "queue", Label: "Dead letter queue", Description: "DeadLetterQueues of the namespaces chosen.",
		Selector: `retryops_deadletterqueue_messages{namespace=~"$namespace"}`, Of: "deadletterqueue"},
}

// maxByPipeline is one operator gauge per pipeline: only the leader sets them, but a hand-over may
// briefly show two replicas' series (as the alert rules, max by).
func maxByPipeline(metric string) string {
	return fmt.Sprintf("max by (namespace, consumerpipeline) (%s{%s})", metric, pipelineScope)
}

func maxByQueue(metric string) string {
	return fmt.Sprintf("max by (namespace, deadletterqueue) (%s{%s})", metric, queueScope)
}

func quantile(q float64, metric string) Query {
	return Query{
		Expr:   fmt.Sprintf("histogram_quantile(%g, sum by (le, namespace, pipeline) (rate(%s_bucket{%s}[%s])))", q, metric, dispatcherScope, rateInterval),
		Legend: fmt.Sprintf("%s p%g", legendDispatcher, q*100),
	}
}

// Panels lists the dashboard's panels, row by row. The first row holds seed 003's five panels, each
// titled with the seed's name and what it is here.
func Panels() []Panel {
	return []Panel{
		{Row: RowRetryPolicy, Kind: Gauge, Width: 6, Unit: unitCount,
			Title: "Stuck documents: records waiting in retry tiers",
			Description: "Records each pipeline holds in its retry tiers, waiting for their due time or for delivery (the pipeline's status.retryBacklog). " +
				"Orange from 50, red from 200 (seed 003's warning and critical). A backlog that keeps growing means the sink keeps failing: look at the dead letters by reason and the circuit state.",
			Queries:    []Query{{Expr: maxByPipeline("retryops_consumerpipeline_retry_backlog"), Legend: legendPipeline}},
			Thresholds: []Step{base, {50, colorWarning}, {200, colorCritical}}},
		{Row: RowRetryPolicy, Kind: TimeSeries, Width: 9, Unit: unitRecordsPerSec,
			Title:       "Retry rate per pipeline",
			Description: "Records the dispatchers wrote to a retry tier per second (outcome retried): each is a failed delivery the policy will retry at its due time.",
			Queries: []Query{{Expr: fmt.Sprintf(`sum by (namespace, pipeline) (rate(retryops_dispatcher_records_total{%s, outcome="retried"}[%s]))`, dispatcherScope, rateInterval),
				Legend: legendDispatcher}}},
		{Row: RowRetryPolicy, Kind: TimeSeries, Width: 9, Unit: unitRecordsPerSec,
			Title: "Max retries exceeded: dead letters by reason",
			Description: "Records written to the dead letter queue per second, by reason: max_retries_exceeded, non_retriable_error, deadline_exceeded, undeliverable, malformed. " +
				"Any rise needs a look at the queue (kubectl dlq); a steady max_retries_exceeded means the sink failed for longer than the whole schedule.",
			Queries: []Query{{Expr: fmt.Sprintf("sum by (reason) (rate(retryops_dispatcher_dead_letters_total{%s}[%s]))", dispatcherScope, rateInterval),
				Legend: "{{reason}}"}}},
		{Row: RowRetryPolicy, Kind: TimeSeries, Width: 12, Unit: unitCount,
			Title: "Backoff skipped: retries not yet due",
			Description: "Records in the retry tiers whose due time has not come: the retry backlog minus the tier records already due (due lag minus consumer lag). " +
				"The dispatcher leaves them in Kafka, their partitions paused, instead of delivering early; this is the backoff at work.",
			Queries: []Query{{Expr: fmt.Sprintf("clamp_min(%s - (%s - %s), 0)", maxByPipeline("retryops_consumerpipeline_retry_backlog"),
				maxByPipeline("retryops_consumerpipeline_due_lag"), maxByPipeline("retryops_consumerpipeline_consumer_lag")), Legend: legendPipeline}}},
		{Row: RowRetryPolicy, Kind: Heatmap, Width: 12, Unit: unitSeconds,
			Title: "Job duration: delivery duration",
			Description: "How long one delivery to the sink took, as a histogram over time (the dispatcher's delivery duration buckets). " +
				"A band moving up means the sink slows down; deliveries near the policy's attemptTimeout end as timeouts and retries.",
			Queries: []Query{{Expr: fmt.Sprintf("sum by (le) (rate(retryops_dispatcher_delivery_duration_seconds_bucket{%s}[%s]))", dispatcherScope, rateInterval),
				Legend: "{{le}}"}}},

		{Row: RowDeadLetters, Kind: TimeSeries, Width: 8, Unit: unitCount,
			Title: "Dead letters held per queue",
			Description: fmt.Sprintf("Dead letters each DeadLetterQueue's topic holds (status.messages). Orange from %d (the DeadLetterQueueSize alert's default), red from %d (seed 003's escalation to the engineering lead). "+
				"Replay, resolve, ignore or purge them with kubectl dlq.", render.DefaultDLQMaxMessages, escalationDeadLetters),
			Queries:    []Query{{Expr: maxByQueue("retryops_deadletterqueue_messages"), Legend: legendQueue}},
			Thresholds: []Step{base, {render.DefaultDLQMaxMessages, colorWarning}, {escalationDeadLetters, colorCritical}}},
		{Row: RowDeadLetters, Kind: TimeSeries, Width: 8, Unit: unitRecordsPerMin,
			Title: "Dead-letter growth per queue",
			Description: fmt.Sprintf("Net growth of each queue per minute, as the DeadLetterQueueGrowth alert measures it (deriv over %s); red from its default of %d per minute. "+
				"Growth that does not stop is a sink or a poison source: look at the reasons.", render.PromDuration(render.GrowthWindow), render.DefaultDLQMaxGrowthPerMin),
			Queries: []Query{{Expr: fmt.Sprintf("max by (namespace, deadletterqueue) (deriv(retryops_deadletterqueue_messages{%s}[%s])) * 60", queueScope, render.PromDuration(render.GrowthWindow)),
				Legend: legendQueue}},
			Thresholds: []Step{base, {render.DefaultDLQMaxGrowthPerMin, colorCritical}}},
		{Row: RowDeadLetters, Kind: TimeSeries, Width: 8, Unit: unitSeconds,
			Title: "Oldest pending dead letter per queue",
			Description: fmt.Sprintf("Age of the oldest dead letter no action has replayed, resolved or ignored. Orange from %s (the DeadLetterQueueOldestMessage alert's default), red from %s (seed 003's escalation). "+
				"Nobody is handling the queue: decide its dead letters' fate.", render.PromDuration(render.DefaultDLQMaxOldestAge), render.PromDuration(escalationOldestAge)),
			Queries:    []Query{{Expr: "time() - " + maxByQueue("retryops_deadletterqueue_oldest_message_timestamp_seconds"), Legend: legendQueue}},
			Thresholds: []Step{base, {render.DefaultDLQMaxOldestAge.Seconds(), colorWarning}, {escalationOldestAge.Seconds(), colorCritical}}},
		{Row: RowDeadLetters, Kind: TimeSeries, Width: 12, Unit: unitCount,
			Title:       "Dead letters held by reason",
			Description: "Dead letters each queue holds, by their reason header (status.reasons): which failure fills the queue.",
			Queries: []Query{{Expr: fmt.Sprintf("max by (namespace, deadletterqueue, reason) (retryops_deadletterqueue_messages_by_reason{%s})", queueScope),
				Legend: legendQueue + " {{reason}}"}}},
		{Row: RowDeadLetters, Kind: TimeSeries, Width: 12, Unit: unitCount,
			Title: "Dead-letter actions",
			Description: "DeadLetterActions that ended since the operator started, by action and result, and the dead letters they acted on (all namespaces: the counters carry no namespace). " +
				"A Failed action says why in its status (kubectl dlq actions).",
			Queries: []Query{
				{Expr: "sum by (action, result) (retryops_deadletter_actions_total)", Legend: "{{action}} {{result}}"},
				{Expr: "sum by (action) (retryops_deadletter_action_records_total)", Legend: "dead letters {{action}}"},
			}},

		{Row: RowConsumers, Kind: TimeSeries, Width: 12, Unit: unitCount,
			Title: "Consumer lag and due lag",
			Description: "Consumer lag: source records the pipeline's group has not consumed. Due lag: those plus the retry-tier records already due, what the autoscaler scales on. " +
				"A due lag that stays up means too few consumers or a slow sink.",
			Queries: []Query{
				{Expr: maxByPipeline("retryops_consumerpipeline_consumer_lag"), Legend: legendPipeline + " consumer lag"},
				{Expr: maxByPipeline("retryops_consumerpipeline_due_lag"), Legend: legendPipeline + " due lag"},
			}},
		{Row: RowConsumers, Kind: StateTimeline, Width: 12, Unit: unitCount,
			Title: "Circuit state",
			Description: "The circuit breaker of each pipeline's dispatchers, the worst replica's: Closed, HalfOpen (probing) or Open (consumption paused after too many failures; always Closed without a breaker). " +
				"Open means the sink is failing: fix it, the circuit closes by itself.",
			Queries: []Query{{Expr: fmt.Sprintf("max by (namespace, pipeline) (retryops_dispatcher_circuit_state{%s})", dispatcherScope), Legend: legendDispatcher}},
			States:  []State{{0, "Closed", colorOK}, {1, "HalfOpen", colorCaution}, {2, "Open", colorCritical}}},
		{Row: RowConsumers, Kind: TimeSeries, Width: 12, Unit: unitSeconds,
			Title:       "Retry lateness",
			Description: "How late retries start after their due time (p50 and p99). Seconds late means the dispatchers cannot keep up with what is due: more replicas, or a faster sink.",
			Queries:     []Query{quantile(0.5, "retryops_dispatcher_retry_lateness_seconds"), quantile(0.99, "retryops_dispatcher_retry_lateness_seconds")}},
		{Row: RowConsumers, Kind: TimeSeries, Width: 12, Unit: unitCount,
			Title:       "Ready consumers",
			Description: "Ready consumer pods of each pipeline; 0 is normal for a pipeline scaled to zero between bursts, not for one with due lag.",
			Queries:     []Query{{Expr: maxByPipeline("retryops_consumerpipeline_ready_replicas"), Legend: legendPipeline}}},
	}
}
