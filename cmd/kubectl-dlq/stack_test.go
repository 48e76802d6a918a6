package main_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/retryops/retry-operator/internal/dlqtest"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	stackNS      = "shop"
	stackQueue   = "orders-dlq"
	stackTopic   = "shop.orders.dlq"
	replayTopic  = "shop.orders.by-hand"
	stackLetters = 60
)

var stackReasons = []string{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable, headers.ReasonDeadlineExceeded}

// deadLetter is the i-th dead letter as the dispatcher writes it.
func deadLetter(i int, at time.Time) kafka.ProduceRecord {
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.ProduceRecord{
		Key: []byte("order-" + strconv.Itoa(i)), Value: fmt.Appendf(nil, `{"order":%d,"total":%d.50,"items":["book","pen"]}`, i, 10+i),
		Partition: int32(i % 2), Timestamp: at,
		Headers: []kafka.Header{
			h(headers.Reason, stackReasons[i%3]), h(headers.ErrorType, []string{"HTTP503", "Timeout", "HTTP422", "HTTP500"}[i%4]),
			h(headers.ErrorMessage, "POST http://orders-sink/orders: status "+[]string{"503", "timeout", "422", "500"}[i%4]),
			h(headers.HTTPStatus, []string{"503", "0", "422", "500"}[i%4]),
			h(headers.Pipeline, stackNS+"/orders"), h(headers.ConsumerGroup, "orders"), h(headers.Attempts, "6"),
			h(headers.FirstFailure, headers.FormatTime(at.Add(-time.Minute))), h(headers.LastFailure, headers.FormatTime(at)),
			h(headers.OriginalTopic, "shop.orders"), h(headers.OriginalPartition, strconv.Itoa(i%2)), h(headers.OriginalOffset, strconv.Itoa(100+i)),
			h(headers.OriginalTimestamp, headers.FormatTime(at.Add(-2*time.Minute))),
			h("Idempotency-Key", "order-"+strconv.Itoa(i)),
		},
	}
}

