package devenv

// What a kubelet gives a container besides its process: its mounted ConfigMaps and Secrets, its
// environment (with the downward API), ports, and a token of its ServiceAccount.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeVolumes writes the ConfigMap and Secret volumes the container mounts and returns the map
// from mount path to local directory.
func (r *Runner) writeVolumes(ctx context.Context, pod *corev1.Pod, c corev1.Container, dir string) (map[string]string, error) {
	mounts := map[string]string{}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			continue
		}
		local := filepath.Join(dir, "volumes", m.Name)
		// A new start sees the objects as they are now, not what an earlier start wrote.
		if err := os.RemoveAll(local); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, err
		}
		files, err := r.volumeFiles(ctx, pod.Namespace, v)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		for path, b := range files {
			full := filepath.Join(local, filepath.FromSlash(path))
			if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(full, b, 0o600); err != nil {
				return nil, err
			}
		}
		mountPath := m.MountPath
		if m.SubPath != "" {
			sub := filepath.Clean(m.SubPath)
			if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
				return nil, fmt.Errorf("volume mount %q: subPath %q must be relative and stay in the volume", m.Name, m.SubPath)
			}
			local = filepath.Join(local, sub)
		}
		mounts[mountPath] = local
	}
	// Files inside written volumes may name other mount paths (a config file naming Secret files).
	for _, local := range mounts {
		_ = filepath.Walk(local, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return nil //nolint:nilerr // best effort: a file that cannot be read is left as it is
			}
			b, readErr := os.ReadFile(path)
			if readErr != nil {
				return nil //nolint:nilerr // best effort, as above
			}
			if out := remapPaths(string(b), mounts); out != string(b) {
				return os.WriteFile(path, []byte(out), 0o600)
			}
			return nil
		})
	}
	return mounts, nil
}

// environment resolves the container's env into KEY=value pairs with mount paths remapped.
func (r *Runner) environment(ctx context.Context, pod *corev1.Pod, c corev1.Container, mounts map[string]string) ([]string, error) {
	ns := pod.Namespace
	var env []string
	for _, e := range c.Env {
		val := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				s := &corev1.Secret{}
				if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.ValueFrom.SecretKeyRef.Name}, s); err != nil {
					return nil, err
				}
				val = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
			case e.ValueFrom.ConfigMapKeyRef != nil:
				cm := &corev1.ConfigMap{}
				if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.ValueFrom.ConfigMapKeyRef.Name}, cm); err != nil {
					return nil, err
				}
				val = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			case e.ValueFrom.FieldRef != nil:
				var ok bool
				if val, ok = podField(pod, e.ValueFrom.FieldRef.FieldPath); !ok {
					continue
				}
			default:
				continue
			}
		}
		env = append(env, e.Name+"="+remapPaths(val, mounts))
	}
	return env, nil
}

// remapPaths replaces in-pod mount paths with their local directories, longest first.
func remapPaths(s string, mounts map[string]string) string {
	paths := make([]string, 0, len(mounts))
	for p := range mounts {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, p := range paths {
		s = strings.ReplaceAll(s, p, mounts[p])
	}
	return s
}

// rewriteListen sets listen.healthAddress and listen.metricsAddress in a dispatcher config file.
func rewriteListen(path, health, metrics string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg := map[string]any{}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	cfg["listen"] = map[string]any{"healthAddress": health, "metricsAddress": metrics}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "0"
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// podField is the downward API's value of a pod field, for the fields a local process can have.
func podField(pod *corev1.Pod, path string) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "spec.nodeName":
		return pod.Spec.NodeName, true
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", true
	}
	return "", false
}

// tokenLifetime is how long the ServiceAccount tokens the runner requests last.
const tokenLifetime = 24 * time.Hour

// serviceAccountKubeconfig writes, for a Pod that mounts a ServiceAccount token, a kubeconfig in dir
// holding a token of its ServiceAccount bound to the Pod, and returns its path; "" when the Pod mounts
// no token or the runner has no Config.
func (r *Runner) serviceAccountKubeconfig(ctx context.Context, pod *corev1.Pod, dir string) (string, error) {
	if r.Config == nil || (pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken) {
		return "", nil
	}
	name := pod.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := r.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", pod.Namespace, name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: r.Config.Host, CertificateAuthorityData: r.Config.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: pod.Namespace}
	cfg.CurrentContext = "pod"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}
