package devenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// DeadLettersAPIService is the Service the deadletters APIService points at (the manager's
// --deadletters-api-service default).
const DeadLettersAPIService = "retry-operator-deadletters-api"

// RegisterDeadLettersAPI makes the local control plane's aggregator reach the deadletters API of a
// manager running as a local process on 127.0.0.1:port. The API server refuses loopback addresses in
// Endpoints and EndpointSlices, so the Service is an ExternalName for localhost: the aggregator
// resolves an ExternalName Service to <externalName>:<APIService port> and dials it, checking the
// serving certificate for <service>.<namespace>.svc (the manager's self-managed one, whose CA it
// writes into the APIService).
func RegisterDeadLettersAPI(ctx context.Context, c client.Client, port int32) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: DeadLettersAPIService},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromInt32(port)}}},
	}
	if err := c.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the deadletters API Service: %w", err)
	}
	if err := c.Create(ctx, localAPIService(dlqapi.APIServiceName, "deadletters.retryops.dev", "v1alpha1", 1000, 15, port)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the deadletters APIService: %w", err)
	}
	return nil
}

// RegisterExternalMetricsAPI registers external.metrics.k8s.io on the local control plane, served
// by the same manager as the deadletters API (call RegisterDeadLettersAPI first: it makes the
// Service), so that the controller-manager's HorizontalPodAutoscaler controller reads the pipelines'
// due lag. The manager writes its CA into this APIService too, when it starts.
func RegisterExternalMetricsAPI(ctx context.Context, c client.Client, port int32) error {
	// The priorities of metrics-server's and KEDA's registrations.
	if err := c.Create(ctx, localAPIService(dlqapi.ExternalMetricsAPIServiceName, "external.metrics.k8s.io", "v1beta1", 100, 100, port)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the external metrics APIService: %w", err)
	}
	return nil
}

// localAPIService is an APIService of group and version served through DeadLettersAPIService.
func localAPIService(name, group, version string, groupPriority, versionPriority int64, port int32) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"group": group, "version": version, "groupPriorityMinimum": groupPriority, "versionPriority": versionPriority,
			"service": map[string]any{"namespace": envtestutil.OperatorNamespace, "name": DeadLettersAPIService, "port": int64(port)}},
	}}
}
