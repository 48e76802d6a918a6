package dlqui

import (
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func TestQualifiedPipeline(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, short string
	}{
		{"a bare name is the namespace's pipeline", "orders", "shop/orders", "orders"},
		{"the namespace's own, qualified", "shop/orders", "shop/orders", "orders"},
		{"another namespace: as written, never this namespace's pipeline", "other/orders", "other/orders", "other/orders"},
		{"more parts (a header a producer wrote): as written", "a/b/c", "a/b/c", "a/b/c"},
		{"the namespace with more parts: as written", "shop/a/b", "shop/a/b", "shop/a/b"},
		{"an empty name: as written", "shop/", "shop/", "shop/"},
		{"an empty namespace: as written", "/orders", "/orders", "/orders"},
		{"a prefix of the namespace is not it", "shopping/orders", "shopping/orders", "shopping/orders"},
		{"a name with a blank after it is no pipeline's: shown whole", "shop/orders ", "shop/orders ", "shop/orders "},
		{"a name with a blank before it is no pipeline's: shown whole", "shop/ orders", "shop/ orders", "shop/ orders"},
		{"a name in capitals is no pipeline's: shown whole", "shop/Orders", "shop/Orders", "shop/Orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(QualifiedPipeline("shop", tc.in)).To(Equal(tc.want))
			g.Expect(ShortPipeline("shop", tc.want)).To(Equal(tc.short))
			g.Expect(QualifiedPipeline("shop", ShortPipeline("shop", tc.want))).To(Equal(tc.want), "offered and chosen again")
		})
	}
}

func TestParseRecord(t *testing.T) {
	for in, want := range map[string]*Record{
		"0/42":                  {0, 42},
		"2147483647/9":          {2147483647, 9},
		"3/9223372036854775807": {3, 9223372036854775807},
		"0:1":                   nil,
		"0/x":                   nil,
		"-1/2":                  nil,
		"1/-2":                  nil,
		"+1/2":                  nil,
		"01/2":                  nil,
		"2147483648/0":          nil,
		"1/2/3":                 nil,
		"1/2 ":                  nil,
		"":                      nil,
	} {
		got, err := ParseRecord(in)
		switch {
		case want == nil && err == nil:
			t.Errorf("ParseRecord(%q) = %v, want an error", in, got)
		case want != nil && (err != nil || got != *want || got.String() != in):
			t.Errorf("ParseRecord(%q) = %v, %v, want %v", in, got, err, *want)
		}
	}
}

