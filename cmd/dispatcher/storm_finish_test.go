package main_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
)

// stormResult holds the figures of a finished storm.
type stormResult struct {
	delivered, deadLettered, lost, wrong int
	dupOK, dupDLQ                        int
	bound                                int
	orderFirst, orderOK                  int // ordering violations: first attempts; first successes of records never retried
	kills, stops, starts, losses         int
}

// finish checks every record's fate, duplicates against their bound, and per-key order, after
// stopAll.
func (s *storm) finish() stormResult {
	t := s.t
	t.Helper()
	var res stormResult
	s.mu.Lock()
	crashed, slow, changes := s.crashed, s.stopSlow, append([]stormChange(nil), s.changes...)
	s.mu.Unlock()
	for _, c := range crashed {
		t.Errorf("dispatcher exit: %s", c)
	}
	for _, c := range slow {
		t.Errorf("slow stop: %s", c)
	}

	ok := s.sink.SuccessCounts()
	dead := s.deadCounts()
	for i, k := range s.keyOf {
		kind := s.sc.kind(i)
		switch {
		case ok[k] == 0 && dead[k] == 0:
			res.lost++
			if res.lost <= 10 {
				t.Errorf("record %d (%s, %s) lost: %d requests at the sink", i, k, kind, len(s.sink.ByKey(k)))
			}
		case (kind == "permanent") != (dead[k] > 0) || (kind == "permanent") == (ok[k] > 0):
			res.wrong++
			if res.wrong <= 10 {
				t.Errorf("record %d (%s): kind %s but dead-lettered %d times (reason %q), delivered %d times", i, k, kind, dead[k], s.reason[k], ok[k])
			}
		}
		if ok[k] > 0 {
			res.delivered++
			res.dupOK += ok[k] - 1
		}
		if dead[k] > 0 {
			res.deadLettered++
			res.dupDLQ += dead[k] - 1
		}
	}

	// The duplicate bound. What a change can make a record be delivered (or dead-lettered) twice
	// is a record that finished, or was being delivered, on a member while its offset was not
	// committed, and whose partition then moved to another member (or to the same one
	// restarted). Per member that is at most maxInFlight records being delivered plus
	// maxUncommittedRecords finished and waiting for their commit (the engine's back-pressure,
	// sdk/dispatcher/doc.go "Commits"). So, per change:
	//   - kill (SIGKILL): the killed member's maxInFlight + maxUncommitted; and the rebalance that
	//     follows (its session expires) may revoke partitions of each survivor, which commits
	//     what finished and abandons at most maxInFlight deliveries after drainTimeout: maxInFlight
	//     per survivor;
	//   - stop (SIGTERM): a graceful stop commits what finished and abandons at most maxInFlight,
	//     and the survivors' revocations at most maxInFlight each: maxInFlight per member alive;
	//   - start: the rebalance revokes partitions from the members alive (maxInFlight each);
	//   - a loss the dispatcher logged (a session expired without a kill, e.g. a member starved of
	//     CPU): the lost member commits nothing, maxInFlight + maxUncommitted.
	// A duplicate dead letter is a redelivery too and counts against the same bound.
	// (The per-member figure is the engine's promise; TestStormUncommittedBound shows that today
	// it does not hold while commits are held up, which is what makes this check fail now and
	// then: a member keeps delivering during a long JoinGroup/SyncGroup, then dies or is evicted.)
	mif, unc := int(s.sc.maxInFlight), int(s.sc.maxUncommitted)
	for _, c := range changes {
		switch c.kind {
		case "kill":
			res.kills++
			res.bound += mif + unc + mif*(c.alive-1)
		case "stop":
			res.stops++
			res.bound += mif * c.alive
		case "start":
			res.starts++
			res.bound += mif * c.alive
		}
	}
	res.losses = s.logCount(`"msg":"Partitions lost"`)
	res.bound += res.losses * (mif + unc)

	// Per-key order. Arrival order at the sink is the requests' arrival times.
	reqs := s.sink.Requests()
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].At.Before(reqs[b].At) })
	retried := map[int]bool{}
	for _, r := range reqs {
		if r.Attempt >= 2 {
			if i, err := strconv.Atoi(string(r.Body)); err == nil {
				retried[i] = true
			}
		}
	}
	lastFirst := map[int]int{} // key -> highest sequence number whose first attempt arrived
	lastOK := map[int]int{}    // key -> highest sequence number (never retried) whose first success arrived
	seenFirst, seenOK := map[int]bool{}, map[int]bool{}
	var examples []string
	for _, r := range reqs {
		i, err := strconv.Atoi(string(r.Body))
		if err != nil {
			continue
		}
		key, seq := i%s.sc.keys, i/s.sc.keys
		if r.Attempt == 1 && !seenFirst[i] {
			seenFirst[i] = true
			if last, ok := lastFirst[key]; ok && seq < last {
				res.orderFirst++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("key k%d: first attempt of seq %d (record %d, %s) arrived after seq %d's, at %v",
						key, seq, i, s.keyOf[i], last, r.At.Sub(s.started).Round(time.Millisecond)))
				}
			}
			lastFirst[key] = max(lastFirst[key], seq)
		}
		if r.Status/100 == 2 && !retried[i] && !seenOK[i] {
			seenOK[i] = true
			if last, ok := lastOK[key]; ok && seq < last {
				res.orderOK++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("key k%d: seq %d (record %d, %s) first delivered after seq %d, at %v",
						key, seq, i, s.keyOf[i], last, r.At.Sub(s.started).Round(time.Millisecond)))
				}
			}
			lastOK[key] = max(lastOK[key], seq)
		}
	}

	t.Logf("%d records in %v: %d delivered, %d dead-lettered, %d lost, %d with the wrong outcome; %d requests in all",
		s.sc.records, time.Since(s.started).Round(time.Millisecond), res.delivered, res.deadLettered, res.lost, res.wrong, s.sink.Count())
	var stopTimes []string
	for _, c := range changes {
		if c.kind == "stop" {
			stopTimes = append(stopTimes, c.took.Round(time.Millisecond).String())
		}
	}
	t.Logf("changes: %d kills, %d stops (SIGTERM to exit: %s), %d starts; %d partition losses logged",
		res.kills, res.stops, strings.Join(stopTimes, " "), res.starts, res.losses)
	sumInFlight := 0
	for _, c := range changes {
		sumInFlight += c.inFlight
	}
	t.Logf("duplicates: %d successful redeliveries of %d records, %d duplicate dead letters; bound %d (maxInFlight %d, maxUncommittedRecords %d); %d requests in flight at the sink summed over the changes",
		res.dupOK, countDup(ok), res.dupDLQ, res.bound, mif, unc, sumInFlight)
	// How long the retried records waited: from the first failed attempt to the first arrival of
	// attempt 2 (policy: 100 ms, jittered; churn adds session timeouts and drains). Reported, not
	// asserted: under churn a tier partition may wait for its next owner.
	failedAt, retriedAt := map[int]time.Time{}, map[int]time.Time{}
	for _, r := range reqs {
		i, err := strconv.Atoi(string(r.Body))
		if err != nil {
			continue
		}
		if _, ok := failedAt[i]; !ok && r.Attempt == 1 && r.Status == 503 {
			failedAt[i] = r.At
		}
		if _, ok := retriedAt[i]; !ok && r.Attempt == 2 {
			retriedAt[i] = r.At
		}
	}
	var waits []time.Duration
	worstRetry := -1
	for i, f := range failedAt {
		if at, ok := retriedAt[i]; ok {
			waits = append(waits, at.Sub(f))
			if worstRetry < 0 || at.Sub(f) > retriedAt[worstRetry].Sub(failedAt[worstRetry]) {
				worstRetry = i
			}
		}
	}
	if len(waits) > 0 {
		sort.Slice(waits, func(a, b int) bool { return waits[a] < waits[b] })
		t.Logf("retry waits: median %v, p99 %v, max %v (record %d, %s, failed at %v)", waits[len(waits)/2].Round(time.Millisecond),
			waits[len(waits)*99/100].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), worstRetry, s.keyOf[worstRetry],
			failedAt[worstRetry].Sub(s.started).Round(time.Millisecond))
	}

	// Duplicates attributed, by arrival time, to the last change before them (a rough figure:
	// a redelivery may come after a later change).
	perChange := make([]int, len(changes)+1) // [0]: before the first change
	perKind := map[string]int{}
	firstOK := map[string]bool{}
	for _, r := range reqs {
		if r.Status/100 != 2 {
			continue
		}
		if !firstOK[r.Key] {
			firstOK[r.Key] = true
			continue
		}
		k := sort.Search(len(changes), func(j int) bool { return changes[j].at.After(r.At) })
		perChange[k]++
		if k > 0 {
			perKind[changes[k-1].kind]++
		}
	}
	worst, worstAt := 0, -1
	for k := 1; k < len(perChange); k++ {
		if perChange[k] > worst {
			worst, worstAt = perChange[k], k-1
		}
	}
	if worstAt >= 0 {
		c := changes[worstAt]
		t.Logf("duplicates after: kills %d, stops %d, starts %d, before any change %d; at most %d after one change (%s of member %d at %v, %d members alive, %d requests in flight)",
			perKind["kill"], perKind["stop"], perKind["start"], perChange[0], worst, c.kind, c.member, c.at.Sub(s.started).Round(time.Millisecond), c.alive, c.inFlight)
	}
	t.Logf("order: %d records retried; %d first attempts out of order per key, %d first deliveries out of order among records never retried",
		len(retried), res.orderFirst, res.orderOK)
	if d := os.Getenv("RETRYOPS_STORM_DIR"); d != "" {
		s.dumpDuplicates(filepath.Join(d, s.sc.name, "duplicates.txt"), reqs, changes)
	}
	for _, e := range examples {
		t.Errorf("order violated: %s", e)
	}
	if res.lost > 0 || res.wrong > 0 {
		t.Errorf("%d records lost, %d with the wrong outcome", res.lost, res.wrong)
	}
	if res.dupOK+res.dupDLQ > res.bound {
		t.Errorf("%d redeliveries (%d successful, %d dead letters), more than the bound %d over %d changes",
			res.dupOK+res.dupDLQ, res.dupOK, res.dupDLQ, res.bound, len(changes))
	}
	return res
}

