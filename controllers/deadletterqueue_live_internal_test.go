package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/render"
)

var liveNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func TestSetDLQHealthy(t *testing.T) {
	th := render.DeadLetterQueueThresholds{MaxMessages: 10, MaxGrowthPerMinute: 12, MaxOldestAge: 24 * time.Hour}
	recent := ptr.To(metav1.NewTime(liveNow.Add(-time.Hour)))
	old := ptr.To(metav1.NewTime(liveNow.Add(-25 * time.Hour)))
	slow := growthRate{perMinute: 3, known: true, window: 5 * time.Minute}
	fast := growthRate{perMinute: 12.5, known: true, window: 5 * time.Minute}
	for name, tc := range map[string]struct {
		messages    *int64
		oldest      *metav1.Time
		growth      growthRate
		readAgo     time.Duration // how long before liveNow the figures were read (30s interval)
		neverRead   bool          // not read since the manager started
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		"never counted: unknown": {
			wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonReconciling, wantMessage: "the dead letters have not been counted yet",
		},
		"empty queue: healthy, with the thresholds in the message": {
			messages: ptr.To[int64](0), wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonHealthy,
			wantMessage: "no alert threshold crossed (maxMessages 10, maxGrowthPerMinute 12, maxOldestAge 24h)",
		},
		"exactly at maxMessages is not crossing it (the alert says >)": {
			messages: ptr.To[int64](10), oldest: recent, growth: slow, wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonHealthy,
		},
		"one more than maxMessages": {
			messages: ptr.To[int64](11), oldest: recent, growth: slow, wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonTooManyMessages,
			wantMessage: "holds 11 dead letters, more than maxMessages 10",
		},
		"oldest older than maxOldestAge": {
			messages: ptr.To[int64](2), oldest: old, wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonOldMessages,
			wantMessage: "the oldest dead letter, from 2026-11-20T09:00:00Z, is older than maxOldestAge 24h",
		},
		"an old timestamp in an empty queue is no crossing": {
			messages: ptr.To[int64](0), oldest: old, wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonHealthy,
		},
		"growth above the limit": {
			messages: ptr.To[int64](5), oldest: recent, growth: fast, wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonFastGrowth,
			wantMessage: "grew by 12.5 dead letters per minute over the last 5m, more than maxGrowthPerMinute 12",
		},
		"growth exactly at the limit is not crossing it": {
			messages: ptr.To[int64](5), growth: growthRate{perMinute: 12, known: true, window: 5 * time.Minute},
			wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonHealthy,
		},
		"an unknown growth rate is no crossing": {
			messages: ptr.To[int64](5), growth: growthRate{perMinute: 1000}, wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonHealthy,
		},
		"figures read two intervals ago: still judged": {
			messages: ptr.To[int64](11), readAgo: time.Minute, wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonTooManyMessages,
		},
		"figures read more than two intervals ago: unknown, whatever they say": {
			messages: ptr.To[int64](0), readAgo: 2*time.Minute + 500*time.Millisecond, wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonFiguresStale,
			wantMessage: "the figures were last read at 2026-11-21T09:57:59Z, more than 2 refresh intervals (1m) ago (see Ready): " +
				"whether an alert threshold is crossed is not known until they are read again",
		},
		"stale figures that crossed a threshold: unknown too": {
			messages: ptr.To[int64](11), oldest: old, growth: fast, readAgo: time.Hour, wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonFiguresStale,
		},
		"figures not read since the manager started: unknown": {
			messages: ptr.To[int64](0), neverRead: true, wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonFiguresStale,
			wantMessage: "the figures in status have not been read since the manager started (see Ready): " +
				"whether an alert threshold is crossed is not known until they are read again",
		},
		"every crossing: the most severe gives the reason, the message names all": {
			messages: ptr.To[int64](11), oldest: old, growth: fast, wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonFastGrowth,
			wantMessage: "grew by 12.5 dead letters per minute over the last 5m, more than maxGrowthPerMinute 12; " +
				"holds 11 dead letters, more than maxMessages 10; " +
				"the oldest dead letter, from 2026-11-20T09:00:00Z, is older than maxOldestAge 24h",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &retryv1alpha1.DeadLetterQueueStatus{Messages: tc.messages, OldestMessageTime: tc.oldest}
			age := figuresAge{now: liveNow, readAt: liveNow.Add(-tc.readAgo), staleAfter: staleRefreshes * 30 * time.Second}
			if tc.neverRead {
				age.readAt = time.Time{}
			}
			setDLQHealthy(st, 4, th, tc.growth, age)
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionHealthy)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.ObservedGeneration).To(Equal(int64(4)))
			if tc.wantMessage != "" {
				g.Expect(c.Message).To(Equal(tc.wantMessage))
			}
		})
	}
}

