package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/sdk/headers"
)

// ownFigures shows that each pipeline's lag and retry backlog are its own, which figures that all
// drain to 0 cannot: analytics is scaled to 0, then fanLagRecords go to the source and
// fanBacklogRecords to analytics' first tier. Analytics shows exactly those; billing and shipping,
// which consume the same source, show 0 and 0.
func ownFigures(t *testing.T, g *WithT, stack *devenv.Stack, cl *kgo.Client, tiers map[string][]string) {
	t.Helper()
	const fanLagRecords, fanBacklogRecords = 7, 5
	ctx := context.Background()
	c := stack.Env.Client
	analytics := &retryv1alpha1.ConsumerPipeline{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: fanNS, Name: "analytics"}, analytics)).To(Succeed())
	before := analytics.DeepCopy()
	analytics.Spec.Replicas = ptr.To[int32](0)
	g.Expect(c.Patch(ctx, analytics, client.MergeFrom(before))).To(Succeed())
	// Only once its group has no member can no record be consumed.
	adm := kadm.NewClient(cl)
	g.Eventually(func() (string, error) {
		gs, err := adm.DescribeGroups(ctx, "fan-analytics")
		if err != nil {
			return "", err
		}
		return gs["fan-analytics"].State, gs.Error()
	}, time.Minute, 250*time.Millisecond).Should(Equal("Empty"))

	var rs []*kgo.Record
	for n := range fanLagRecords {
		rs = append(rs, &kgo.Record{Topic: fanSource, Key: []byte("lag-" + strconv.Itoa(n))})
	}
	now := time.Now()
	for n := range fanBacklogRecords {
		var hs []kgo.RecordHeader
		for _, kv := range [][2]string{
			{headers.OriginalTopic, fanSource}, {headers.OriginalPartition, "0"}, {headers.OriginalOffset, strconv.Itoa(2_000_000 + n)},
			{headers.OriginalTimestamp, headers.FormatTime(now)}, {headers.SourceTimestamp, headers.FormatTime(now)},
			{headers.Pipeline, fanNS + "/analytics"}, {headers.Attempts, "1"},
			{headers.FirstFailure, headers.FormatTime(now)}, {headers.LastFailure, headers.FormatTime(now)},
			{headers.ErrorType, "HTTP502"}, {headers.ErrorMessage, "502"}, {headers.HTTPStatus, "502"}, {headers.Due, headers.FormatTime(now)},
		} {
			hs = append(hs, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
		}
		rs = append(rs, &kgo.Record{Topic: tiers["analytics"][0], Key: []byte("backlog-" + strconv.Itoa(n)), Headers: hs})
	}
	g.Expect(cl.ProduceSync(ctx, rs...).FirstErr()).To(Succeed())

	want := map[string][2]int64{"billing": {0, 0}, "shipping": {0, 0}, "analytics": {fanLagRecords, fanBacklogRecords}}
	g.Eventually(func() (map[string][2]int64, error) {
		got := map[string][2]int64{}
		for _, p := range fanPipes {
			cp := &retryv1alpha1.ConsumerPipeline{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: fanNS, Name: p.name}, cp); err != nil {
				return nil, err
			}
			got[p.name] = [2]int64{ptr.Deref(cp.Status.ConsumerLag, -1), ptr.Deref(cp.Status.RetryBacklog, -1)}
		}
		return got, nil
	}, time.Minute, 250*time.Millisecond).Should(Equal(want), "[lag, retry backlog] by pipeline")
	out, err := stack.Kubectl(nil, "get", "cpl", "-n", fanNS)
	g.Expect(err).NotTo(HaveOccurred(), out)
	t.Logf("each pipeline's own figures, analytics scaled to 0:\n%s", out)
}
