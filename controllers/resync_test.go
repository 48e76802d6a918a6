package controllers_test

import (
	"fmt"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeCounter counts the DescribeConfigs requests a broker receives per topic, leaving out the
// tests' own (describe marks them with IncludeDocumentation). Every reconcile of a queue or a
// pipeline that reaches its topics describes them in one request, so the count of a topic is the
// count of its resource's reconciles.
type describeCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

// describes counts on the suite broker.
var describes = &describeCounter{n: map[string]int64{}}

func (d *describeCounter) install(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.DescribeConfigsRequest)
		if r.IncludeDocumentation {
			return nil, nil, false
		}
		d.mu.Lock()
		for _, res := range r.Resources {
			if res.ResourceType == kmsg.ConfigResourceTypeTopic {
				d.n[res.ResourceName]++
			}
		}
		d.mu.Unlock()
		return nil, nil, false
	})
}

func (d *describeCounter) of(topic string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[topic]
}

// holdsThroughResync checks that actual matches m on every poll until the resource that owns topic
// has run a whole reconcile since the call, so that a negative check cannot pass by the resync coming
// late. Reconciles of one resource run one at a time: of three describes seen after the call, the
// first may belong to a reconcile already under way, the second's started after the call, and it has
// ended when the third is seen.
func holdsThroughResync[T any](t *testing.T, topic string, actual func() (T, error), m types.GomegaMatcher, desc ...any) {
	t.Helper()
	from := describes.of(topic)
	NewWithT(t).Eventually(func() (bool, error) {
		v, err := actual()
		if err != nil {
			return false, err
		}
		if ok, err := m.Match(v); err != nil || !ok {
			return false, StopTrying(fmt.Sprintf("before a whole reconcile of the owner of %s: %s", topic, m.FailureMessage(v)))
		}
		return describes.of(topic) >= from+3, nil
	}, wait, poll).Should(BeTrue(), desc...)
}

// awaitResync waits until the resource that owns topic has run a whole reconcile since the call.
func awaitResync(t *testing.T, topic string) {
	t.Helper()
	from := describes.of(topic)
	NewWithT(t).Eventually(func() int64 { return describes.of(topic) }, wait, poll).Should(BeNumerically(">=", from+3),
		"a whole reconcile of the owner of %s", topic)
}
