package argocd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// kindReasons are the condition reasons the controllers set on each kind (read from the controllers:
// the problems of each kind's steps, its *_status.go, the shared steps). Every reason the API
// (Reason* in api/v1alpha1) or the controllers (reason* in controllers) declare must be here, and
// each reason of a kind must appear in a case of that kind: a new reason fails until it has a case.
var kindReasons = map[string][]string{
	"RetryPolicy": {"Valid", "InvalidSpec"},
	"DeadLetterQueue": {"TopicReady", "InvalidSpec", "KafkaUnavailable", "KafkaUnauthorized", "KafkaRejected", "ReconcileError",
		"TopicConflict", "TopicNotOwned", "TopicClaimRefused", "PartitionShrinkRefused", "ChildConflict", "ReferenceNotFound",
		"Reconciling", "Deleting", "Healthy", "TooManyMessages", "FastGrowth", "OldMessages", "FiguresStale"},
	"ConsumerPipeline": {"TopicsReady", "RulesApplied", "CircuitClosed", "CircuitOpen", "CircuitHalfOpen", "NoCircuitBreaker",
		"Available", "Scaling", "Progressing", "Unavailable", "ProgressDeadlineExceeded", "ReplicaFailure",
		"KafkaAuthenticationFailed", "KafkaUnauthorized", "KafkaUnavailable", "KafkaRejected", "KafkaCredentialsMissing",
		"ConsumerGroupClaimRefused", "ConsumerGroupConflict", "ChildConflict", "WaitingForTopics",
		"WaitingForReferences", "SourceTopicMissing", "ReferenceNotFound", "Reconciling", "InvalidSpec", "ReconcileError",
		"TopicConflict", "TopicNotOwned", "TopicClaimRefused", "PartitionShrinkRefused", "TooManyDrainingTiers", "Deleting"},
	"DeadLetterAction": {"Succeeded", "Failed", "Running", "RunInterrupted", "WaitingForAction", "InvalidSpec", "TopicClaimRefused",
		"ReplayTargetRefused", "ReferenceNotFound", "Reconciling", "TopicNotOwned", "ReconcileError", "KafkaUnavailable"},
}

// kindConditions are the condition types and statuses the controllers set on each kind.
var kindConditions = map[string]map[string][]string{
	"RetryPolicy":     {"Ready": {"True", "False"}, "Stalled": {"True"}},
	"DeadLetterQueue": {"Ready": {"True", "False"}, "Healthy": {"True", "False", "Unknown"}, "Stalled": {"True"}},
	"ConsumerPipeline": {"Ready": {"True", "False", "Unknown"}, "TopicsReady": {"True", "False"}, "AlertsReady": {"True", "False"},
		"CircuitClosed": {"True", "False", "Unknown"}, "DeploymentReady": {"True", "False"}, "Stalled": {"True"}},
	"DeadLetterAction": {"Ready": {"True", "False"}, "Complete": {"True", "False"}, "Stalled": {"True"}},
}

// declaredReasons parses the string constants named with prefix in the non-test Go files of dir.
func declaredReasons(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out[name.Name] = v
					}
				}
				return true
			})
		}
	}
	return out
}

// caseObject is the part of a testdata object the coverage checks read.
type caseObject struct {
	Metadata struct {
		Generation        int64  `json:"generation"`
		DeletionTimestamp string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status *struct {
		ObservedGeneration int64 `json:"observedGeneration"`
		Conditions         []struct {
			Type, Status, Reason string
		} `json:"conditions"`
	} `json:"status"`
}

// TestEveryReasonHasACase: every reason declared in the API or the controllers belongs to a kind in
// kindReasons, and every reason of a kind is the reason of a condition in one of its cases.
func TestEveryReasonHasACase(t *testing.T) {
	g := NewWithT(t)
	declared := declaredReasons(t, filepath.Join("..", "..", "api", "v1alpha1"), "Reason")
	for name, v := range declaredReasons(t, filepath.Join("..", "..", "controllers"), "reason") {
		declared[name] = v
	}
	g.Expect(declared).To(HaveKey("ReasonInvalidSpec"), "the parse found the API's reasons")
	g.Expect(declared).To(HaveKey("reasonActionWaiting"), "the parse found the controllers' reasons")
	var all []string
	for _, rs := range kindReasons {
		all = append(all, rs...)
	}
	for name, v := range declared {
		g.Expect(all).To(ContainElement(v), "reason %s (%q) belongs to no kind in kindReasons: add it and a case", name, v)
	}
	values := map[string]bool{}
	for _, v := range declared {
		values[v] = true
	}
	cases := loadCases(t)
	for kind, reasons := range kindReasons {
		seen := map[string]bool{}
		for _, c := range cases[kind] {
			for _, cond := range decodeCase(t, c).conditions() {
				seen[cond.Reason] = true
			}
		}
		for _, r := range reasons {
			g.Expect(values).To(HaveKey(r), "%s: %q is declared by neither the API nor the controllers", kind, r)
			g.Expect(seen).To(HaveKey(r), "%s: no case has a condition with reason %q", kind, r)
		}
	}
}

// TestEveryStateHasACase: each kind has cases for every condition type and status its controller
// sets, for no status at all, for a generation not yet observed and for a deletion in progress.
func TestEveryStateHasACase(t *testing.T) {
	for kind, cs := range loadCases(t) {
		t.Run(kind, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(kindConditions).To(HaveKey(kind))
			seen := map[string]bool{}
			var noStatus, behind, deleting bool
			for _, c := range cs {
				o := decodeCase(t, c)
				noStatus = noStatus || o.Status == nil
				behind = behind || (o.Status != nil && o.Status.ObservedGeneration < o.Metadata.Generation)
				deleting = deleting || o.Metadata.DeletionTimestamp != ""
				for _, cond := range o.conditions() {
					seen[cond.Type+"="+cond.Status] = true
				}
			}
			g.Expect(noStatus).To(BeTrue(), "a case with no status")
			g.Expect(behind).To(BeTrue(), "a case whose generation is not yet observed")
			g.Expect(deleting).To(BeTrue(), "a case being deleted")
			for typ, statuses := range kindConditions[kind] {
				for _, s := range statuses {
					g.Expect(seen).To(HaveKey(typ+"="+s), "a case with %s %s", typ, s)
				}
			}
			var states []string
			for _, c := range cs {
				if !slices.Contains(states, c.HealthStatus.Status) {
					states = append(states, c.HealthStatus.Status)
				}
			}
			g.Expect(states).To(ContainElements("Healthy", "Progressing", "Degraded"))
		})
	}
}

func decodeCase(t *testing.T, c kindCase) caseObject {
	t.Helper()
	var o caseObject
	if err := yaml.Unmarshal(c.raw, &o); err != nil {
		t.Fatalf("%s/%s: %v", c.kind, c.InputPath, err)
	}
	return o
}

func (o caseObject) conditions() []struct{ Type, Status, Reason string } {
	if o.Status == nil {
		return nil
	}
	return o.Status.Conditions
}
