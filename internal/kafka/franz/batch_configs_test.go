package franz

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestAFailedConfigsRequestFailsOnlyTheTopicsThatExist: when the batched DescribeConfigs request
// fails as a whole (the broker drops the connection of every one), a caller whose topic does not exist gets the answer
// the unbatched describe gives it from Metadata alone, which never reads configs; the caller whose
// topic exists gets the unbatched error.
func TestAFailedConfigsRequestFailsOnlyTheTopicsThatExist(t *testing.T) {
	c := newCluster(t, seedTopics(1, "present"))
	a, _ := newAdmin(t, plainConn(c), WithRequestTimeout(time.Second))
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("dropped"), true
	})
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 2, Clock: newFakeClock()})
	describe := reviewOps["describe"].call
	topics := []string{"present", "absent"}
	got := make([]any, 2)
	errs := make([]error, 2)
	concurrently(2, func(i int) { got[i], errs[i] = describe(ctx, b, topics[i]) })

	alone, err := describe(ctx, a, "absent")
	if err != nil {
		t.Fatalf("the missing topic alone: %v", err)
	}
	if errs[1] != nil || !reflect.DeepEqual(got[1], alone) {
		t.Errorf("the missing topic batched with one whose configs could not be read: %+v, %v; alone %+v", got[1], errs[1], alone)
	}
	// Not compared with the unbatched error: kgo tells a dropped connection apart by timing.
	if errs[0] == nil {
		t.Error("the existing topic, whose configs could not be read: no error")
	}
}
