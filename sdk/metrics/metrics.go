package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the collectors of one pipeline, with the label values fixed up front so that the
// hot path does no map lookups.
type Metrics struct {
	pipeline string

	Success, Retried, DeadLettered, Dropped prometheus.Counter

	attemptsVec *prometheus.CounterVec
	attempts    [][2]prometheus.Counter // [attempt-1][0 success, 1 failure]

	DeliveryDuration prometheus.Observer
	RetryLateness    prometheus.Observer
	InFlight         prometheus.Gauge
	Uncommitted      prometheus.Gauge
	Buffered         prometheus.Gauge
	CircuitState     prometheus.Gauge
	PausedPartitions prometheus.Gauge
	Ready            prometheus.Gauge
	CommitErrors     prometheus.Counter
	RetryProduceErr  prometheus.Counter
	DLQProduceErr    prometheus.Counter
	Panics           prometheus.Counter
	StuckDeadLetters prometheus.Gauge
	Redeliveries     prometheus.Counter
	Reparked         prometheus.Counter

	// KafkaFailures and KafkaFailing are indexed by KafkaReasons.
	KafkaFailures [3]prometheus.Counter
	KafkaFailing  [3]prometheus.Gauge

	// Batches is indexed by batch result: BatchSuccess, BatchPartial, BatchFailure.
	Batches       [3]prometheus.Counter
	BatchSize     prometheus.Observer
	BatchDuration prometheus.Observer
	// AnswerProblems is indexed by AnswerProblems' order.
	AnswerProblems [8]prometheus.Counter

	lag         *prometheus.GaugeVec
	deadLetters *prometheus.CounterVec
}

// KafkaReasons are the reason label values of KafkaFailures and KafkaFailing, by index.
var KafkaReasons = [3]string{KafkaReasonAuthentication, KafkaReasonTLS, KafkaReasonAuthorization}

// AnswerProblems are the problem label values of Metrics.AnswerProblems, by index (the Answer*
// constants).
var AnswerProblems = [8]string{ProblemUnknownID, ProblemDuplicateID, ProblemConflictingID, ProblemInvalidStatus,
	ProblemInvalidResult, ProblemTooLarge, ProblemInvalid, ProblemNotSupported}

// Indexes of Metrics.AnswerProblems.
const (
	AnswerUnknownID = iota
	AnswerDuplicateID
	AnswerConflictingID
	AnswerInvalidStatus
	AnswerInvalidResult
	AnswerTooLarge
	AnswerInvalid
	AnswerNotSupported
)

// Indexes of Metrics.Batches.
const (
	BatchSuccess = iota
	BatchPartial
	BatchFailure
)

var batchSizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

var latenessBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// New creates and registers the collectors for pipeline on reg. maxAttempts pre-creates the attempt
// label values 1..maxAttempts.
func New(reg prometheus.Registerer, pipeline string, maxAttempts int32) (*Metrics, error) {
	m := &Metrics{pipeline: pipeline}
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: RecordsTotal,
		Help: "Records finished by the dispatcher, by outcome: success, retried (written to a retry tier), dead_lettered, dropped.",
	}, []string{LabelPipeline, LabelOutcome})
	m.attemptsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DeliveryAttemptsTotal,
		Help: "Deliveries to the sink, by delivery attempt (1 is the first delivery) and result.",
	}, []string{LabelPipeline, LabelAttempt, LabelResult})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    DeliveryDurationSeconds,
		Help:    "Time one delivery to the sink took.",
		Buckets: durationBuckets,
	}, []string{LabelPipeline})
	lateness := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    RetryLatenessSeconds,
		Help:    "Delivery start of a retry minus the time it was due.",
		Buckets: latenessBuckets,
	}, []string{LabelPipeline})
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{LabelPipeline})
	}
	inFlight := gauge(InFlight, "Records being delivered or written to a retry tier or the dead letter queue.")
	uncommitted := gauge(Uncommitted, "Records finished but not yet committed (at most delivery.maxUncommittedRecords).")
	buffered := gauge(Buffered, "Records fetched and waiting for delivery (retry-tier records not yet due included).")
	circuit := gauge(CircuitState, "Circuit breaker state: 0 closed, 1 half-open, 2 open.")
	paused := gauge(PausedPartitions, "Partitions whose fetching is paused (retry tiers not yet due, back-pressure, open circuit).")
	stuck := gauge(StuckDeadLetters, "Records whose dead-letter write failed even stripped to coordinates and reason; nothing past them is committed.")
	ready := gauge(Ready, "1 once the consumer joined its group, until it stops.")
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ConsumerLag,
		Help: "High watermark minus the next offset to commit, per consumed partition (source and retry tiers).",
	}, []string{LabelPipeline, LabelTopic, LabelPartition})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DeadLettersTotal,
		Help: "Records written to the dead letter queue, by reason.",
	}, []string{LabelPipeline, LabelReason})
	produceErrs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ProduceErrorsTotal,
		Help: "Failed writes to a retry tier (kind retry) or the dead letter queue (kind dead_letter).",
	}, []string{LabelPipeline, LabelKind})
	commitErrs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: CommitErrorsTotal,
		Help: "Failed offset commits.",
	}, []string{LabelPipeline})
	panics := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: PanicsTotal,
		Help: "Panics recovered while processing a record; the record was dead-lettered.",
	}, []string{LabelPipeline})

	redeliveries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: RedeliveriesTotal,
		Help: "Records fetched again at an offset this process had already started delivering (after a rebalance or a fetch position reset); each is delivered again.",
	}, []string{LabelPipeline})

	reparked := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ReparkedTotal,
		Help: "Retry-tier records written again to the tail of their tier, not yet due, so as not to hold up the records behind them.",
	}, []string{LabelPipeline})

	kafkaFailures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: KafkaConnectionFailuresTotal,
		Help: "Failures of the Kafka connection that retrying does not fix, by reason: authentication, tls, authorization.",
	}, []string{LabelPipeline, LabelReason})
	kafkaFailing := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: KafkaConnectionFailing,
		Help: "1 while a Kafka connection failure of that reason persists; the dispatcher is not ready meanwhile.",
	}, []string{LabelPipeline, LabelReason})

	batches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: BatchesTotal,
		Help: "Batches delivered to the sink (delivery.batch), by result: success (every record), partial, failure (none).",
	}, []string{LabelPipeline, LabelResult})
	batchSize := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    BatchSize,
		Help:    "Records in one batch delivered to the sink.",
		Buckets: batchSizeBuckets,
	}, []string{LabelPipeline})
	batchDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    BatchDurationSeconds,
		Help:    "Time one batch delivery to the sink took.",
		Buckets: durationBuckets,
	}, []string{LabelPipeline})

	answerProblems := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: BatchAnswerProblemsTotal,
		Help: "What the sink's answers to batches got wrong, by problem; none of them acknowledges a record.",
	}, []string{LabelPipeline, LabelProblem})

	for _, c := range []prometheus.Collector{records, m.attemptsVec, duration, lateness, inFlight, uncommitted, buffered, circuit, paused, ready, m.lag, m.deadLetters, produceErrs, commitErrs, panics, stuck, redeliveries, reparked, kafkaFailures, kafkaFailing, batches, batchSize, batchDuration, answerProblems} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.Success = records.WithLabelValues(pipeline, OutcomeSuccess)
	m.Retried = records.WithLabelValues(pipeline, OutcomeRetried)
	m.DeadLettered = records.WithLabelValues(pipeline, OutcomeDeadLettered)
	m.Dropped = records.WithLabelValues(pipeline, OutcomeDropped)
	m.attempts = make([][2]prometheus.Counter, max(maxAttempts, 1))
	for i := range m.attempts {
		a := strconv.Itoa(i + 1)
		m.attempts[i] = [2]prometheus.Counter{
			m.attemptsVec.WithLabelValues(pipeline, a, ResultSuccess),
			m.attemptsVec.WithLabelValues(pipeline, a, ResultFailure),
		}
	}
	m.DeliveryDuration = duration.WithLabelValues(pipeline)
	m.RetryLateness = lateness.WithLabelValues(pipeline)
	m.InFlight = inFlight.WithLabelValues(pipeline)
	m.Uncommitted = uncommitted.WithLabelValues(pipeline)
	m.Buffered = buffered.WithLabelValues(pipeline)
	m.CircuitState = circuit.WithLabelValues(pipeline)
	m.PausedPartitions = paused.WithLabelValues(pipeline)
	m.Ready = ready.WithLabelValues(pipeline)
	m.CommitErrors = commitErrs.WithLabelValues(pipeline)
	m.RetryProduceErr = produceErrs.WithLabelValues(pipeline, KindRetry)
	m.DLQProduceErr = produceErrs.WithLabelValues(pipeline, KindDeadLetter)
	m.Panics = panics.WithLabelValues(pipeline)
	m.StuckDeadLetters = stuck.WithLabelValues(pipeline)
	m.Redeliveries = redeliveries.WithLabelValues(pipeline)
	m.Reparked = reparked.WithLabelValues(pipeline)
	for i, r := range KafkaReasons {
		m.KafkaFailures[i] = kafkaFailures.WithLabelValues(pipeline, r)
		m.KafkaFailing[i] = kafkaFailing.WithLabelValues(pipeline, r)
	}
	for i, r := range [3]string{ResultSuccess, ResultPartial, ResultFailure} {
		m.Batches[i] = batches.WithLabelValues(pipeline, r)
	}
	m.BatchSize = batchSize.WithLabelValues(pipeline)
	m.BatchDuration = batchDuration.WithLabelValues(pipeline)
	for i, p := range AnswerProblems {
		m.AnswerProblems[i] = answerProblems.WithLabelValues(pipeline, p)
	}
	for _, r := range []string{"non_retriable_error", "max_retries_exceeded", "deadline_exceeded", "undeliverable", "malformed"} {
		m.deadLetters.WithLabelValues(pipeline, r)
	}
	return m, nil
}

// Attempt counts one delivery attempt (1-based) with its result.
func (m *Metrics) Attempt(attempt int32, success bool) {
	i := 1
	if success {
		i = 0
	}
	if attempt >= 1 && int(attempt) <= len(m.attempts) {
		m.attempts[attempt-1][i].Inc()
		return
	}
	res := ResultFailure
	if success {
		res = ResultSuccess
	}
	m.attemptsVec.WithLabelValues(m.pipeline, strconv.Itoa(int(attempt)), res).Inc()
}

// DeadLetter counts one dead letter with its reason.
func (m *Metrics) DeadLetter(reason string) {
	m.deadLetters.WithLabelValues(m.pipeline, reason).Inc()
}

// Lag sets the lag of one partition.
func (m *Metrics) Lag(topic string, partition int32, lag int64) {
	m.lag.WithLabelValues(m.pipeline, topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

// DeleteLag removes the lag series of a partition no longer owned.
func (m *Metrics) DeleteLag(topic string, partition int32) {
	m.lag.DeleteLabelValues(m.pipeline, topic, strconv.Itoa(int(partition)))
}