func TestActionRequestBuild(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		req     ActionRequest
		want    *retryv1alpha1.DeadLetterActionSpec
		wantErr error
	}{
		{"a replay of every pending dead letter: no selector", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q"},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeRun}, nil},
		{"every part of a request", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", DryRun: true, Rate: 50, MaxRecords: 7, MaxReplays: 2,
			Filter: Filter{Reasons: []string{"r"}, ErrorTypes: []string{"e"}, Pipelines: []string{"orders", "other/x"}, States: []string{"Pending"}, Since: t0.Add(500 * time.Millisecond), Until: t0.Add(time.Hour)},
			Keys:   []string{"k"}, Headers: []retryv1alpha1.HeaderMatch{{Name: "h", Value: "v"}}, Records: []Record{{1, 2}},
			Target: &retryv1alpha1.ReplayTarget{Topic: "t"}},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeDryRun,
				Target: &retryv1alpha1.ReplayTarget{Topic: "t"}, Rate: &retryv1alpha1.ReplayRate{RecordsPerSecond: 50}, MaxRecords: ptr.To[int64](7), MaxReplays: 2,
				Selector: &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{"r"}, ErrorTypes: []retryv1alpha1.DeadLetterName{"e"},
					Pipelines: []retryv1alpha1.DeadLetterName{"shop/orders", "other/x"}, States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending},
					After: &metav1.Time{Time: t0}, Before: &metav1.Time{Time: t0.Add(time.Hour)}, Keys: []retryv1alpha1.RecordKey{"k"},
					Headers: []retryv1alpha1.HeaderMatch{{Name: "h", Value: "v"}}, Records: []retryv1alpha1.RecordRef{"1/2"}}}, nil},
		{"a purge before a time", ActionRequest{Kind: retryv1alpha1.DeadLetterPurge, Queue: "q", Filter: Filter{Until: t0}},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterPurge, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeRun,
				Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: t0}}}, nil},
		{"a purge without a time", ActionRequest{Kind: retryv1alpha1.DeadLetterPurge, Queue: "q", Filter: Filter{Since: t0}}, nil, ErrPurgeWithoutBefore},
		{"a purge since a time", ActionRequest{Kind: retryv1alpha1.DeadLetterPurge, Queue: "q", Filter: Filter{Since: t0, Until: t0.Add(time.Hour)}}, nil, ErrPurgeSince},
		{"a purge of Pending dead letters", ActionRequest{Kind: retryv1alpha1.DeadLetterPurge, Queue: "q", Filter: Filter{Until: t0, States: []string{"Resolved", "Pending"}}}, nil, ErrPurgePending},
		{"a dead letter named twice", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", Records: []Record{{0, 1}, {1, 1}, {0, 1}}}, nil, ErrRecordTwice},
		{"more dead letters than an action holds", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", Records: records(MaxRecords + 1)}, nil, ErrTooManyRecords},
		{"as many dead letters as an action holds", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", Records: records(MaxRecords)},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeRun,
				Selector: &retryv1alpha1.DeadLetterSelector{Records: refs(MaxRecords)}}, nil},
		{"a note without blanks around it", ActionRequest{Kind: retryv1alpha1.DeadLetterResolve, Queue: "q", Note: " fixed\n"},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterResolve, Note: "fixed", RequestedBy: "alice", Mode: retryv1alpha1.ActionModeRun}, nil},
		{"a pipeline as written", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", Filter: Filter{Pipelines: []string{" orders", "shop/orders "}}},
			&retryv1alpha1.DeadLetterActionSpec{Queue: "q", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeRun,
				Selector: &retryv1alpha1.DeadLetterSelector{Pipelines: []retryv1alpha1.DeadLetterName{"shop/ orders", "shop/orders "}}}, nil},
		{"a resolve without a note", ActionRequest{Kind: retryv1alpha1.DeadLetterResolve, Queue: "q", Note: " "}, nil, ErrNoNote},
		{"an ignore without a note", ActionRequest{Kind: retryv1alpha1.DeadLetterIgnore, Queue: "q"}, nil, ErrNoNote},
		{"a target of a resolve", ActionRequest{Kind: retryv1alpha1.DeadLetterResolve, Queue: "q", Note: "n", Target: &retryv1alpha1.ReplayTarget{Topic: "t"}}, nil, ErrTargetNotReplay},
		{"two targets", ActionRequest{Kind: retryv1alpha1.DeadLetterReplay, Queue: "q", Target: &retryv1alpha1.ReplayTarget{Topic: "t", Pipeline: "p"}}, nil, ErrTwoTargets},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := tc.req.Build("shop", "alice")
			if tc.wantErr != nil {
				g.Expect(errors.Is(err, tc.wantErr)).To(BeTrue(), "error %v, want %v", err, tc.wantErr)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Namespace).To(Equal("shop"))
			g.Expect(a.GenerateName).To(Equal(strings.ToLower(string(a.Spec.Action)) + "-q-"))
			g.Expect(a.Spec).To(Equal(*tc.want))
		})
	}
}

// records are n dead letters of partition 0; refs the same as a selector's records.
func records(n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Offset: int64(i)}
	}
	return out
}

func refs(n int) []retryv1alpha1.RecordRef {
	var out []retryv1alpha1.RecordRef
	for _, r := range records(n) {
		out = append(out, retryv1alpha1.RecordRef(r.String()))
	}
	return out
}

func TestActionNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(NewAction("ns", retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, Queue: "orders-dlq"}).GenerateName).To(Equal("replay-orders-dlq-"))
	long := NewAction("ns", retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterPurge, Queue: "a-very-long-queue-name-that-goes-on-and-on-.-and-on-and-on"})
	g.Expect(long.GenerateName).To(Equal("purge-a-very-long-queue-name-that-goes-on-and-on-"))
}