// dumpDuplicates writes, for a post-mortem, the changes and every request of each record
// delivered successfully more than once, with times since the storm's start (wall clock in the
// header, to match the members' logs).
func (s *storm) dumpDuplicates(path string, reqs []*dt.Request, changes []stormChange) {
	var b strings.Builder
	fmt.Fprintf(&b, "storm started %s\n", s.started.UTC().Format(time.RFC3339Nano))
	for _, c := range changes {
		fmt.Fprintf(&b, "change %8.3fs %-5s member %d alive %d inFlight %d took %v\n", c.at.Sub(s.started).Seconds(), c.kind, c.member, c.alive, c.inFlight, c.took.Round(time.Millisecond))
	}
	ok := map[string]int{}
	for _, r := range reqs {
		if r.Status/100 == 2 {
			ok[r.Key]++
		}
	}
	for _, r := range reqs {
		if ok[r.Key] < 2 {
			continue
		}
		i, _ := strconv.Atoi(string(r.Body))
		fmt.Fprintf(&b, "dup %s i=%d kind=%s at %8.3fs status %d attempt %d from %s\n", r.Key, i, s.sc.kind(i), r.At.Sub(s.started).Seconds(), r.Status, r.Attempt, r.DeliveredFrom)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		s.t.Logf("writing %s: %v", path, err)
	}
}

func countDup(m map[string]int) int {
	n := 0
	for _, v := range m {
		if v > 1 {
			n++
		}
	}
	return n
}

// readyz returns the status of a member's /readyz, or 0 when it does not answer.
func readyz(addr string) int {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// scrape returns the sum of the samples of metric name (whose labels contain every label of
// match, e.g. `kind="dead_letter"`) on a member's /metrics, or -1 when it does not answer.
func scrape(addr, name string, match ...string) float64 {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(rest, m)
		}
		if !all {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum += f
		}
	}
	return sum
}

// scrapeLines returns the /metrics lines of the named metrics.
func scrapeLines(addr string, names ...string) []string {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, n := range names {
			if strings.HasPrefix(sc.Text(), n) {
				out = append(out, sc.Text())
			}
		}
	}
	return out
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
