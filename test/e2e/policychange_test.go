package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/render"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestPolicyChange: on the `make run` stack, a pipeline with ByDelay tiers (3s, 6s, 12s under
// maxAttempts 4) and retryTopics.deletionPolicy Delete gets a new policy (maxAttempts 2, first delay
// 2s: a single tier with another name) while records wait in every tier. Every record ends
// delivered or dead-lettered (as max_retries_exceeded), none lost and none still waiting; the old
// tiers are listed in the dispatcher config's topics.draining while they hold records, are deleted
// only once the group consumed them to the end, and are gone at the end with the pipeline Ready.
func TestPolicyChange(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &pcSink{}
	l := serveSink(t, sink)

	stack, dir := startStack(t, "retryops/retry-dispatcher:policychange")
	var onFailure func() // the consumer group's state, once there is an admin client
	t.Cleanup(func() {   // before the stack stops
		if !t.Failed() {
			return
		}
		if onFailure != nil {
			onFailure()
		}
		if os.Getenv("PC_KEEP") != "" { // keep the stack's logs for a post-mortem
			keep := filepath.Join(os.TempDir(), "policychange-"+time.Now().Format("150405"))
			_ = os.CopyFS(keep, os.DirFS(dir))
			t.Logf("stack dir copied to %s", keep)
		}
	})
	c := stack.Env.Client
	setupDone := time.Now()

	out, err := stack.Kubectl([]byte(pcManifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)

	pipeline := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: pcName, Namespace: pcNS}}
	getPipeline := func() (*retryv1alpha1.ConsumerPipeline, error) {
		p := &retryv1alpha1.ConsumerPipeline{}
		return p, c.Get(ctx, client.ObjectKeyFromObject(pipeline), p)
	}
	tierNames := func(p *retryv1alpha1.ConsumerPipeline) []string {
		if p.Status.Topics == nil {
			return nil
		}
		var out []string
		for _, r := range p.Status.Topics.Retries {
			out = append(out, r.Name)
		}
		return out
	}
	// Ready with the first policy's three tiers.
	g.Eventually(func() ([]string, error) {
		p, err := getPipeline()
		if err != nil || !meta.IsStatusConditionTrue(p.Status.Conditions, retryv1alpha1.ConditionReady) {
			return nil, err
		}
		return tierNames(p), nil
	}, 2*time.Minute, 250*time.Millisecond).Should(HaveLen(3), "the pipeline never became Ready with three tiers")
	p, err := getPipeline()
	g.Expect(err).NotTo(HaveOccurred())
	oldTiers := tierNames(p)
	base := pcNS + "." + pcName // the pipeline's tier base (config.TierBase)
	g.Expect(oldTiers).To(Equal([]string{base + ".retry.3s", base + ".retry.6s", base + ".retry.12s"}))
	t.Logf("pipeline Ready after %s with ByDelay tiers %v", time.Since(setupDone).Round(time.Millisecond), oldTiers)

	kcl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	onFailure = func() {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		dcl, err := kgo.NewClient(stack.KafkaOptions()...) // the test's clients are closed by now
		if err != nil {
			t.Logf("describing group %s: %v", pcGroup, err)
			return
		}
		defer dcl.Close()
		groups, err := kadm.NewClient(dcl).DescribeGroups(dctx, pcGroup)
		if err != nil {
			t.Logf("describing group %s: %v", pcGroup, err)
			return
		}
		for _, gr := range groups {
			t.Logf("group %s: state %s, protocol %s, error %v", gr.Group, gr.State, gr.Protocol, gr.Err)
			for _, m := range gr.Members {
				var assigned []string
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, tp := range a.Topics {
						assigned = append(assigned, fmt.Sprintf("%s%v", tp.Topic, tp.Partitions))
					}
				}
				t.Logf("  member %s (client %s): %s", m.MemberID, m.ClientID, strings.Join(assigned, " "))
			}
		}
	}

	// A reader (no group) of the old tiers: which records went through each.
	tierReader, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(oldTiers...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer tierReader.Close()

	dlqReader, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(pcDLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer dlqReader.Close()
	dead := &pcDeadLetters{cl: dlqReader, got: map[string][]map[string]string{}}

	// The watcher: every pcSample, the old tiers' existence and lag, and the dispatcher config's
	// topics.draining; the tier reader's records.
	var (
		wmu        sync.Mutex
		tiers      = map[string]*pcTierState{}
		changedAt  time.Time
		samples    int
		sampleErrs []string
		drainLists = map[string]bool{} // every distinct topics.draining seen
	)
	for _, n := range oldTiers {
		tiers[n] = &pcTierState{exists: true, keys: map[string]bool{}}
	}
	cmKey := client.ObjectKey{Namespace: pcNS, Name: render.ConfigMapName(pipeline)}
	sample := func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		exists, lag, err := tierLag(sctx, adm, pcGroup, oldTiers)
		var draining []string
		cm := &corev1.ConfigMap{}
		cmErr := c.Get(sctx, cmKey, cm)
		if cmErr == nil {
			var cfg dispatchercfg.Config
			if jerr := json.Unmarshal([]byte(cm.Data[render.ConfigKey]), &cfg); jerr == nil {
				draining = cfg.Topics.Draining
			}
		}
		now := time.Now()
		wmu.Lock()
		defer wmu.Unlock()
		if err != nil {
			// A tier deleted between the listing and the offsets: the next sample sees it gone.
			if strings.Contains(err.Error(), "UNKNOWN_TOPIC") {
				return
			}
			if len(sampleErrs) < 10 {
				sampleErrs = append(sampleErrs, now.Format("15:04:05.000 ")+err.Error())
			}
			return
		}
		samples++
		drainLists[strings.Join(draining, ",")] = true
		for _, n := range oldTiers {
			st := tiers[n]
			switch {
			case exists[n] && st.exists:
				st.lag, st.sampledAt, st.lastSeenAt = lag[n], now, now
				if !changedAt.IsZero() && lag[n] == 0 && st.drainedAt.IsZero() {
					st.drainedAt = now
				}
				if lag[n] > 0 && slices.Contains(draining, n) && st.listedAt.IsZero() {
					st.listedAt = now
				}
			case exists[n] && !st.exists:
				st.reappeared = true
			case !exists[n] && st.exists:
				st.exists, st.goneAt, st.lagAtGone = false, now, st.lag
			}
		}
	}
	readTiers := func() {
		pctx, cancel := context.WithTimeout(ctx, pcSample)
		defer cancel()
		fetches := tierReader.PollFetches(pctx)
		wmu.Lock()
		defer wmu.Unlock()
		fetches.EachRecord(func(r *kgo.Record) {
			if st, ok := tiers[r.Topic]; ok {
				st.keys[string(r.Key)] = true
			}
		})
	}
	stopWatching := every(pcSample, func() {
		sample()
		readTiers()
	})
	defer stopWatching()

	// Produce, and wait until every old tier holds at least pcMinWaiting unconsumed records.
	produceStart := time.Now()
	produced := make(chan error, 1)
	go func() { produced <- devenv.Produce(ctx, stack.KafkaOptions(), pcSource, 0, pcRecords, pcRate) }()
	lagsNow := func() map[string]int64 {
		wmu.Lock()
		defer wmu.Unlock()
		out := map[string]int64{}
		for n, st := range tiers {
			out[n] = st.lag
		}
		return out
	}
	g.Eventually(func() map[string]int64 {
		out := lagsNow()
		for _, v := range out {
			if v < pcMinWaiting {
				return out
			}
		}
		return nil
	}, time.Minute, pcSample).Should(BeNil(), "the old tiers never all held %d unconsumed records", pcMinWaiting)

	// The change: maxAttempts 2 and a first delay of 2s, so the only tier is <namespace>.<pipeline>.retry.2s.
	wmu.Lock()
	changedAt = time.Now()
	atChange := map[string]int64{}
	for n, st := range tiers {
		atChange[n] = st.lag
	}
	wmu.Unlock()
	out, err = stack.Kubectl([]byte(pcPolicy(2, "2s")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	bySent := map[int]int{}
	for n := range pcRecords {
		if len(sink.attempts(devenv.DemoKey(n))) > 0 {
			bySent[pcClass(n)]++
		}
	}
	t.Logf("policy changed %s after the first record; unconsumed records per old tier at the change: %s=%d %s=%d %s=%d; records seen by the sink so far: %d",
		changedAt.Sub(produceStart).Round(time.Millisecond), oldTiers[0], atChange[oldTiers[0]], oldTiers[1], atChange[oldTiers[1]],
		oldTiers[2], atChange[oldTiers[2]], bySent[0]+bySent[1]+bySent[2]+bySent[3])

	// Every record ends delivered or dead-lettered, and the old tiers go.
	g.Expect(<-produced).To(Succeed())
	missing := func() []string {
		dl := dead.poll(ctx)
		ok := sink.delivered()
		var out []string
		for n := range pcRecords {
			k := devenv.DemoKey(n)
			if _, d := ok[k]; !d && len(dl[k]) == 0 {
				out = append(out, k)
			}
		}
		return out
	}
	var settledAt time.Time
	g.Eventually(func() []string {
		m := missing()
		if len(m) == 0 && settledAt.IsZero() {
			settledAt = time.Now()
		}
		if len(m) > 10 {
			m = append(m[:10], fmt.Sprintf("... %d in all", len(m)))
		}
		return m
	}, 90*time.Second, 200*time.Millisecond).Should(BeEmpty(), "records neither delivered nor dead-lettered")
	g.Eventually(func() []string {
		wmu.Lock()
		defer wmu.Unlock()
		var left []string
		for _, n := range oldTiers {
			if tiers[n].exists {
				left = append(left, fmt.Sprintf("%s (lag %d)", n, tiers[n].lag))
			}
		}
		return left
	}, 60*time.Second, pcSample).Should(BeEmpty(), "old tiers not deleted")
	// The pipeline is Ready with the new tier, and the group consumed the source and the new tier
	// to the end: nothing waits anywhere.
	var newTiers []string
	g.Eventually(func() (string, error) {
		p, err := getPipeline()
		if err != nil {
			return "", err
		}
		newTiers = tierNames(p)
		r := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Sprintf("not Ready (%+v), tiers %v", r, newTiers), nil
		}
		return fmt.Sprintf("Ready, tiers %v", newTiers), nil
	}, 30*time.Second, 250*time.Millisecond).Should(Equal("Ready, tiers [" + pcNS + "." + pcName + ".retry.2s]"))
	g.Eventually(func() (map[string]int64, error) {
		_, lag, err := tierLag(ctx, adm, pcGroup, append([]string{pcSource}, newTiers...))
		return lag, err
	}, 30*time.Second, 250*time.Millisecond).Should(And(HaveKeyWithValue(pcSource, int64(0)), HaveKeyWithValue(newTiers[0], int64(0))))
	stopWatching()
	// A last look at the DLQ and the old tiers, once the pipeline has reconciled after the group
	// consumed everything (its status shows no lag and no unused tier): they stay gone.
	g.Eventually(func() (string, error) {
		p, err := getPipeline()
		if err != nil || p.Status.ConsumerLag == nil || p.Status.Topics == nil {
			return "no figures yet", err
		}
		return fmt.Sprintf("lag %d, unused tiers %v", *p.Status.ConsumerLag, p.Status.Topics.UnusedRetries), nil
	}, 30*time.Second, 250*time.Millisecond).Should(Equal("lag 0, unused tiers []"))
	dl := dead.poll(ctx)
	ok := sink.delivered()
	sample()
	exists, _, err := tierLag(ctx, adm, pcGroup, oldTiers)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists).To(BeEmpty(), "old tiers exist again")

	// Each record's end is the one its class allows.
	type figure struct{ delivered, dead, both int }
	var (
		byClass     = map[int]*figure{pcOK: {}, pcTwo: {}, pcFour: {}, pcNever: {}}
		byReason    = map[string]int{}
		lowered     int // dead-lettered without a delivery, because maxAttempts was lowered
		deadByAtt   = map[string]int{}
		delivByAtt  = map[int]int{}
		dlqDupes    int
		wrongEnds   []string
		badLetters  []string
		fourOldDead int // pcFour records dead-lettered with attempts >= 2 read from an old tier
	)
	for n := range pcRecords {
		k := devenv.DemoKey(n)
		att, delivered := ok[k]
		letters := dl[k]
		f := byClass[pcClass(n)]
		switch {
		case delivered && len(letters) > 0:
			f.both++
		case delivered:
			f.delivered++
		case len(letters) > 0:
			f.dead++
		}
		if delivered {
			delivByAtt[att]++
		}
		if len(letters) > 1 {
			dlqDupes += len(letters) - 1
		}
		wantDelivered := map[int]bool{pcOK: true, pcTwo: true, pcNever: false}
		if want, fixed := wantDelivered[pcClass(n)]; fixed && want != delivered || delivered && len(letters) > 0 {
			if len(wrongEnds) < 10 {
				wrongEnds = append(wrongEnds, fmt.Sprintf("%s (class %d): delivered %t (attempt %d), dead letters %d, sink saw %v",
					k, pcClass(n), delivered, att, len(letters), sink.attempts(k)))
			}
		}
		if pcClass(n) == pcFour && delivered {
			g.Expect(att).To(Equal(4), "%s delivered on attempt %d", k, att)
		}
		for _, h := range letters {
			byReason[h[headers.Reason]]++
			deadByAtt[h[headers.Attempts]]++
			if strings.Contains(h[headers.ErrorMessage], "the retry policy now allows 2") {
				lowered++
				if pcClass(n) == pcFour {
					fourOldDead++
				}
			}
			a, err := strconv.Atoi(h[headers.Attempts])
			if h[headers.Reason] != headers.ReasonMaxRetriesExceeded || err != nil || a < 2 || a > 4 {
				if len(badLetters) < 10 {
					badLetters = append(badLetters, fmt.Sprintf("%s: reason %q attempts %q error %q: %q", k,
						h[headers.Reason], h[headers.Attempts], h[headers.ErrorType], h[headers.ErrorMessage]))
				}
			}
		}
	}
	// Dead letters carry max_retries_exceeded, with 2 to 4 deliveries: those written from an old
	// tier after the change (the record had already used the new maxAttempts) too.
	// A dispatcher still running the first policy (a pod of the old ReplicaSet during the rollout)
	// writes records that fail to the old tiers: a tier deleted while such a pod runs makes those
	// writes fail, and the records are dead-lettered as undeliverable instead of being retried.
	var writesToDeleted []string
	for k, letters := range dl {
		for _, h := range letters {
			if h[headers.ErrorType] != headers.ErrorTypeRetryProduceFailed {
				continue
			}
			for _, n := range oldTiers {
				if strings.Contains(h[headers.ErrorMessage], "retry tier "+n+" failed") {
					wmu.Lock()
					gone := tiers[n].goneAt
					wmu.Unlock()
					writesToDeleted = append(writesToDeleted, fmt.Sprintf("%s: failed delivery at %s written to %s (deleted at %s): %s", k,
						h[headers.LastFailure], n, gone.UTC().Format(time.RFC3339Nano), h[headers.ErrorMessage]))
				}
			}
		}
	}
	sort.Strings(writesToDeleted)
	g.Expect(writesToDeleted).To(BeEmpty(),
		"an old tier was deleted while a dispatcher of the old policy still wrote to it: those records were dead-lettered instead of retried")
	g.Expect(badLetters).To(BeEmpty(), "dead letters with another reason or attempt count")
	g.Expect(wrongEnds).To(BeEmpty(), "records that ended otherwise than their class allows")
	g.Expect(lowered).To(BeNumerically(">", 0),
		"no record waiting in an old tier was dead-lettered for the lowered maxAttempts: the change did not meet waiting records")

	// The old tiers: listed as draining while they held records, deleted only once drained, gone.
	missingNow := missing()
	wmu.Lock()
	defer wmu.Unlock()
	g.Expect(sampleErrs).To(BeEmpty(), "the watcher could not sample")
	var lines []string
	for _, n := range oldTiers {
		st := tiers[n]
		g.Expect(st.listedAt.IsZero()).To(BeFalse(), "%s was never seen in topics.draining while it held records (configs seen: %v)", n, drainLists)
		g.Expect(st.listedAt.Before(changedAt)).To(BeFalse(), "%s listed as draining before the change", n)
		g.Expect(st.goneAt.IsZero()).To(BeFalse(), "%s never deleted", n)
		g.Expect(st.reappeared).To(BeFalse(), "%s was created again after its deletion (written to after it was deleted)", n)
		if st.lagAtGone > 0 {
			// Deleted while the last sample (at most pcSample before) saw records in it: fail when any
			// record that went through it is unaccounted for.
			var lost []string
			for k := range st.keys {
				if slices.Contains(missingNow, k) {
					lost = append(lost, k)
				}
			}
			g.Expect(lost).To(BeEmpty(), "%s deleted %s after a sample with %d unconsumed records, and records that went through it were lost",
				n, st.goneAt.Sub(st.sampledAt).Round(time.Millisecond), st.lagAtGone)
		}
		drained := "never sampled drained"
		if !st.drainedAt.IsZero() {
			drained = fmt.Sprintf("drained %s after the change, deleted %s later", st.drainedAt.Sub(changedAt).Round(time.Millisecond),
				st.goneAt.Sub(st.drainedAt).Round(time.Millisecond))
		}
		lines = append(lines, fmt.Sprintf("%s: %d records went through it, %d unconsumed at the change; listed as draining %s after the change; %s (gone %s after the change, last lag %d)",
			n, len(st.keys), atChange[n], st.listedAt.Sub(changedAt).Round(time.Millisecond), drained,
			st.goneAt.Sub(changedAt).Round(time.Millisecond), st.lagAtGone))
	}
	g.Expect(missingNow).To(BeEmpty(), "records neither delivered nor dead-lettered at the end")
	for _, line := range lines {
		t.Logf("%s", line)
	}
	var lists []string
	for s := range drainLists {
		lists = append(lists, "["+s+"]")
	}
	sort.Strings(lists)
	t.Logf("topics.draining values seen in %d samples: %s", samples, strings.Join(lists, " "))
	t.Logf("outcomes by class: ok-at-once %+v, ok-on-2 %+v, ok-on-4 %+v, never-ok %+v",
		*byClass[pcOK], *byClass[pcTwo], *byClass[pcFour], *byClass[pcNever])
	t.Logf("deliveries by succeeding attempt %v; dead letters by reason %v, by attempts %v; %d dead-lettered from an old tier for the lowered maxAttempts (%d of them would have succeeded on attempt 4); %d duplicate dead letters",
		delivByAtt, byReason, deadByAtt, lowered, fourOldDead, dlqDupes)
	// How loudly the dispatchers met the deleted tiers (one log line per fetch error).
	var fetchErrs []string
	_ = filepath.WalkDir(filepath.Join(dir, "pods"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "log" {
			if b, err := os.ReadFile(p); err == nil {
				if n := strings.Count(string(b), `"msg":"Fetch error"`); n > 0 {
					fetchErrs = append(fetchErrs, fmt.Sprintf("%s %d", filepath.Base(filepath.Dir(p)), n))
				}
			}
		}
		return nil
	})
	sort.Strings(fetchErrs)
	t.Logf("\"Fetch error\" log lines per dispatcher pod: %v", fetchErrs)
	t.Logf("all %d records delivered or dead-lettered %s after the change; new tier %v; %s after the stack started",
		pcRecords, settledAt.Sub(changedAt).Round(time.Millisecond), newTiers, time.Since(setupDone).Round(time.Second))
}
