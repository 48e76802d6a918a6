package main

import (
	"flag"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// TestKafkaAdminBatchWindowFlag: the manager batches the admin calls of each connection by default
// (and still runs the factory's idle sweep), and sends each call alone with a window of 0.
func TestKafkaAdminBatchWindowFlag(t *testing.T) {
	g := NewWithT(t)
	parse := func(args ...string) *options {
		o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), args)
		g.Expect(err).NotTo(HaveOccurred())
		return o
	}
	o := parse()
	g.Expect(o.kafkaAdminBatchWindow).To(Equal(10 * time.Millisecond))
	f := kafkaFactory(o)
	g.Expect(f).To(BeAssignableToTypeOf(&kafka.BatchingFactory{}))
	_, runnable := f.(manager.Runnable)
	g.Expect(runnable).To(BeTrue(), "the idle sweep would not run")

	o = parse("--kafka-admin-batch-window=0")
	g.Expect(kafkaFactory(o)).To(BeAssignableToTypeOf(&franz.Factory{}))
}
