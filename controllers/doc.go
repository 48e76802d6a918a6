// Package controllers holds one reconciler per kind of the retry.retryops.dev API. Rendering of child
// objects lives apart from the reconcilers so it can be unit-tested without a cluster, and Kafka is
// reached only through the interface in internal/kafka.
package controllers

// The manager's permissions, generated into config/rbac/role.yaml by `make manifests`. Each is what a
// controller touches, no wildcards (rbac_test.go checks): children are applied with server-side
// apply, which needs create (for a new object) and patch; configmaps delete is for the alert
// ConfigMap replaced by a PrometheusRule once that kind is served; the CRD is watched, by metadata,
// to notice the PrometheusRule CRD coming and going. Owner references with blockOwnerDeletion need
// update on the owners' finalizers.
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies;deadletterqueues;consumerpipelines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies/status;deadletterqueues/status;consumerpipelines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies/finalizers;deadletterqueues/finalizers;consumerpipelines/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
