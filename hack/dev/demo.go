package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// The demo: the samples in their own namespace, the chat pipeline's records produced to its source.
const (
	demoNamespace = "retryops-demo"
	// demoTopic and every topic and group of the demo start with "<namespace>.": the claim policy
	// (--topic-prefix) the secured stack's consumer ACLs are written for.
	demoTopic             = demoNamespace + ".alice_tasks"
	demoNamespaceManifest = "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + demoNamespace + "}\n"
)

// writeDemo writes, under dir/demo, a kustomization of config/samples for the demo: every sample in
// the demo namespace, the chat pipeline delivering to the demo sink at sinkAddr (/tasks), the audit
// pipeline (auditManifest) on chat's source delivering to the audit sink there (/audit), the bursts
// pipeline (burstsManifest, autoscaled) delivering to the bursts sink there (/bursts), the batched
// pipeline (batchedManifest) on chat's source delivering in batches to the batch sink there
// (/batched), and the documents pipeline (library mode: examples/consumer, run for its image) with
// its policy's delays shortened to seconds (documentsPolicyPatch). It returns the kustomization's
// directory.
func writeDemo(dir, sinkAddr string) (string, error) {
	demo, err := filepath.Abs(filepath.Join(dir, "demo"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(demo, 0o755); err != nil {
		return "", err
	}
	samples, err := filepath.Rel(demo, filepath.Join(envtestutil.RepoRoot(), "config", "samples"))
	if err != nil {
		return "", err
	}
	k := `# Written by make dev (hack/dev): the samples, as the demo runs them.
namespace: ` + demoNamespace + `
resources:
- ` + samples + `
- audit.yaml
- bursts.yaml
- batched.yaml
patches:
- target: {kind: ConsumerPipeline, name: chat}
  patch: |-
    - op: replace
      path: /spec/sink/uri
      value: http://` + sinkAddr + `/tasks
    - op: replace
      path: /spec/source/topic
      value: ` + demoTopic + `
    - op: replace
      path: /spec/source/consumerGroup
      value: ` + demoNamespace + `.alice-orchestrator
- target: {kind: ConsumerPipeline, name: documents}
  patch: |-
    - op: replace
      path: /spec/source/topic
      value: ` + documentsTopic + `
` + documentsPolicyPatch + `- target: {kind: DeadLetterQueue, name: chatbot-dlq}
  patch: |-
    - op: replace
      path: /spec/topic/name
      value: ` + demoNamespace + `.chatbot.dlq
# The sample DeadLetterAction says jane@example.com asked for it, and the admission policy wants
# requestedBy to be its creator: the demo creates it later as that user (kubectl --as), its tenant.
- target: {kind: DeadLetterAction}
  patch: |-
    $patch: delete
    apiVersion: retry.retryops.dev/v1alpha1
    kind: DeadLetterAction
    metadata: {name: any}
# The embedded Kafka keeps its data across runs while the control plane starts afresh, so the
# topics a previous run created exist and no resource of this run created them: the demo adopts them
# (the operator leaves alone a topic it did not create for the resource otherwise).
- target: {kind: DeadLetterQueue}
  patch: |-
    apiVersion: retry.retryops.dev/v1alpha1
    kind: DeadLetterQueue
    metadata: {name: any}
    spec: {topic: {existingTopic: Adopt}}
# audit names no source.create: it reads the topic chat creates.
- target: {kind: ConsumerPipeline, name: chat|documents}
  patch: |-
    apiVersion: retry.retryops.dev/v1alpha1
    kind: ConsumerPipeline
    metadata: {name: any}
    spec: {source: {create: {existingTopic: Adopt}}}
`
	if err := os.WriteFile(filepath.Join(demo, "audit.yaml"), []byte(fmt.Sprintf(auditManifest, demoTopic, sinkAddr)), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(demo, "bursts.yaml"), []byte(fmt.Sprintf(burstsManifest, burstsTopic, sinkAddr)), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(demo, "batched.yaml"), []byte(fmt.Sprintf(batchedManifest, demoTopic, sinkAddr)), 0o644); err != nil {
		return "", err
	}
	return demo, os.WriteFile(filepath.Join(demo, "kustomization.yaml"), []byte(k), 0o644)
}

// demoActions shows the dead-letter actions once dead letters have gathered: a dry run of a replay
// of the demo sink's permanent failures (HTTP 422: it counts and lists them and changes nothing),
// then a Resolve of them with a note. requestedBy is the kubeconfig's user, as the shipped admission
// policy requires. Then, as the demo tenant, the sample action (which names the tenant) and a dry run
// of one naming someone else, whose refusal by the policy goes into refusal.
func demoActions(ctx context.Context, kubeconfig string, refusal *atomic.Pointer[string]) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(demoActionsAfter):
	}
	user, err := kubectl(kubeconfig, nil, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil {
		user = "make-dev"
	}
	manifest := fmt.Sprintf(demoActionsManifest, demoNamespace, strings.TrimSpace(user), demoNamespace, strings.TrimSpace(user))
	if out, err := kubectl(kubeconfig, []byte(manifest), "apply", "-f", "-"); err != nil {
		fmt.Fprintf(os.Stderr, "dev: applying the demo's dead-letter actions: %v\n%s", err, out)
	}
	sample := filepath.Join(envtestutil.RepoRoot(), "config", "samples", "retry_v1alpha1_deadletteraction.yaml")
	if out, err := kubectl(kubeconfig, nil, "apply", "--server-side", "-n", demoNamespace, "--as", demoTenant, "-f", sample); err != nil {
		fmt.Fprintf(os.Stderr, "dev: applying the sample dead-letter action as %s: %v\n%s", demoTenant, err, out)
	}
	forged := fmt.Sprintf(demoForgedAction, demoNamespace)
	out, err := kubectl(kubeconfig, []byte(forged), "create", "--dry-run=server", "--as", demoTenant, "-f", "-")
	line := "the requestedBy policy let " + demoTenant + " create an action naming someone-else: " + strings.TrimSpace(out)
	if _, denial, found := strings.Cut(out, "denied request: "); err != nil && found {
		line = "admission refuses " + demoTenant + "'s action with requestedBy someone-else: " + strings.TrimSpace(denial)
	} else if err != nil {
		line = "kubectl create --as " + demoTenant + " (requestedBy someone-else): " + strings.TrimSpace(out)
	}
	refusal.Store(&line)
}

// demoTenant is the user the demo binds to the built-in edit role in its namespace (kubectl --as).
const demoTenant = "jane@example.com"

// demoTenantManifest binds demoTenant to edit in the demo namespace.
const demoTenantManifest = "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n" +
	"metadata: {name: demo-tenant-edit, namespace: " + demoNamespace + "}\n" +
	"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}\n" +
	"subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: " + demoTenant + "}]\n"

// demoForgedAction: the demo tenant's Resolve saying someone else asked for it (namespace).
const demoForgedAction = `apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterAction
metadata: {name: demo-forged, namespace: %s}
spec:
  queue: chatbot-dlq
  action: Resolve
  requestedBy: someone-else
  note: "make dev: refused by the requestedBy admission policy"
  selector: {reasons: [non_retriable_error]}
`

// demoActionsAfter is when the demo's dead-letter actions are applied.
const demoActionsAfter = 45 * time.Second

// demoActionsManifest: a dry-run Replay and a Resolve of the chat pipeline's dead letters (the
// queue is shared with audit) (namespace, requestedBy, namespace, requestedBy).
const demoActionsManifest = `apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterAction
metadata: {name: demo-replay-dry-run, namespace: %s}
spec:
  queue: chatbot-dlq
  action: Replay
  mode: DryRun
  requestedBy: %s
  selector: {errorTypes: [HTTP422], pipelines: [` + demoNamespace + `/chat]}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterAction
metadata: {name: demo-resolve-permanent, namespace: %s}
spec:
  queue: chatbot-dlq
  action: Resolve
  requestedBy: %s
  note: "make dev: permanent failures of the demo sink, nothing to replay"
  selector: {reasons: [non_retriable_error], pipelines: [` + demoNamespace + `/chat]}
`

// auditManifest is the demo's second pipeline on chat's source (the topic and the sink's
// address): its own consumer group (<namespace>.audit by default), policy, tiers
// (<namespace>.audit.retry.<n>, under the claim policy) and sink. It shares chat's queue: the
// queue's breakdown by pipeline tells them apart (each pipeline's DLQ Msgs, the deadletters'
// PIPELINE), and the secured stack's consumer ACLs need no other topic. It has no source.create:
// it reads the topic chat creates.
const auditManifest = `# Written by make dev (hack/dev): a second consumer of chat's source.
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: audit}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 5s, multiplier: "3", maxDelay: 60s, jitter: {mode: Proportional, minPercent: 90, maxPercent: 110}, cap: BeforeJitter}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["429", "500-599"]}
  attemptTimeout: 10s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: audit}
spec:
  source: {topic: %s}
  retryPolicyRef: {name: audit}
  deadLetterQueueRef: {name: chatbot-dlq}
  sink: {uri: "http://%s/audit"}
  replicas: 1
`

// auditSink is the audit pipeline's sink: 4% of records refused for good (422), 20% failing once
// and 2% failing three times, past the audit policy's three attempts (max_retries_exceeded).
func auditSink() *devenv.DemoSink {
	return &devenv.DemoSink{
		Permanent: func(n int) bool { return n%25 == 0 },
		Transient: func(n int) int {
			switch {
			case n%50 == 9:
				return 3
			case n%5 == 1:
				return 1
			}
			return 0
		},
	}
}
