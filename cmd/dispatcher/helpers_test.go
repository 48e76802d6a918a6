package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
)

// clusterFor starts a kfake cluster holding cfg's topics (the source with partitions, each retry
// tier with tierPartitions, the dead letter topic with 1) and points cfg at it.
func clusterFor(t *testing.T, cfg *config.Config, partitions, tierPartitions int32) *kfake.Cluster {
	t.Helper()
	topics := map[string]int32{cfg.Topics.Source: partitions, cfg.Topics.DeadLetter: 1}
	for _, tn := range cfg.Topics.Retries.Names() {
		topics[tn] = tierPartitions
	}
	c := dt.Cluster(t, topics)
	cfg.Kafka.BootstrapServers = c.ListenAddrs()
	return c
}

// writeConfig writes cfg as dir/config.json for a dispatcher process and returns that path and the
// process's log path, dir/dispatcher.log.
func writeConfig(t *testing.T, dir string, cfg *config.Config) (cfgPath, logPath string) {
	t.Helper()
	cfgPath, logPath = filepath.Join(dir, "config.json"), filepath.Join(dir, "dispatcher.log")
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, logPath
}

// skipUnderShort skips, when the tests run with -short (make test-unit), a test that runs the
// dispatcher binary on the real clock for seconds to minutes: crashes, storms, the jitter of its due
// times. make test runs them.
func skipUnderShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the dispatcher binary on the real clock for seconds to minutes: make test runs it, -short does not")
	}
}
