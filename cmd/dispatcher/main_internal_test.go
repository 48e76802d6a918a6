package main

import (
	"testing"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
)

// TestRunRejectsBadConfig: a configuration error, or a missing sink, exits with status 1 before
// connecting anywhere.
func TestRunRejectsBadConfig(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"empty": {},
		"no sink": {
			config.EnvBootstrapServers: "127.0.0.1:1", config.EnvTopicPrimary: "a", config.EnvTopicDLQ: "a.dlq",
			config.EnvConsumerGroup: "g",
		},
		"bad sink": {
			config.EnvBootstrapServers: "127.0.0.1:1", config.EnvTopicPrimary: "a", config.EnvTopicDLQ: "a.dlq",
			config.EnvConsumerGroup: "g", config.EnvSinkURL: "not a url",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if code := run(func(k string) string { return env[k] }); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
		})
	}
}

func TestLogLevel(t *testing.T) {
	for in, want := range map[string]string{"": "INFO", "debug": "DEBUG", "WARN": "WARN", "error": "ERROR"} {
		if got := logLevel(in).String(); got != want {
			t.Errorf("logLevel(%q) = %s", in, got)
		}
	}
}

// TestBatchHandler: the sink delivers in batches exactly when the config has delivery.batch.
func TestBatchHandler(t *testing.T) {
	sink := dispatcher.NewHTTPSink("http://sink.invalid/", 1)
	if h := batchHandler(&config.Config{}, sink); h != nil {
		t.Errorf("without delivery.batch: %v, want none", h)
	}
	cfg := &config.Config{Delivery: config.Delivery{Batch: &config.Batch{MaxRecords: 10}}}
	if h := batchHandler(cfg, sink); h != dispatcher.BatchHandler(sink) {
		t.Errorf("with delivery.batch: %v, want the sink", h)
	}
}
