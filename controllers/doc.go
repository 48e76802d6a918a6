// Package controllers holds one reconciler per kind of the retry.retryops.dev API. Rendering of child
// objects lives apart from the reconcilers so it can be unit-tested without a cluster, and Kafka is
// reached only through the interface in internal/kafka.
package controllers

// The manager's permissions, generated into config/rbac/role.yaml by `make manifests`.
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies;deadletterqueues;consumerpipelines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies/status;deadletterqueues/status;consumerpipelines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies/finalizers;deadletterqueues/finalizers;consumerpipelines/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
