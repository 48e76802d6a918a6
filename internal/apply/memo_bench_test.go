package apply

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkForgetOwnerAmong10000: deleting one of 10,000 resources that each have an entry in both
// memos. Forgetting an owner costs its own entries, not every entry (which made deleting N
// resources cost N x entries).
func BenchmarkForgetOwnerAmong10000(b *testing.B) {
	const n = 10000
	live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: "child", ResourceVersion: "1"}}
	fill := func() {
		for i := range n {
			k := memoKey{ownerKind: "ConsumerPipeline", namespace: "bench", ownerName: fmt.Sprintf("p-%d", i), name: "rules"}
			appliedOver.remember(k, live, [32]byte{})
			foundEqual.rememberEqual(k, types.UID("owner"), live, [32]byte{})
		}
	}
	fill()
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("p-%d", i%n)
		ForgetOwner("ConsumerPipeline", "bench", name)
		b.StopTimer()
		k := memoKey{ownerKind: "ConsumerPipeline", namespace: "bench", ownerName: name, name: "rules"}
		appliedOver.remember(k, live, [32]byte{})
		foundEqual.rememberEqual(k, types.UID("owner"), live, [32]byte{})
		b.StartTimer()
	}
	b.StopTimer()
	for i := range n {
		ForgetOwner("ConsumerPipeline", "bench", fmt.Sprintf("p-%d", i))
	}
}
