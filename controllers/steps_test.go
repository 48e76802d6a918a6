package controllers

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

func TestKafkaProblem(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		wantReason string
		wantKind   problemKind
	}{
		"credentials refused":            {fmt.Errorf("kafka ping: %w", kafka.ErrAuth), retryv1alpha1.ReasonKafkaUnauthorized, problemTransient},
		"ACL denies the topic":           {brokerError("describe", kafka.KindAuth, "TOPIC_AUTHORIZATION_FAILED", false), retryv1alpha1.ReasonKafkaUnauthorized, problemTransient},
		"broker unreachable":             {fmt.Errorf("dial: %w", kafka.ErrUnreachable), retryv1alpha1.ReasonKafkaUnavailable, problemTransient},
		"TLS handshake failed":           {fmt.Errorf("dial: %w", kafka.ErrTLS), retryv1alpha1.ReasonKafkaUnavailable, problemTransient},
		"retriable broker code":          {brokerError("create", kafka.KindOther, "NOT_CONTROLLER", true), retryv1alpha1.ReasonKafkaUnavailable, problemTransient},
		"invalid config value":           {brokerError("create", kafka.KindOther, "INVALID_CONFIG", false), retryv1alpha1.ReasonKafkaRejected, problemWaiting},
		"replication factor too large":   {brokerError("create", kafka.KindOther, "INVALID_REPLICATION_FACTOR", false), retryv1alpha1.ReasonKafkaRejected, problemWaiting},
		"invalid connection":             {&kafka.ConfigError{Errs: []error{errors.New("bad")}}, retryv1alpha1.ReasonInvalidSpec, problemUser},
		"anything else is transient":     {errors.New("boom"), retryv1alpha1.ReasonKafkaUnavailable, problemTransient},
		"a problem passes through as is": {&problem{Reason: retryv1alpha1.ReasonTopicConflict}, retryv1alpha1.ReasonTopicConflict, problemWaiting},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := kafkaProblem(tc.err)
			g.Expect(p.Reason).To(Equal(tc.wantReason))
			g.Expect(p.Kind).To(Equal(tc.wantKind))
			if p.Kind == problemTransient {
				g.Expect(p.Err).To(MatchError(tc.err))
			}
		})
	}
	NewWithT(t).Expect(kafkaProblem(nil)).To(BeNil())
}

// brokerError is what internal/kafka returns for a broker that answered op with code.
func brokerError(op string, kind kafka.Kind, code string, retriable bool) error {
	return fmt.Errorf("reconcile: %w", kafka.NewError(op, kind, errors.New(code+": the broker says no"), "").WithCode(code, retriable))
}

func TestProblems(t *testing.T) {
	g := NewWithT(t)
	var ps problems
	ps.add(nil)
	g.Expect(ps).To(BeEmpty())
	g.Expect(ps.transient()).To(BeNil())
	g.Expect(ps.userOnly()).To(BeFalse())
	c := ps.condition(retryv1alpha1.ConditionReady, 3, "Fine", "all good")
	g.Expect(c).To(Equal(metav1.Condition{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Fine", Message: "all good", ObservedGeneration: 3}))

	ps.add(&problem{Reason: retryv1alpha1.ReasonInvalidSpec, Message: "bad", Kind: problemUser})
	g.Expect(ps.userOnly()).To(BeTrue())
	boom := errors.New("boom")
	ps.add(&problem{Reason: retryv1alpha1.ReasonKafkaUnavailable, Message: "down", Kind: problemTransient, Err: boom})
	g.Expect(ps.userOnly()).To(BeFalse())
	g.Expect(ps.transient()).To(MatchError(boom))
	c = ps.condition(retryv1alpha1.ConditionReady, 3, "Fine", "all good")
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(retryv1alpha1.ReasonInvalidSpec))
	g.Expect(c.Message).To(Equal("bad; down"))
}

func TestTruncateCutsOnARuneBoundary(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		n    int
		want string
	}{
		"short enough":                {"héllo", 6, "héllo"},
		"ASCII":                       {"abcdefgh", 6, "abc..."},
		"a two-byte rune at the cut":  {"aé-bcd", 5, "a..."},
		"a four-byte rune at the cut": {"ab🙂cdef", 8, "ab..."},
		"only multi-byte runes":       {"ééééé", 7, "éé..."},
		"a cut right after a rune":    {"aébcdef", 6, "aé..."},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := truncate(tc.in, tc.n)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(len(got)).To(BeNumerically("<=", tc.n))
			g.Expect(utf8.ValidString(got)).To(BeTrue(), "%q", got)
		})
	}
}

