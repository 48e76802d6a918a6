package strimzi_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	operatorUserFile = "config/strimzi/kafkauser-operator.yaml"
	consumerUserFile = "config/strimzi/kafkauser-consumer.yaml"
	// samplesNamespace is the namespace consumerUserFile is written for, which the script replaces.
	samplesNamespace = "retryops-samples"
)

// kafkaUser returns the one KafkaUser of path, with samplesNamespace replaced by ns as the script's
// consumer_user does (sed "s/retryops-samples/$1/g").
func kafkaUser(t *testing.T, path, ns string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(repoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, path, []byte(strings.ReplaceAll(string(data), samplesNamespace, ns)))
	if len(objs) != 1 || objs[0].GetKind() != "KafkaUser" {
		t.Fatalf("%s: want one KafkaUser, have %d objects", path, len(objs))
	}
	return objs[0]
}

// acl is one ACL of a KafkaUser's spec.authorization.acls.
type acl struct {
	deny              bool
	resType, resource string
	prefix            bool
	ops               []string
}

func acls(t *testing.T, u *unstructured.Unstructured) []acl {
	t.Helper()
	if typ, _, _ := unstructured.NestedString(u.Object, "spec", "authorization", "type"); typ != "simple" {
		t.Fatalf("KafkaUser %s: authorization %q, not simple", u.GetName(), typ)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "spec", "authorization", "acls")
	out := make([]acl, 0, len(list))
	for _, item := range list {
		m, _ := item.(map[string]any)
		var a acl
		typ, _, _ := unstructured.NestedString(m, "type")
		a.deny = typ == "deny"
		a.resType, _, _ = unstructured.NestedString(m, "resource", "type")
		a.resource, _, _ = unstructured.NestedString(m, "resource", "name")
		pattern, _, _ := unstructured.NestedString(m, "resource", "patternType")
		a.prefix = pattern == "prefix"
		a.ops, _, _ = unstructured.NestedStringSlice(m, "operations")
		out = append(out, a)
	}
	return out
}

// allowed is Kafka's simple authorizer: an ACL that denies wins over any that allows; Describe is
// implied by Read, Write, Delete and Alter, and DescribeConfigs by AlterConfigs (allow only).
func allowed(list []acl, resType, name, op string) bool {
	var allow bool
	for _, a := range list {
		matches := a.resType == resType && (a.resource == "*" || a.resource == name || (a.prefix && strings.HasPrefix(name, a.resource)))
		if !matches {
			continue
		}
		for _, have := range a.ops {
			implied := !a.deny && (op == "Describe" && slices.Contains([]string{"Read", "Write", "Delete", "Alter"}, have) ||
				op == "DescribeConfigs" && have == "AlterConfigs")
			if have == op || have == "All" || implied {
				if a.deny {
					return false
				}
				allow = true
			}
		}
	}
	return allow
}

// TestKafkaUsersPassAServerSideDryRun creates the script's KafkaUsers (the manager's, and the
// consumers' of the samples' namespace and of another) with a server-side dry run against the
// pinned release's KafkaUser CRD.
func TestKafkaUsersPassAServerSideDryRun(t *testing.T) {
	g := NewWithT(t)
	scriptRuns(t, "kubectl -n "+namespace+" apply -f "+operatorUserFile)
	scriptRuns(t, `sed "s/`+samplesNamespace+`/$1/g" `+consumerUserFile)
	scriptRuns(t, `consumer_user "$SAMPLES_NS" | kubectl -n `+namespace+` apply -f -`)
	kafka, _ := kafkaObjects(t)
	env := sharedEnv(t)
	for _, u := range []*unstructured.Unstructured{
		kafkaUser(t, operatorUserFile, samplesNamespace),
		kafkaUser(t, consumerUserFile, samplesNamespace),
		kafkaUser(t, consumerUserFile, "team-a"),
	} {
		g.Expect(u.GetAPIVersion()).To(Equal("kafka.strimzi.io/v1"))
		g.Expect(u.GetNamespace()).To(BeEmpty(), "KafkaUser %s: the script chooses the namespace", u.GetName())
		g.Expect(u.GetLabels()).To(HaveKeyWithValue("strimzi.io/cluster", kafka.GetName()), "KafkaUser %s", u.GetName())
		auth, _, _ := unstructured.NestedString(u.Object, "spec", "authentication", "type")
		g.Expect(auth).To(Equal("scram-sha-512"), "KafkaUser %s: the listener's authentication", u.GetName())
		dryRun(g, env, namespace, u)
	}
}

