package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestDemoHasTwoPipelinesOnOneSource renders the demo's kustomization as `make dev` applies it:
// chat and audit read the same source with their own group, policy and sink, audit shares chat's
// queue and leaves the source's creation to chat, and every name the claim policy checks starts
// with the demo namespace.
func TestDemoHasTwoPipelinesOnOneSource(t *testing.T) {
	objs := renderDemo(t)
	str := func(kind, name string, path ...string) string {
		u := objs[kind+"/"+name]
		if u == nil {
			t.Fatalf("no %s %s in the demo", kind, name)
		}
		v, _, _ := unstructured.NestedString(u.Object, path...)
		return v
	}
	for _, c := range []struct{ got, want string }{
		{str("ConsumerPipeline", "chat", "spec", "source", "topic"), demoTopic},
		{str("ConsumerPipeline", "audit", "spec", "source", "topic"), demoTopic},
		{str("ConsumerPipeline", "chat", "spec", "source", "consumerGroup"), demoNamespace + ".alice-orchestrator"},
		{str("ConsumerPipeline", "audit", "spec", "source", "consumerGroup"), ""}, // <namespace>.audit
		{str("ConsumerPipeline", "chat", "spec", "sink", "uri"), "http://127.0.0.1:1/tasks"},
		{str("ConsumerPipeline", "audit", "spec", "sink", "uri"), "http://127.0.0.1:1/audit"},
		{str("ConsumerPipeline", "audit", "spec", "retryPolicyRef", "name"), "audit"},
		{str("ConsumerPipeline", "audit", "spec", "deadLetterQueueRef", "name"), "chatbot-dlq"},
		{str("ConsumerPipeline", "chat", "spec", "source", "create", "existingTopic"), "Adopt"},
		{str("DeadLetterQueue", "chatbot-dlq", "spec", "topic", "name"), demoNamespace + ".chatbot.dlq"},
		{str("RetryPolicy", "audit", "kind"), "RetryPolicy"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if _, has, _ := unstructured.NestedMap(objs["ConsumerPipeline/audit"].Object, "spec", "source", "create"); has {
		t.Error("audit has source.create: it should read the topic chat creates")
	}
}

// renderDemo renders the demo's kustomization as `make dev` applies it (sink address
// 127.0.0.1:1), keyed <kind>/<name>, and fails on an object outside the demo namespace.
func renderDemo(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	dir, err := writeDemo(t.TempDir(), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(out)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetNamespace() != demoNamespace {
			t.Errorf("%s %s is in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
		objs[u.GetKind()+"/"+u.GetName()] = u
	}
	return objs
}

// TestDemoRunsTheLibraryModeConsumer: the documents pipeline runs the example consumer's image
// (which the stack maps to bin/example-consumer) on one replica, on a source under the claim
// policy, with its policy's delays short enough for the demo to show its retries.
func TestDemoRunsTheLibraryModeConsumer(t *testing.T) {
	objs := renderDemo(t)
	docs := objs["ConsumerPipeline/documents"]
	if docs == nil {
		t.Fatal("no ConsumerPipeline documents in the demo")
	}
	if replicas, _, _ := unstructured.NestedFieldNoCopy(docs.Object, "spec", "replicas"); fmt.Sprint(replicas) != "1" {
		t.Errorf("documents runs %v replicas, want 1", replicas)
	}
	if topic, _, _ := unstructured.NestedString(docs.Object, "spec", "source", "topic"); topic != documentsTopic {
		t.Errorf("documents reads %q, want %q", topic, documentsTopic)
	}
	containers, _, _ := unstructured.NestedSlice(docs.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("documents has %d containers, want 1", len(containers))
	}
	image, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	if repo, _, _ := strings.Cut(image, ":"); repo != exampleConsumerImage {
		t.Errorf("documents runs image %q, want %s:<tag> (run as bin/%s)", image, exampleConsumerImage, exampleConsumerProgram)
	}
	initial, _, _ := unstructured.NestedString(objs["RetryPolicy/documents"].Object, "spec", "backoff", "initialDelay")
	maxDelay, _, _ := unstructured.NestedString(objs["RetryPolicy/documents"].Object, "spec", "backoff", "maxDelay")
	if initial != "5s" || maxDelay != "20s" {
		t.Errorf("the documents policy's backoff is %s to %s, want 5s to 20s", initial, maxDelay)
	}
}
