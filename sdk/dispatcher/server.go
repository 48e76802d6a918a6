package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/retryops/retry-operator/sdk/config"
)

// Health is what the health endpoints report.
type Health interface {
	// Live is /healthz: false makes the kubelet restart the container (Engine: Run failed, the poll
	// loop or a delivery is stuck; see health.go).
	Live() bool
	// Ready is /readyz: true once the consumer joined its group, until it stops (Engine: and not
	// while a dead letter is stuck or every partition was lost).
	Ready() bool
}

// Endpoint paths.
const (
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// Servers serves the metrics and health endpoints.
type Servers struct {
	servers []*http.Server
	byAddr  map[string]net.Addr
	listen  config.Listen
}

// MetricsAddr is the bound address of /metrics, or nil when disabled.
func (s *Servers) MetricsAddr() net.Addr { return s.byAddr[s.listen.MetricsAddress] }

// HealthAddr is the bound address of /healthz and /readyz, or nil when disabled.
func (s *Servers) HealthAddr() net.Addr { return s.byAddr[s.listen.HealthAddress] }

// Serve listens on listen's addresses ("-" disables one; equal addresses share one server) and
// serves /metrics from gatherer and /healthz and /readyz from health. It returns once listening.
func Serve(listen config.Listen, gatherer prometheus.Gatherer, health Health, log *slog.Logger) (*Servers, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	muxes := map[string]*http.ServeMux{}
	var order []string
	mux := func(addr string) *http.ServeMux {
		if m := muxes[addr]; m != nil {
			return m
		}
		m := http.NewServeMux()
		muxes[addr] = m
		order = append(order, addr)
		return m
	}
	if a := listen.MetricsAddress; a != "" && a != config.Disabled {
		mux(a).Handle(PathMetrics, promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	if a := listen.HealthAddress; a != "" && a != config.Disabled {
		m := mux(a)
		m.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
			status(w, health.Live())
		})
		m.HandleFunc(PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
			ok := health.Ready()
			if r, has := health.(notReadyReasoner); has && !ok {
				notReady(w, r.NotReadyReason())
				return
			}
			status(w, ok)
		})
	}
	s := &Servers{byAddr: map[string]net.Addr{}, listen: listen}
	for _, addr := range order {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = s.Shutdown(context.Background())
			return nil, err
		}
		srv := &http.Server{Handler: muxes[addr], ReadHeaderTimeout: 10 * time.Second}
		s.servers = append(s.servers, srv)
		s.byAddr[addr] = ln.Addr()
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("HTTP server failed", "address", ln.Addr().String(), "error", err)
			}
		}()
	}
	return s, nil
}

func status(w http.ResponseWriter, ok bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("not ready\n"))
}

// notReadyReasoner is a Health that says why it is not ready (Engine).
type notReadyReasoner interface {
	NotReadyReason() string
}

// notReady answers /readyz with 503 and the reason.
func notReady(w http.ResponseWriter, reason string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	if reason != "" {
		reason = ": " + reason
	}
	_, _ = w.Write([]byte("not ready" + reason + "\n"))
}

// Shutdown stops the servers.
func (s *Servers) Shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