// TestConsumerUserStaysInItsNamespace checks a namespace's consumer user, as the script makes it
// for namespace team-a: named team-a-consumer (--kafka-consumer-secret={namespace}-consumer, the
// Secret named after the user), reading and writing topics and joining groups that start with
// "team-a." and nothing else: no other namespace's names, no create, delete or config, and no write
// to a queue's record of decisions.
func TestConsumerUserStaysInItsNamespace(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(repoPath(consumerUserFile))
	g.Expect(err).NotTo(HaveOccurred())
	u := kafkaUser(t, consumerUserFile, "team-a")
	g.Expect(u.GetName()).To(Equal("team-a-consumer"))
	list := acls(t, u)
	for _, a := range list {
		g.Expect(a.resType).To(BeElementOf("topic", "group"), "%+v", a)
		g.Expect(a.resource).To(HavePrefix("team-a."), "%+v", a)
		if !a.deny {
			g.Expect(a.ops).To(HaveEach(BeElementOf("Read", "Write", "Describe")), "%+v", a)
		}
	}
	for _, ok := range []struct{ resType, name, op string }{
		{"topic", "team-a.orders", "Read"},
		{"topic", "team-a.orders.retry.1", "Write"},
		{"topic", "team-a.orders.dlq", "Write"},
		{"topic", "team-a.orders", "Describe"},
		{"group", "team-a.orders", "Read"},
		{"group", "team-a.orders", "Describe"},
	} {
		g.Expect(allowed(list, ok.resType, ok.name, ok.op)).To(BeTrue(), "%+v", ok)
	}
	for _, no := range []struct{ resType, name, op string }{
		{"topic", "team-b.orders", "Read"},
		{"topic", "orders", "Read"},
		{"group", "team-b.orders", "Read"},
		{"topic", "team-a.orders", "Create"},
		{"topic", "team-a.orders", "Delete"},
		{"topic", "team-a.orders", "AlterConfigs"},
		{"topic", "team-a.chatbot.dlq.state", "Write"},
	} {
		g.Expect(allowed(list, no.resType, no.name, no.op)).To(BeFalse(), "%+v", no)
	}
	// The deny is what keeps the record of decisions: without it the prefix grants it.
	var allows []acl
	for _, a := range list {
		if !a.deny {
			allows = append(allows, a)
		}
	}
	g.Expect(allowed(allows, "topic", "team-a.chatbot.dlq.state", "Write")).To(BeTrue())
	g.Expect(strings.Count(string(raw), samplesNamespace)).To(BeNumerically(">=", 4), "the namespace the script replaces")
}

// TestOperatorUserCanDoWhatTheManagerDoes checks the manager's user against the requests the
// manager sends on a namespace's topics and groups (see the file's comment), and that it may not
// join or commit to a consumer group: the pods of pipelines must use their own user.
func TestOperatorUserCanDoWhatTheManagerDoes(t *testing.T) {
	g := NewWithT(t)
	list := acls(t, kafkaUser(t, operatorUserFile, samplesNamespace))
	for _, topic := range []string{"team-a.orders", "team-a.orders.retry.1", "team-a.chatbot.dlq", "team-a.chatbot.dlq.state"} {
		for _, op := range []string{"Create", "Describe", "DescribeConfigs", "AlterConfigs", "Alter", "Delete", "Read", "Write"} {
			g.Expect(allowed(list, "topic", topic, op)).To(BeTrue(), "%s %s", op, topic)
		}
	}
	g.Expect(allowed(list, "group", "team-a.orders", "Describe")).To(BeTrue())
	g.Expect(allowed(list, "group", "team-a.orders", "Read")).To(BeFalse(), "the manager would be able to consume as a pipeline")
	g.Expect(allowed(list, "group", "team-a.orders", "Delete")).To(BeFalse())
	for _, a := range list {
		g.Expect(a.resType).NotTo(Equal("cluster"), fmt.Sprintf("%+v: the manager sends nothing on the cluster resource", a))
	}
}
