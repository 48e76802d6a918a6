// Command kafka runs an embedded Kafka-protocol broker (franz-go's kfake) as a local process, for
// `make dev` and for tests that need a broker that outlives the processes using it. It speaks the real
// Kafka protocol, so the operator and the dispatchers use it exactly as they would Apache Kafka.
//
//	go run ./hack/kafka --port 9092 --data-dir .dev/kafka
//
// With --data-dir, topics, records and committed offsets survive a restart.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "Port to listen on (127.0.0.1).")
	dataDir := flag.String("data-dir", "", "Directory that keeps the broker's state across restarts; empty keeps it in memory.")
	partitions := flag.Int("default-partitions", 3, "Partitions of topics created without a count.")
	flag.Parse()

	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(*port),
		kfake.DefaultNumPartitions(*partitions),
		kfake.ClusterID("retryops-dev"),
	}
	if *dataDir != "" {
		if err := os.MkdirAll(*dataDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "kafka:", err)
			os.Exit(1)
		}
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka: starting the broker:", err)
		os.Exit(1)
	}
	fmt.Printf("kafka: listening on %s\n", cluster.ListenAddrs()[0])

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	cluster.Close()
	fmt.Println("kafka: stopped")
}
