package e2e

import (
	"context"
	"encoding/csv"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

const (
	lmNS     = "librarymode"
	lmSource = "lm-orders"
	lmQueue  = "lm-dlq"
	lmTopic  = "lm-orders.dlq"
	// lmDispatcher is the sink-mode pipeline the stack's dispatcher runs; lmLibrary the template-mode
	// one whose pods never run (no replicas, an image the runner does not know): the test's own
	// library-mode consumer consumes for it.
	lmDispatcher = "lm-dispatcher"
	lmLibrary    = "lm-library"
	lmImage      = "example.com/lm-consumer:1"
	// lmUnavailable is what both say to attempts 1 and 2 (503, retried); lmRejected (400, which
	// the rule bad-request dead-letters) to attempt 3.
	lmUnavailable = "inventory unavailable"
	lmRejected    = "order rejected: unknown sku"
)

// lmManifests: one policy and one queue; both pipelines consume the same source, so that one
// record gives one dead letter from each, with the same original coordinates.
func lmManifests(sinkURL string) string {
	pipeline := func(name, tail string) string {
		return `---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + name + `, namespace: ` + lmNS + `}
spec:
  source: {topic: ` + lmSource + `, create: {partitions: 1}}
  retryPolicyRef: {name: lm}
  deadLetterQueueRef: {name: ` + lmQueue + `}
` + tail
	}
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + lmNS + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: lm, namespace: ` + lmNS + `}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 100ms, multiplier: "2", maxDelay: 1s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
    - {name: bad-request, action: DeadLetter, httpStatuses: ["400"]}
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: ` + lmQueue + `, namespace: ` + lmNS + `}
spec:
  topic: {name: ` + lmTopic + `, partitions: 1}
  statusRefreshInterval: 2s
` + pipeline(lmDispatcher, `  sink: {uri: "`+sinkURL+`"}
`) + pipeline(lmLibrary, `  replicas: 0
  template:
    spec:
      containers:
      - {name: consumer, image: `+lmImage+`}
`)
}

// lmSink answers as lmHandler does: 503 to attempts 1 and 2, 400 to the third.
func lmSink(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if n, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt)); n < 3 {
		http.Error(w, lmUnavailable, http.StatusServiceUnavailable)
		return
	}
	http.Error(w, lmRejected, http.StatusBadRequest)
}

// lmHandler is the library-mode consumer's handler: it fails as lmSink does.
func lmHandler(ctx context.Context, _ *kgo.Record) error {
	info, _ := retryloop.Info(ctx)
	if info.Attempt < 3 {
		return retryloop.HTTPStatus(http.StatusServiceUnavailable, errors.New(lmUnavailable))
	}
	return retryloop.HTTPStatus(http.StatusBadRequest, errors.New(lmRejected))
}

// libraryConfig reads the library pipeline's ConfigMap as its pod would get it: the config file
// mounted and named by RETRYOPS_CONFIG, the seed-style variables from the ConfigMap's keys.
func libraryConfig(t *testing.T, g *WithT, c client.Client) *config.Config {
	t.Helper()
	cm := &corev1.ConfigMap{}
	g.Eventually(func() error {
		return c.Get(context.Background(), client.ObjectKey{Namespace: lmNS, Name: lmLibrary + "-dispatcher-config"}, cm)
	}).WithTimeout(lmWait).Should(Succeed())
	path := filepath.Join(t.TempDir(), render.ConfigKey)
	g.Expect(os.WriteFile(path, []byte(cm.Data[render.ConfigKey]), 0o600)).To(Succeed())
	env := map[string]string{config.EnvConfig: path}
	for k, v := range cm.Data {
		if k != render.ConfigKey {
			env[k] = v
		}
	}
	cfg, err := retryloop.LoadConfig("", func(k string) string { return env[k] })
	g.Expect(err).NotTo(HaveOccurred())
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled}
	return cfg
}

// plugin builds kubectl-dlq and returns a function running it on the stack, in lmNS.
func plugin(t *testing.T, g *WithT, stack *devenv.Stack) func(args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-dlq")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-dlq")
	build.Dir = envtestutil.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	return func(args ...string) string {
		out, err := exec.Command(bin, append([]string{"--kubeconfig", stack.Kubeconfig, "-n", lmNS}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		return string(out)
	}
}

// csvRows parses `list -o csv`: one map of column to cell per dead letter, by pipeline.
func csvRows(g *WithT, out string) map[string]map[string]string {
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(len(recs)).To(BeNumerically(">=", 1), out)
	rows := map[string]map[string]string{}
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, col := range recs[0] {
			row[col] = rec[i]
		}
		rows[row["pipeline"]] = row
	}
	return rows
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
