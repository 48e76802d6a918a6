package apply

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// appliedOver remembers, per child, what was last applied over which version of it: while the cache
// still shows that version it has not seen the apply yet, and applying the same object again (a
// reconcile that comes before the child's watch event) would be a write that changes nothing. An
// entry lives until the child's next reconcile sees another version.
var appliedOver = &memo{}

// memo holds its entries by owner, so that forgetting an owner costs its own entries only.
type memo struct {
	mu sync.Mutex
	m  map[ownerID]map[memoKey]memoEntry
}

// ownerID names an owner (its children are in its namespace).
type ownerID struct{ kind, namespace, name string }

func (k memoKey) ownerID() ownerID { return ownerID{k.ownerKind, k.namespace, k.ownerName} }

// get, set and del are called with mu held.
func (m *memo) get(k memoKey) (memoEntry, bool) {
	e, ok := m.m[k.ownerID()][k]
	return e, ok
}

func (m *memo) set(k memoKey, e memoEntry) {
	if m.m == nil {
		m.m = map[ownerID]map[memoKey]memoEntry{}
	}
	byOwner := m.m[k.ownerID()]
	if byOwner == nil {
		byOwner = map[memoKey]memoEntry{}
		m.m[k.ownerID()] = byOwner
	}
	byOwner[k] = e
}

func (m *memo) del(k memoKey) {
	id := k.ownerID()
	if byOwner := m.m[id]; byOwner != nil {
		delete(byOwner, k)
		if len(byOwner) == 0 {
			delete(m.m, id)
		}
	}
}

type memoKey struct {
	owner     types.UID
	ownerKind string
	ownerName string
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

type memoEntry struct {
	uid             types.UID
	resourceVersion string
	sum             [sha256.Size]byte
	// owner is the owner's UID where the key leaves it out (foundEqual).
	owner types.UID
}

// keyOf is the key of u, whose controller reference to owner is set.
func keyOf(owner client.Object, u *unstructured.Unstructured) memoKey {
	k := memoKey{owner: owner.GetUID(), ownerName: owner.GetName(), gvk: u.GroupVersionKind(), namespace: u.GetNamespace(), name: u.GetName()}
	if ref := metav1.GetControllerOf(u); ref != nil {
		k.ownerKind = ref.Kind
	}
	return k
}

// ForgetOwner drops what was remembered of the children of the owner of kind and name in
// namespace, which is gone: nothing would look its entries up again (a child that never compares
// equal, a list another manager added to, keeps its entry while the owner lives).
func ForgetOwner(kind, namespace, name string) {
	appliedOver.forgetOwner(kind, namespace, name)
	foundEqual.forgetOwner(kind, namespace, name)
}

func (m *memo) forgetOwner(kind, namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, ownerID{kind, namespace, name})
}

func (m *memo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, byOwner := range m.m {
		n += len(byOwner)
	}
	return n
}

// sumOf is a digest of what is applied (encoding/json sorts map keys).
func sumOf(u *unstructured.Unstructured) ([sha256.Size]byte, bool) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(b), true
}

// appliedAlready reports whether the object of digest sum was applied over live as the cache shows
// it now; an entry for another version is dropped.
func (m *memo) appliedAlready(k memoKey, live client.Object, sum [sha256.Size]byte) bool {
	m.mu.Lock()
	e, ok := m.get(k)
	if ok && (e.uid != live.GetUID() || e.resourceVersion != live.GetResourceVersion()) {
		m.del(k)
		ok = false
	}
	m.mu.Unlock()
	return ok && sum == e.sum
}

// forget drops k's entry: the cache shows the child as wanted.
func (m *memo) forget(k memoKey) {
	m.mu.Lock()
	m.del(k)
	m.mu.Unlock()
}

// remember records that an object of digest sum was applied over live.
func (m *memo) remember(k memoKey, live client.Object, sum [sha256.Size]byte) {
	m.mu.Lock()
	m.set(k, memoEntry{uid: live.GetUID(), resourceVersion: live.GetResourceVersion(), sum: sum})
	m.mu.Unlock()
}
