package dispatcher

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
)

// FuzzTierRecordReplayHeaders: a retry-tier record with any attempt count and any replay headers
// never panics when parsed, and either is rejected (dead-lettered without delivery; malformed when
// a replay header is at fault) or is a delivery whose attempt is in range, a record with 0 attempts
// only with valid replay headers, which it then carries.
func FuzzTierRecordReplayHeaders(f *testing.F) {
	const maxAttempts = 3
	s := &settings{maxRecordBytes: 1 << 20, tierFor: make([]int, maxAttempts+1)}
	ps := &partState{tier: 1}
	f.Add("0", "orders.dlq/0/7", "1", true, true, false)
	f.Add("0", "", "", false, false, false)
	f.Add("0", "orders.dlq/0/7", "101", true, true, false)
	f.Add("0", "orders.dlq/0/7", "9223372036854775808", true, true, false)
	f.Add("1", "garbage", "1", true, true, false)
	f.Add("2", "orders.dlq/2147483648/7", "1", true, true, true)
	f.Add("0", "orders.dlq/0/7", "", true, false, false)
	f.Add("-1", "a b/0/1", "0", true, true, false)
	f.Fuzz(func(t *testing.T, attempts, of, count string, withOf, withCount, twice bool) {
		now := time.Now()
		h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
		hs := []kgo.RecordHeader{
			h(headers.OriginalTopic, "orders"), h(headers.OriginalPartition, "0"), h(headers.OriginalOffset, "42"),
			h(headers.OriginalTimestamp, headers.FormatTime(now.Add(-time.Hour))),
			h(headers.Attempts, attempts), h(headers.Due, headers.FormatTime(now)), h(headers.Pipeline, s.pipelineID),
		}
		if withOf {
			hs = append(hs, h(headers.ReplayOf, of))
		}
		if withCount {
			hs = append(hs, h(headers.ReplayCount, count))
		}
		if twice {
			hs = append(hs, h(headers.ReplayOf, of))
		}
		it := newItem(&kgo.Record{Topic: "orders.retry", Key: []byte("k"), Value: []byte("v"), Headers: hs, Timestamp: now}, ps, s, now)
		_, _, _, ofErr := headers.ParseReplayOf(of)
		n, countErr := headers.ParseReplayCount(count)
		nOf := 0
		for _, b := range []bool{withOf, twice} {
			if b {
				nOf++
			}
		}
		replayOK := nOf == 1 && withCount && ofErr == nil && countErr == nil
		if (nOf > 0 || withCount) && !replayOK {
			if it.pre == nil || it.pre.reason != headers.ReasonMalformed {
				t.Fatalf("invalid replay headers (of %q count %q) not malformed: %+v", of, count, it.pre)
			}
		}
		if it.replayOf != "" && (!replayOK || it.replayOf != of || it.replayCount != n) {
			t.Fatalf("carries replay %q/%d, headers of %q count %q", it.replayOf, it.replayCount, of, count)
		}
		if it.pre != nil {
			if len(it.pre.message) > 2*headers.MaxErrorMessageBytes {
				t.Fatalf("message of %d bytes", len(it.pre.message))
			}
			return
		}
		if it.attempt < 1 || it.attempt > maxAttempts {
			t.Fatalf("attempts %q: delivery attempt %d", attempts, it.attempt)
		}
		if attempts == "0" {
			if !replayOK || it.attempt != 1 || !it.firstFailure.IsZero() || !it.srcTime.Equal(it.due) {
				t.Fatalf("replay (of %q count %q): attempt %d, first failure %v, deadline from %v", of, count, it.attempt, it.firstFailure, it.srcTime)
			}
		} else if a, err := strconv.Atoi(attempts); err != nil || int32(a)+1 != it.attempt {
			t.Fatalf("attempts %q: delivery attempt %d", attempts, it.attempt)
		}
	})
}
