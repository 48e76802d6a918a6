package render

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/config"
)

// The consumers' access to the Kubernetes API: they report their circuit breakers' state in the
// pipeline's circuit ConfigMap (sdk/circuitstate), which a Role lets the pods' ServiceAccount
// get and patch, that one ConfigMap and nothing else. In sink mode the pods run as the pipeline's own
// ServiceAccount; in template mode as the template's serviceAccountName when it names one (the Role
// is bound to it), else as the pipeline's.

// PodServiceAccount is the ServiceAccount the pipeline's pods run as.
func PodServiceAccount(p *retryv1alpha1.ConsumerPipeline) string {
	if p.Spec.Sink == nil && p.Spec.Template != nil && p.Spec.Template.Spec.ServiceAccountName != "" {
		return p.Spec.Template.Spec.ServiceAccountName
	}
	return ServiceAccountName(p)
}

// ServiceAccount renders the pipeline's ServiceAccount; nil when the template names its own.
func ServiceAccount(p *retryv1alpha1.ConsumerPipeline) *corev1.ServiceAccount {
	if PodServiceAccount(p) != ServiceAccountName(p) {
		return nil
	}
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName(p), Namespace: p.Namespace, Labels: pipelineLabels(p, "consumer")},
	}
}

// CircuitConfigMap renders the circuit ConfigMap: labels only. Its data belongs to the consumers
// (one key per pod whose breaker is not Closed), so the operator's apply never lists it.
func CircuitConfigMap(p *retryv1alpha1.ConsumerPipeline) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: CircuitConfigMapName(p), Namespace: p.Namespace, Labels: pipelineLabels(p, "circuit")},
	}
}

// CircuitRole renders the Role that lets the consumers get and patch the circuit ConfigMap only.
func CircuitRole(p *retryv1alpha1.ConsumerPipeline) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName(p), Namespace: p.Namespace, Labels: pipelineLabels(p, "consumer")},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{CircuitConfigMapName(p)},
			Verbs:         []string{"get", "patch"},
		}},
	}
}

// CircuitRoleBinding binds CircuitRole to PodServiceAccount.
func CircuitRoleBinding(p *retryv1alpha1.ConsumerPipeline) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName(p), Namespace: p.Namespace, Labels: pipelineLabels(p, "consumer")},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ServiceAccountName(p)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: PodServiceAccount(p), Namespace: p.Namespace}},
	}
}

// podNameEnv is POD_NAME from the downward API: the key of the pod's circuit report.
func podNameEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: config.EnvPodName, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"},
	}}
}