func TestHealthChanged(t *testing.T) {
	cond := func(s metav1.ConditionStatus, reason string) *metav1.Condition {
		return &metav1.Condition{Type: retryv1alpha1.ConditionHealthy, Status: s, Reason: reason, Message: "m " + reason}
	}
	healthy := cond(metav1.ConditionTrue, retryv1alpha1.ReasonHealthy)
	tooMany := cond(metav1.ConditionFalse, retryv1alpha1.ReasonTooManyMessages)
	old := cond(metav1.ConditionFalse, retryv1alpha1.ReasonOldMessages)
	unknown := cond(metav1.ConditionUnknown, retryv1alpha1.ReasonReconciling)
	for name, tc := range map[string]struct {
		before, after *metav1.Condition
		want          bool
	}{
		"a new queue that starts healthy is not news":      {before: nil, after: healthy, want: false},
		"a new queue that starts unhealthy is":             {before: nil, after: tooMany, want: true},
		"from unknown to healthy is not news":              {before: unknown, after: healthy, want: false},
		"from unknown to unhealthy is":                     {before: unknown, after: tooMany, want: true},
		"healthy to unhealthy":                             {before: healthy, after: tooMany, want: true},
		"unhealthy to healthy":                             {before: tooMany, after: healthy, want: true},
		"another threshold crossed while unhealthy":        {before: tooMany, after: old, want: true},
		"the same crossing with a new count is not news":   {before: tooMany, after: cond(metav1.ConditionFalse, retryv1alpha1.ReasonTooManyMessages), want: false},
		"healthy stays healthy":                            {before: healthy, after: healthy, want: false},
		"unknown again (never counted) is not news either": {before: healthy, after: unknown, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(healthChanged(tc.before, tc.after)).To(Equal(tc.want))
		})
	}
}

func TestGrowthPerMinute(t *testing.T) {
	at := func(sec int, messages int64) growthSample {
		return growthSample{at: liveNow.Add(time.Duration(sec) * time.Second), messages: messages}
	}
	for name, tc := range map[string]struct {
		samples   []growthSample
		want      float64
		wantKnown bool
	}{
		"no sample":               {want: 0, wantKnown: false},
		"one sample says nothing": {samples: []growthSample{at(0, 5)}, want: 0, wantKnown: false},
		"two samples at the same time say nothing": {samples: []growthSample{at(0, 5), at(0, 9)}, want: 0, wantKnown: false},
		"steady: zero":                    {samples: []growthSample{at(0, 5), at(30, 5), at(60, 5)}, want: 0, wantKnown: true},
		"a line: its slope":               {samples: []growthSample{at(0, 0), at(30, 6), at(60, 12)}, want: 12, wantKnown: true},
		"two samples 30s apart":           {samples: []growthSample{at(0, 100), at(30, 110)}, want: 20, wantKnown: true},
		"shrinking (retention): negative": {samples: []growthSample{at(0, 12), at(60, 0)}, want: -12, wantKnown: true},
		// deriv() fits a least-squares line: a step 0,0,0,30 over 0..90s has slope 0.2/s.
		"a step is fitted, not taken end to end": {samples: []growthSample{at(0, 0), at(30, 0), at(60, 0), at(90, 30)}, want: 18, wantKnown: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, known := growthPerMinute(tc.samples)
			g.Expect(known).To(Equal(tc.wantKnown))
			g.Expect(got).To(BeNumerically("~", tc.want, 1e-9))
		})
	}
}

func TestGrowthSamplesKeepTheWindow(t *testing.T) {
	g := NewWithT(t)
	var h growthSamples
	const window = 5 * time.Minute
	r := h.add(liveNow, 0, window)
	g.Expect(r.known).To(BeFalse())
	r = h.add(liveNow.Add(time.Minute), 30, window)
	g.Expect(r).To(Equal(growthRate{perMinute: 30, known: true, window: window}))

	// A second reading of the same snapshot (after a trim, say) replaces the sample.
	r = h.add(liveNow.Add(time.Minute), 12, window)
	g.Expect(r.perMinute).To(BeNumerically("~", 12, 1e-9))
	g.Expect(h.samples).To(HaveLen(2))

	// An older snapshot than the last sample is not recorded.
	h.add(liveNow.Add(30*time.Second), 1000, window)
	g.Expect(h.samples).To(HaveLen(2))

	// Samples older than the window go: after a quiet window the rate is zero again.
	for m := 2; m <= 7; m++ {
		r = h.add(liveNow.Add(time.Duration(m)*time.Minute), 12, window)
	}
	g.Expect(h.samples[0].at).To(Equal(liveNow.Add(2 * time.Minute)))
	g.Expect(r.perMinute).To(BeZero())
	g.Expect(r.known).To(BeTrue())

	// The history is bounded.
	for i := range 2 * maxGrowthSamples {
		h.add(liveNow.Add(8*time.Minute+time.Duration(i)*time.Millisecond), int64(i), window)
	}
	g.Expect(len(h.samples)).To(Equal(maxGrowthSamples))
}

