package dispatcher

import (
	"log/slog"

	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// CircuitReporter hooks the report that o.Config asks for (circuitReport) to o.OnCircuitStateChange
// and o.OnKafkaProblem and returns it, or nil when there is none to make. Run its Start around
// Engine.Run. connect reaches the Kubernetes API (the operator's pkg/kubereport.Connect); with a
// nil connect nothing is reported, and the pipeline's status lacks its CircuitOpen condition.
// Without API access the consumer still runs: the failure is logged and the status lacks the state.
func CircuitReporter(o *Options, getenv func(string) string, connect circuitstate.Connector) *circuitstate.Reporter {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if connect == nil && o.Config.CircuitReport != nil {
		log.Info("The circuit breaker state is not reported to the operator (no Kubernetes connector): the pipeline shows no CircuitOpen condition",
			"configMap", o.Config.CircuitReport.ConfigMap)
		return nil
	}
	reporter, err := circuitstate.ReporterFor(o.Config, getenv, log, connect)
	if err != nil {
		log.Warn("The circuit breaker state will not be reported to the operator", "error", err)
	}
	if reporter != nil {
		o.OnCircuitStateChange = reporter.OnStateChange
		o.OnKafkaProblem = reporter.ObserveKafka
	}
	return reporter
}
