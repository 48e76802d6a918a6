package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// CachedDataAnnotation is the annotation DropData puts on a ConfigMap it takes the data of: the
// SHA-256 of each value of the data, by key, as a JSON object. Only the manager's cache sets it;
// Owned compares the data it applies with it.
const CachedDataAnnotation = "retry.retryops.dev/cached-data-sha256"

// DropData replaces cm's data with its digest (CachedDataAnnotation), for a cache that keeps
// ConfigMaps whose data the manager only applies, never reads: Owned still tells whether a key it
// sets holds another value (an out-of-band edit it reverts). Any CachedDataAnnotation cm came with
// is overwritten.
func DropData(cm *corev1.ConfigMap) {
	b, err := json.Marshal(dataDigests(cm.Data))
	if err != nil {
		return // a map of strings always encodes; without a digest the data stays
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[CachedDataAnnotation] = string(b)
	cm.Data = nil
}

// ForgetDigest removes a CachedDataAnnotation that did not come from DropData (one written on the
// API server), so that Owned never takes it for the digest of the data.
func ForgetDigest(cm *corev1.ConfigMap) {
	if _, ok := cm.Annotations[CachedDataAnnotation]; !ok {
		return
	}
	delete(cm.Annotations, CachedDataAnnotation)
	if len(cm.Annotations) == 0 {
		cm.Annotations = nil
	}
}

func dataDigests(data map[string]string) map[string]string {
	out := make(map[string]string, len(data))
	for k, v := range data {
		out[k] = digest(v)
	}
	return out
}

func digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

// cachedDigests returns the data digests of have (an object as cached, as a map) when DropData took
// its data.
func cachedDigests(have map[string]any) (map[string]string, bool) {
	if _, ok := have["data"]; ok {
		return nil, false
	}
	meta, _ := have["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	s, ok := annotations[CachedDataAnnotation].(string)
	if !ok {
		return nil, false
	}
	var digests map[string]string
	if err := json.Unmarshal([]byte(s), &digests); err != nil {
		return nil, false
	}
	return digests, true
}

// digestsContain is contains for data the cache keeps as digests: every key of want (a ConfigMap's
// data as applied) is there with the digest of its value.
func digestsContain(digests map[string]string, want any) bool {
	w, ok := want.(map[string]any)
	if !ok {
		return want == nil
	}
	for k, v := range w {
		s, ok := v.(string)
		if !ok {
			return false
		}
		if d, ok := digests[k]; !ok || d != digest(s) {
			return false
		}
	}
	return true
}