func TestFinishReconcile(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "deadletterqueues"}, "q", errors.New("stale"))
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		err         error
		ps          problems
		writeErr    error
		wantWritten bool
		want        ctrl.Result
		wantErr     error
	}{
		"all fine: status written, resync":       {wantWritten: true, want: ctrl.Result{RequeueAfter: time.Minute}},
		"a stale read: nothing written, retried": {err: conflict, want: ctrl.Result{RequeueAfter: staleRetry}},
		"a failed step: written, error returned": {err: boom, ps: problems{{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: boom}}, wantWritten: true, wantErr: boom},
		"a transient problem: its error":         {ps: problems{{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Err: boom}}, wantWritten: true, wantErr: boom},
		"user errors only: no requeue":           {ps: problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser}}, wantWritten: true},
		"a conflicting status write: retried":    {writeErr: conflict, wantWritten: true, want: ctrl.Result{RequeueAfter: staleRetry}},
		"a step and the write both failed":       {err: boom, writeErr: errors.New("write"), wantWritten: true, wantErr: boom},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			written := false
			got, err := finishReconcile(tc.err, tc.ps, func() error { written = true; return tc.writeErr }, func() time.Duration { return time.Minute })
			g.Expect(written).To(Equal(tc.wantWritten))
			g.Expect(got).To(Equal(tc.want))
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(tc.wantErr))
			}
		})
	}
}

func TestEndStepRecordsAFailedStep(t *testing.T) {
	g := NewWithT(t)
	boom := errors.New("boom")
	var ps problems
	stop, err := endStep(&ps, named("First", nil))
	g.Expect(stop).To(BeFalse())
	g.Expect(err).NotTo(HaveOccurred())
	stop, err = endStep(&ps, named("Second", boom))
	g.Expect(stop).To(BeTrue(), "the phases after a failed one do not run")
	g.Expect(err).To(MatchError(boom))
	g.Expect(err.Error()).To(Equal("Second: boom"))
	g.Expect(ps).To(HaveLen(1))
	g.Expect(ps[0].Reason).To(Equal(retryv1alpha1.ReasonReconcileError))
	g.Expect(ps[0].Message).To(Equal("Second: boom"))
	g.Expect(ps.transient()).To(MatchError(boom))

	// A problem ends the run too, recorded as it is and not returned.
	ps = nil
	waiting := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Message: "missing"}
	stop, err = endStep(&ps, named("Third", waiting))
	g.Expect(stop).To(BeTrue())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ps).To(ConsistOf(waiting))

	// A stale read is no condition: whatever was built from it is stale too.
	ps = nil
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "deadletterqueues"}, "q", errors.New("stale"))
	stop, err = endStep(&ps, named("Finalizer", conflict))
	g.Expect(stop).To(BeTrue())
	g.Expect(apierrors.IsConflict(err)).To(BeTrue())
	g.Expect(ps).To(BeEmpty())
}

func TestTheOperatorsOwnAnnotationsTriggerNoReconcile(t *testing.T) {
	g := NewWithT(t)
	old := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Name: "q", Annotations: map[string]string{"team": "a"}}}
	own := old.DeepCopy()
	own.Annotations[annotationDeletionFailure] = "refused"
	p := specOrLifecycleChanged()
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: own})).To(BeFalse())
	user := own.DeepCopy()
	user.Annotations["team"] = "b"
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: own, ObjectNew: user})).To(BeTrue())
	g.Expect(old.Annotations).To(HaveLen(1), "the objects are not changed")
}
