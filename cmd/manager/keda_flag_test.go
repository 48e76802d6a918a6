package main

import (
	"flag"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/controllers"
)

func TestKEDAPrometheusAddressFlag(t *testing.T) {
	g := NewWithT(t)
	parse := func(args ...string) (*options, error) {
		return parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), args)
	}

	o, err := parse()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.controllers.KEDAPrometheusAddress).To(Equal(controllers.DefaultKEDAPrometheusAddress))

	for _, v := range []string{"http://prometheus.monitoring:9090", "https://thanos.example.com/prometheus"} {
		o, err = parse("--keda-prometheus-address=" + v)
		g.Expect(err).NotTo(HaveOccurred(), v)
		g.Expect(o.controllers.KEDAPrometheusAddress).To(Equal(v))
	}
	// KEDA appends /api/v1/query?... to the address: it needs a scheme and a host, and nothing after the path.
	for _, v := range []string{"", "prometheus:9090", "prometheus.monitoring.svc", "ftp://prometheus", "http://", "http://p:9090/?x=1", "http://p:9090/#f", "http://%zz"} {
		_, err = parse("--keda-prometheus-address=" + v)
		g.Expect(err).To(MatchError(ContainSubstring("--keda-prometheus-address")), "%q was accepted", v)
	}
	// The address is copied into every autoscaled pipeline's ScaledObject, which its namespace's
	// users read: credentials in it would be every tenant's.
	_, err = parse("--keda-prometheus-address=https://keda:s3cret@thanos.example.com")
	g.Expect(err).To(MatchError(ContainSubstring("credentials")))
}
