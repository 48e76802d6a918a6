package dispatcher

import (
	"log/slog"

	"github.com/retryops/retry-operator/internal/circuitstate"
)

// CircuitReporter hooks the report that o.Config asks for (circuitReport) to o.OnCircuitStateChange
// and o.OnKafkaProblem and returns it, or nil when there is none to make. Run its Start around
// Engine.Run. Without API access the consumer still runs: the failure is logged and the pipeline's
// status lacks the state.
func CircuitReporter(o *Options, getenv func(string) string) *circuitstate.Reporter {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reporter, err := circuitstate.ReporterFor(o.Config, getenv, log)
	if err != nil {
		log.Warn("The circuit breaker state will not be reported to the operator", "error", err)
	}
	if reporter != nil {
		o.OnCircuitStateChange = reporter.OnStateChange
		o.OnKafkaProblem = reporter.ObserveKafka
	}
	return reporter
}
