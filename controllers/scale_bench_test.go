package controllers_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	corev1 "k8s.io/api/core/v1"
)

// scaleConnections is the number of Kafka connections of a scale run: every resource is on the
// manager's default one.
const scaleConnections = 1

// BenchmarkReconcile500DLQsAnd500Pipelines reconciles 500 DeadLetterQueues and 500
// ConsumerPipelines (2,500 topics; half the pipelines share 4 RetryPolicies, the others have one
// each) against kfake, at the manager's default resync interval. Run it with
//
//	go test ./controllers/ -run '^$' -bench BenchmarkReconcile -benchtime 1x
//
// It reports the time until all are Ready, the Kafka admin requests, Kubernetes writes and events
// that took, those of one steady-state resync (writes, events and topic changes all expected to be
// zero), the CPU the test process (the manager), kfake and envtest's API server and etcd used on
// the way to Ready, and the process's peak heap and resident memory: the run has an API server of
// its own and kfake in a child process, so they are the manager's (see memorySampler).
func BenchmarkReconcile500DLQsAnd500Pipelines(b *testing.B) {
	benchmarkScale(b, scaleSpec{dlqs: 500, pipelines: 500, sharedPolicies: 4, isolated: true})
}

// BenchmarkReconcile5000DLQsAnd5000Pipelines is BenchmarkReconcile500DLQsAnd500Pipelines with
// 10,000 resources (25,000 topics).
func BenchmarkReconcile5000DLQsAnd5000Pipelines(b *testing.B) {
	benchmarkScale(b, scaleSpec{dlqs: 5000, pipelines: 5000, sharedPolicies: 4, isolated: true})
}

// BenchmarkStartOn500DLQsAnd500Pipelines starts the manager on the objects of
// BenchmarkReconcile500DLQsAnd500Pipelines created while it was stopped (an operator installed or
// upgraded onto a cluster that holds them): seconds to Ready from its start, and the figures to Ready.
func BenchmarkStartOn500DLQsAnd500Pipelines(b *testing.B) {
	benchmarkScale(b, scaleSpec{dlqs: 500, pipelines: 500, sharedPolicies: 4, isolated: true, onExisting: true, readyOnly: true})
}

// BenchmarkStartOn5000DLQsAnd5000Pipelines is BenchmarkStartOn500DLQsAnd500Pipelines with 10,000.
func BenchmarkStartOn5000DLQsAnd5000Pipelines(b *testing.B) {
	benchmarkScale(b, scaleSpec{dlqs: 5000, pipelines: 5000, sharedPolicies: 4, isolated: true, onExisting: true, readyOnly: true})
}

func benchmarkScale(b *testing.B, spec scaleSpec) {
	const mb = 1 << 20
	for b.Loop() {
		r := runScale(b, spec, 30*time.Second)
		r.report(b)
		b.Logf("created in %v; CPU seconds to Ready: %v; Warning events:%s\nevents by kind, type, reason:%s", r.created.Round(time.Millisecond), r.cpuToReady, r.eventList.describeWarnings(), r.eventList.describeReasons())
		resources := float64(spec.dlqs + spec.pipelines)
		b.ReportMetric(r.toReady.Seconds(), "s-to-ready")
		b.ReportMetric(r.created.Seconds(), "s-to-create")
		b.ReportMetric(float64(sum(r.adminRequests, adminKeys...)), "kafka-requests-to-ready")
		b.ReportMetric(float64(r.writes), "k8s-writes-to-ready")
		b.ReportMetric(float64(r.conflicts), "k8s-conflicts-to-ready")
		b.ReportMetric(float64(r.eventList.byType[corev1.EventTypeNormal]), "events-normal")
		b.ReportMetric(float64(r.eventList.byType[corev1.EventTypeWarning]), "events-warning")
		b.ReportMetric(float64(r.events)/resources, "events/resource")
		b.ReportMetric(float64(r.eventList.maxPerResource()), "events/resource-max")
		b.ReportMetric(r.cpuToReady["test"], "cpu-s-manager-to-ready")
		b.ReportMetric(r.cpuToReady["kafka"], "cpu-s-kafka-to-ready")
		b.ReportMetric(r.cpuToReady["kube-apiserver"], "cpu-s-apiserver-to-ready")
		b.ReportMetric(r.cpuToReady["etcd"], "cpu-s-etcd-to-ready")
		b.ReportMetric(float64(r.heap.heapInuse)/mb, "peak-heap-inuse-MB")
		b.ReportMetric(float64(r.heap.heapAlloc)/mb, "peak-heap-alloc-MB")
		b.ReportMetric(float64(r.heap.heapLive)/mb, "peak-heap-live-MB")
		b.ReportMetric(float64(r.heap.baseInuse)/mb, "base-heap-inuse-MB")
		b.ReportMetric(float64(r.heap.baseLive)/mb, "base-heap-live-MB")
		b.ReportMetric(float64(r.heap.rss)/mb, "peak-rss-MB")
		b.ReportMetric(float64(r.heap.baseRSS)/mb, "base-rss-MB")
		b.ReportMetric(float64(vmHWM())/mb, "VmHWM-MB")
		if n := r.eventList.byType[corev1.EventTypeWarning]; n != 0 {
			b.Errorf("a healthy run recorded %d Warning events:%s", n, r.eventList.describeWarnings())
		}
		if spec.readyOnly {
			continue
		}
		b.ReportMetric(float64(sum(r.steadyAdmin, adminKeys...)), "kafka-requests/steady-window")
		b.ReportMetric(r.requestsPerResync()/scaleConnections, "kafka-requests/resync/conn")
		b.ReportMetric(float64(sum(r.steadyAdmin, topicChangeKeys...)), "topic-changes/resync")
		b.ReportMetric(float64(r.steadyWrites), "k8s-writes/resync")
		// The window holds two resyncs of every resource and one offsets round.
		b.ReportMetric(r.steadyCPU["test"]/2, "cpu-s-manager/resync")
		b.ReportMetric(r.steadyCPU["kube-apiserver"]/2, "cpu-s-apiserver/resync")
		if len(r.foreignTopics) > 0 {
			b.Errorf("the manager created topics of no resource of this run: %v", r.foreignTopics)
		}
		if r.steadyWrites != 0 || sum(r.steadyAdmin, topicChangeKeys...) != 0 {
			b.Errorf("steady state is not quiet: %d writes, %d topic changes", r.steadyWrites, sum(r.steadyAdmin, topicChangeKeys...))
		}
	}
}

// requestsPerResync are the Kafka requests of one steady resync: the steady window holds one
// offsets round (ListOffsets) and two resyncs of every resource (the rest).
func (r scaleResult) requestsPerResync() float64 {
	offsets := float64(r.steadyAdmin[kmsg.ListOffsets])
	return (float64(sum(r.steadyAdmin, adminKeys...))-offsets)/2 + offsets
}
