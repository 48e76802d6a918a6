package devenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// aggregateLabelPrefix starts the labels (aggregate-to-edit, -admin, -view) that make the
// clusterrole-aggregation controller copy a ClusterRole's rules into a built-in role.
const aggregateLabelPrefix = "rbac.authorization.k8s.io/aggregate-to-"

// InstallSharedCluster creates on env what config/default installs for a cluster's tenants, as
// `kubectl kustomize config/default` renders it: the ValidatingAdmissionPolicies and their bindings
// (config/admission: requestedBy is the requesting user, the pipeline template checks) and the
// ClusterRoles aggregated into the built-in edit, admin and view (config/rbac). The API server's RBAC
// bootstrap creates edit, admin and view; the controller manager (hack/controller-manager) aggregates
// them. Objects that exist already are left as they are.
func InstallSharedCluster(ctx context.Context, env *envtestutil.Env) error {
	out, err := env.Kubectl(nil, "kustomize", filepath.Join(envtestutil.RepoRoot(), "config", "default"))
	if err != nil {
		return fmt.Errorf("rendering config/default: %w", err)
	}
	objs, err := sharedClusterObjects([]byte(out))
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := env.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// sharedClusterObjects picks, from config/default rendered, the admission policies and bindings and
// the aggregated ClusterRoles, cluster-scoped (kustomize's namespace transformer gives them the
// operator's namespace).
func sharedClusterObjects(rendered []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading config/default rendered: %w", err)
		}
		if !isSharedClusterObject(u) {
			continue
		}
		u.SetNamespace("")
		objs = append(objs, u)
	}
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	if kinds["ValidatingAdmissionPolicy"] == 0 || kinds["ValidatingAdmissionPolicyBinding"] == 0 || kinds["ClusterRole"] == 0 {
		return nil, fmt.Errorf("config/default renders %v: want admission policies, their bindings and aggregated ClusterRoles", kinds)
	}
	return objs, nil
}

func isSharedClusterObject(u *unstructured.Unstructured) bool {
	if u.GetAPIVersion() == "admissionregistration.k8s.io/v1" {
		return u.GetKind() == "ValidatingAdmissionPolicy" || u.GetKind() == "ValidatingAdmissionPolicyBinding"
	}
	if u.GetAPIVersion() != "rbac.authorization.k8s.io/v1" || u.GetKind() != "ClusterRole" {
		return false
	}
	for k, v := range u.GetLabels() {
		if strings.HasPrefix(k, aggregateLabelPrefix) && v == "true" {
			return true
		}
	}
	return false
}