func TestDLQGrowthWindowFollowsTheAlertRule(t *testing.T) {
	g := NewWithT(t)
	q := &retryv1alpha1.DeadLetterQueue{}
	g.Expect(dlqGrowthWindow(q)).To(Equal(render.GrowthWindow))
	q.Spec.StatusRefreshInterval = &metav1.Duration{Duration: time.Minute}
	g.Expect(dlqGrowthWindow(q)).To(Equal(render.GrowthWindow))
	q.Spec.StatusRefreshInterval = &metav1.Duration{Duration: 10 * time.Minute}
	g.Expect(dlqGrowthWindow(q)).To(Equal(30 * time.Minute))
}

func TestSetDLQBreakdown(t *testing.T) {
	earlier := metav1.NewTime(liveNow.Add(-time.Hour))
	oldest, newest := liveNow.Add(-10*time.Minute), liveNow.Add(-time.Minute)
	full := &kafkastats.Breakdown{
		Messages: 3, Oldest: oldest, Newest: newest,
		Reasons:    []kafkastats.Count{{Name: "max_retries_exceeded", Count: 2}, {Name: "undeliverable", Count: 1}},
		ErrorTypes: []kafkastats.Count{{Name: "TimeoutError", Count: 3}},
		Pipelines:  []kafkastats.Count{{Name: "ns/a", Count: 3}},
	}
	shown := retryv1alpha1.DeadLetterQueueStatus{
		Messages:          ptr.To[int64](3),
		OldestMessageTime: ptr.To(metav1.NewTime(oldest)), NewestMessageTime: ptr.To(metav1.NewTime(newest)),
		Reasons:         []retryv1alpha1.NamedCount{{Name: "max_retries_exceeded", Count: 2}, {Name: "undeliverable", Count: 1}},
		ErrorTypes:      []retryv1alpha1.NamedCount{{Name: "TimeoutError", Count: 3}},
		Pipelines:       []retryv1alpha1.NamedCount{{Name: "ns/a", Count: 3}},
		LastRefreshTime: &earlier,
	}
	many := &kafkastats.Breakdown{Messages: 25}
	for i := range 25 {
		many.Reasons = append(many.Reasons, kafkastats.Count{Name: string(rune('a' + i)), Count: int64(100 - i)})
	}
	for name, tc := range map[string]struct {
		before retryv1alpha1.DeadLetterQueueStatus
		b      *kafkastats.Breakdown
		check  func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus)
	}{
		"a first breakdown writes everything and the refresh time": {
			before: retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](3)}, b: full,
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) {
				want := shown
				want.LastRefreshTime = ptr.To(metav1.NewTime(liveNow))
				g.Expect(st).To(Equal(want))
			},
		},
		"an unchanged breakdown changes nothing, not even the refresh time": {
			before: shown, b: full,
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) { g.Expect(st).To(Equal(shown)) },
		},
		"times are kept to the second as the API stores them: milliseconds are no change": {
			before: shown, b: func() *kafkastats.Breakdown {
				b := *full
				b.Oldest, b.Newest = oldest.Add(400*time.Millisecond), newest.Add(999*time.Millisecond)
				return &b
			}(),
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) { g.Expect(st).To(Equal(shown)) },
		},
		"not read this time: kept": {
			before: shown, b: nil,
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) { g.Expect(st).To(Equal(shown)) },
		},
		"an emptied queue loses its times and lists": {
			before: shown, b: &kafkastats.Breakdown{},
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) {
				g.Expect(st.OldestMessageTime).To(BeNil())
				g.Expect(st.NewestMessageTime).To(BeNil())
				g.Expect(st.Reasons).To(BeNil())
				g.Expect(st.ErrorTypes).To(BeNil())
				g.Expect(st.Pipelines).To(BeNil())
				g.Expect(st.LastRefreshTime).To(Equal(ptr.To(metav1.NewTime(liveNow))))
			},
		},
		"lists are cut to the 20 largest": {
			b: many,
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) {
				g.Expect(st.Reasons).To(HaveLen(maxBreakdownEntries))
				g.Expect(st.Reasons[0]).To(Equal(retryv1alpha1.NamedCount{Name: "a", Count: 100}))
				g.Expect(st.Reasons[19]).To(Equal(retryv1alpha1.NamedCount{Name: "t", Count: 81}))
			},
		},
		"names longer than the API allows are cut": {
			b: &kafkastats.Breakdown{Messages: 1, ErrorTypes: []kafkastats.Count{{Name: string(make([]byte, 300)), Count: 1}}},
			check: func(g Gomega, st retryv1alpha1.DeadLetterQueueStatus) {
				g.Expect(st.ErrorTypes).To(HaveLen(1))
				g.Expect(st.ErrorTypes[0].Name).To(HaveLen(maxNamedCountName))
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := *tc.before.DeepCopy()
			setDLQBreakdown(&st, tc.b, liveNow)
			tc.check(g, st)
		})
	}
}
