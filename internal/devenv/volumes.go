package devenv

import (
	"context"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// volumeFiles returns the files a kubelet would put in volume v of a Pod in namespace, by path in
// the volume: a ConfigMap's or a Secret's keys, or those its items name at their paths, and the same
// for each source of a projected volume; nothing for other kinds (emptyDir and the like). As a
// kubelet's, the mount fails, and the container does not start, when a ConfigMap or Secret that is
// not optional does not exist or lacks a key an item names.
func (r *Runner) volumeFiles(ctx context.Context, namespace string, v corev1.Volume) (map[string][]byte, error) {
	files := map[string][]byte{}
	switch {
	case v.ConfigMap != nil:
		return files, r.configMapFiles(ctx, namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, files)
	case v.Secret != nil:
		return files, r.secretFiles(ctx, namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, files)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			var err error
			switch {
			case src.ConfigMap != nil:
				err = r.configMapFiles(ctx, namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, files)
			case src.Secret != nil:
				err = r.secretFiles(ctx, namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, files)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

func (r *Runner) configMapFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, optional *bool, files map[string][]byte) error {
	cm := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil
		}
		return fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, s := range cm.Data {
		data[k] = []byte(s)
	}
	for k, b := range cm.BinaryData {
		data[k] = b
	}
	return project("configmap", name, data, items, optional, files)
}

func (r *Runner) secretFiles(ctx context.Context, namespace, name string, items []corev1.KeyToPath, optional *bool, files map[string][]byte) error {
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil
		}
		return fmt.Errorf("secret %q: %w", name, err)
	}
	return project("secret", name, s.Data, items, optional, files)
}

// project adds data to files: every key at its own name, or, with items, each item's key at its
// path (a missing key fails unless the source is optional, as a kubelet's mount does).
func project(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, files map[string][]byte) error {
	if len(items) == 0 {
		for k, b := range data {
			files[k] = b
		}
		return nil
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return fmt.Errorf("%s %q has no key %q", kind, name, it.Key)
		}
		p := path.Clean(it.Path)
		if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return fmt.Errorf("%s %q: item path %q must be relative and stay in the volume", kind, name, it.Path)
		}
		files[p] = b
	}
	return nil
}
