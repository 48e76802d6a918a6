package devenv

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestProjectAsAKubelet: what a ConfigMap or Secret volume holds, by path in the volume: every key,
// or each item's key at its path; a missing key fails the mount unless the source is optional, and
// an item's path must stay in the volume (the API server refuses such a Pod; the runner does not
// rely on it, since it writes the files itself).
func TestProjectAsAKubelet(t *testing.T) {
	data := map[string][]byte{"password": []byte("p"), "sasl.jaas.config": []byte("j")}
	cases := []struct {
		name     string
		items    []corev1.KeyToPath
		optional *bool
		want     map[string]string
		err      string
	}{
		{name: "every key", want: map[string]string{"password": "p", "sasl.jaas.config": "j"}},
		{name: "items at their paths", items: []corev1.KeyToPath{{Key: "password", Path: "sasl/password"}},
			want: map[string]string{"sasl/password": "p"}},
		{name: "a missing key", items: []corev1.KeyToPath{{Key: "user.crt", Path: "tls.crt"}}, err: `secret "s" has no key "user.crt"`},
		{name: "a missing key, optional", items: []corev1.KeyToPath{{Key: "user.crt", Path: "tls.crt"}, {Key: "password", Path: "password"}},
			optional: ptr.To(true), want: map[string]string{"password": "p"}},
		{name: "a path out of the volume", items: []corev1.KeyToPath{{Key: "password", Path: "../../x"}}, err: "must be relative and stay in the volume"},
		{name: "a path out of the volume, through a directory", items: []corev1.KeyToPath{{Key: "password", Path: "a/../../x"}}, err: "must be relative and stay in the volume"},
		{name: "an absolute path", items: []corev1.KeyToPath{{Key: "password", Path: "/etc/passwd"}}, err: "must be relative and stay in the volume"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{}
			err := project("secret", "s", data, tc.items, tc.optional, files)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range files {
				got[k] = string(v)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("files %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("files %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestASubPathStaysInItsVolume: a mount's subPath that leaves the volume is refused, as the API
// server refuses it, rather than mapped onto a directory outside the pod's.
func TestASubPathStaysInItsVolume(t *testing.T) {
	dir := t.TempDir()
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	for sub, ok := range map[string]bool{"data": true, "a/../b": true, "../../..": false, "a/../../x": false, "/etc": false} {
		c := corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch", SubPath: sub}}}
		mounts, err := (&Runner{}).writeVolumes(context.Background(), pod, c, dir)
		if ok != (err == nil) {
			t.Fatalf("subPath %q: error %v, want it refused: %t", sub, err, !ok)
		}
		if ok {
			if rel, _ := filepath.Rel(dir, mounts["/scratch"]); strings.HasPrefix(rel, "..") {
				t.Fatalf("subPath %q mounted at %s, outside %s", sub, mounts["/scratch"], dir)
			}
		}
	}
}