// The plugin on the whole stack: the real aggregated deadletters API (internal/dlqapi) over kfake,
// the manager's controllers running the DeadLetterActions, and the built plugin run by the real
// kubectl. list with each filter equals what was written, export -o csv parses into the same rows,
// replay --wait reaches 100% and the records reach the target topic, resolve --note changes the
// state show prints, purge --dry-run changes nothing and says what it would delete, and stats reads
// the queue's counts. Its outputs are logged: the README's session comes from them.
func TestPluginOnTheWholeStack(t *testing.T) {
	g := NewWithT(t)
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := buildPlugin(t)

	stack := dlqtest.Start(ctx, t, replayTopic)
	broker, factory, env := stack.Broker, stack.Kafka, stack.Env
	stack.Queue(ctx, t, stackNS, stackQueue, stackTopic)
	t0 := time.Now().Add(-time.Duration(stackLetters) * time.Minute).Truncate(time.Second)
	var recs []kafka.ProduceRecord
	for i := range stackLetters {
		recs = append(recs, deadLetter(i, t0.Add(time.Duration(i)*time.Minute)))
	}
	res, err := factory.ProduceRecords(ctx, kafka.Connection{BootstrapServers: broker.ListenAddrs()}, stackTopic, recs)
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range res {
		g.Expect(r.Err).NotTo(HaveOccurred())
	}
	// the APIService is served
	kubectl := kubectlPath(t, env)
	envv := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + env.Kubeconfig}
	g.Eventually(func() int {
		_, _, code := run(t, envv, kubectl, "get", "deadletters", "-n", stackNS)
		return code
	}, time.Minute, 200*time.Millisecond).Should(Equal(0))

	quiet := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, envv, kubectl, append([]string{"dlq", "-n", stackNS}, args...)...)
		g.Expect(code).To(Equal(0), "kubectl dlq %s: %s", strings.Join(args, " "), stderr)
		return stdout
	}
	dlq := func(args ...string) string {
		t.Helper()
		stdout := quiet(args...)
		t.Logf("$ kubectl dlq -n %s %s\n%s", stackNS, strings.Join(args, " "), stdout)
		return stdout
	}
	written := func(keep func(i int) bool) []string {
		var out []string
		offsets := [2]int{}
		var p0, p1 []string
		for i := range stackLetters {
			p := i % 2
			if keep(i) {
				ref := fmt.Sprintf("%d/%d", p, offsets[p])
				if p == 0 {
					p0 = append(p0, ref)
				} else {
					p1 = append(p1, ref)
				}
			}
			offsets[p]++
		}
		out = append(append(out, p0...), p1...)
		return out
	}
	listed := func(args ...string) []string {
		out := quiet(append([]string{"list", stackQueue, "--limit", "0", "-o", "csv", "--no-headers"}, args...)...)
		records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		g.Expect(err).NotTo(HaveOccurred())
		refs := []string{}
		for _, r := range records {
			refs = append(refs, r[1]+"/"+r[2])
		}
		return refs
	}

	g.Expect(listed()).To(Equal(written(func(int) bool { return true })))
	g.Expect(listed("--reason", headers.ReasonNonRetriable)).To(Equal(written(func(i int) bool { return i%3 == 1 })))
	g.Expect(listed("--error-type", "HTTP503,HTTP500")).To(Equal(written(func(i int) bool { return i%4 == 0 || i%4 == 3 })))
	g.Expect(listed("--pipeline", "orders", "--state", "Pending")).To(Equal(written(func(int) bool { return true })))
	g.Expect(listed("--since", t0.Add(50*time.Minute).UTC().Format(time.RFC3339))).To(Equal(written(func(i int) bool { return i >= 50 })))
	dlq("list", stackQueue, "--reason", headers.ReasonMaxRetriesExceeded, "--limit", "5")

	exported := quiet("export", stackQueue, "-o", "csv")
	rows, err := csv.NewReader(strings.NewReader(exported)).ReadAll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rows).To(HaveLen(stackLetters + 1))
	g.Expect(rows[1][18:20]).To(Equal([]string{"order-0", "text"}))
	g.Expect(rows[1][20]).To(Equal(`{"order":0,"total":10.50,"items":["book","pen"]}`))

	g.Expect(dlq("show", stackQueue, "0/0")).To(And(ContainSubstring("State:          Pending\n"), ContainSubstring(`  "total": 10.50,`)))

	// resolve one: show then prints its new state, note and author
	g.Expect(dlq("resolve", stackQueue, "0/0", "--note", "re-entered by hand, OPS-7", "--wait")).To(ContainSubstring("  resolved: 1\n"))
	g.Expect(dlq("show", stackQueue, "0/0")).To(And(MatchRegexp(`State:          Resolved by envtest-admin at \S+ \(action resolve-orders-dlq-[a-z0-9]{5}\)\n`),
		ContainSubstring("Note:           re-entered by hand, OPS-7\n")))

	// purge --dry-run: what it would delete, nothing deleted
	out := dlq("purge", stackQueue, "--before", "1m", "--dry-run", "--wait")
	g.Expect(out).To(And(ContainSubstring("(dry run: nothing was changed)"), ContainSubstring("  would be deleted: 1\n"),
		ContainSubstring("  matched records: 0/0\n"), ContainSubstring("blocking records (the purge stopped there, per partition): 0/1")))
	g.Expect(listed()).To(HaveLen(stackLetters))

	// replay the pending non-retriable ones to a topic: 100%, and the records are there
	want := len(written(func(i int) bool { return i%3 == 1 }))
	// on a terminal (script(1) gives it one): the live progress bar on stderr, then the outcome
	replay := []string{"dlq", "-n", stackNS, "replay", stackQueue, "--reason", headers.ReasonNonRetriable, "--to-topic", replayTopic, "--rate", "10", "--wait"}
	out, stderr, code := run(t, envv, "script", "-qec", kubectl+" "+strings.Join(replay, " "), "/dev/null")
	g.Expect(code).To(Equal(0), out+stderr)
	t.Logf("$ kubectl %s\n%s", strings.Join(replay, " "), strings.ReplaceAll(out, "\r\x1b[K", "\n(redrawn) "))
	g.Expect(out).To(ContainSubstring(fmt.Sprintf("] 100%%  %d/%d  Succeeded\r\n", want, want)))
	g.Expect(out).To(ContainSubstring(fmt.Sprintf("  matched:  %d\r\n  replayed: %d\r\n", want, want)))
	adm := kadm.NewClient(must(kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...))))
	t.Cleanup(adm.Close)
	ends, err := adm.ListEndOffsets(ctx, replayTopic)
	g.Expect(err).NotTo(HaveOccurred())
	end, _ := ends.Lookup(replayTopic, 0)
	g.Expect(end.Offset).To(Equal(int64(want)), "the replayed records reach the topic")
	g.Expect(listed("--state", "Replayed")).To(Equal(written(func(i int) bool { return i%3 == 1 })))

	g.Eventually(func() string {
		stdout, _, _ := run(t, envv, kubectl, "dlq", "-n", stackNS, "stats", stackQueue)
		return stdout
	}, time.Minute, 200*time.Millisecond).Should(ContainSubstring(fmt.Sprintf("Dead letters:   %d held, %d pending\n", stackLetters, stackLetters-want-1)))
	dlq("stats", stackQueue)
	dlq("actions")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// buildPlugin builds kubectl-dlq with plugins/kubectl_complete-dlq into a directory for the PATH.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	stdout, stderr, code := run(t, nil, "go", "build", "-o", filepath.Join(bin, "kubectl-dlq"), ".")
	if code != 0 {
		t.Fatalf("go build: %s%s", stdout, stderr)
	}
	script, err := os.ReadFile("../../plugins/kubectl_complete-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl_complete-dlq"), script, 0o755); err != nil { //nolint:gosec // a script for the PATH
		t.Fatal(err)
	}
	return bin
}

// kubectlPath is the envtest kubectl, or the one on the PATH.
func kubectlPath(t *testing.T, env *envtestutil.Env) string {
	t.Helper()
	k := filepath.Join(env.AssetsDir, "kubectl")
	if _, err := os.Stat(k); err == nil {
		return k
	}
	stdout, _, code := run(t, nil, "sh", "-c", "command -v kubectl")
	if code != 0 {
		t.Fatal("no kubectl in the envtest assets nor on the PATH")
	}
	return strings.TrimSpace(stdout)
}
