package envtestutil_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	externalMetricsGroup   = "external.metrics.k8s.io"
	externalMetricsVersion = "v1beta1"
	externalMetricsGV      = externalMetricsGroup + "/" + externalMetricsVersion
	externalMetricsService = "stub-external-metrics"
)

// externalMetricValue is k8s.io/metrics' external_metrics v1beta1 ExternalMetricValue, as it goes
// on the wire (that module is not one of this project's).
type externalMetricValue struct {
	MetricName   string            `json:"metricName"`
	MetricLabels map[string]string `json:"metricLabels"`
	Timestamp    metav1.Time       `json:"timestamp"`
	Value        resource.Quantity `json:"value"`
}

type externalMetricValueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []externalMetricValue `json:"items"`
}

// stubExternalMetrics is an aggregated API server reduced to what the HPA controller reads:
// discovery of external.metrics.k8s.io/v1beta1 and one metric's values, in one namespace, for the
// values whose labels the request's selector matches.
type stubExternalMetrics struct {
	namespace, metric string

	mu     sync.Mutex
	values []externalMetricValue
}

// set makes the metric's values one value, labelled.
func (s *stubExternalMetrics) set(value int64, metricLabels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values = []externalMetricValue{{
		MetricName: s.metric, MetricLabels: metricLabels,
		// Any time: the HPA controller only reports it.
		Timestamp: metav1.NewTime(time.Unix(1_700_000_000, 0)),
		Value:     *resource.NewQuantity(value, resource.DecimalSI),
	}}
}

func (s *stubExternalMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/apis":
		writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{stubGroup()}})
	case "/apis/" + externalMetricsGroup:
		g := stubGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, &g)
	case "/apis/" + externalMetricsGV:
		writeJSON(w, &metav1.APIResourceList{
			TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: externalMetricsGV,
			APIResources: []metav1.APIResource{{Name: s.metric, Namespaced: true, Kind: "ExternalMetricValueList", Verbs: metav1.Verbs{"get"}}},
		})
	case "/apis/" + externalMetricsGV + "/namespaces/" + s.namespace + "/" + s.metric:
		sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		list := &externalMetricValueList{TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: externalMetricsGV}, Items: []externalMetricValue{}}
		s.mu.Lock()
		for _, v := range s.values {
			if sel.Matches(labels.Set(v.MetricLabels)) {
				list.Items = append(list.Items, v)
			}
		}
		s.mu.Unlock()
		writeJSON(w, list)
	default:
		http.NotFound(w, r)
	}
}

func stubGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: externalMetricsGV, Version: externalMetricsVersion}
	return metav1.APIGroup{Name: externalMetricsGroup, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serveExternalMetrics serves s over TLS on the loopback and registers it with env's aggregator as
// make dev registers the deadletters API (an ExternalName Service for localhost, the API server
// refusing loopback Endpoints). The stub's certificate is the test server's own, so the APIService
// skips verifying it.
func serveExternalMetrics(ctx context.Context, env *envtestutil.Env, s *stubExternalMetrics) (stop func(), err error) {
	srv := httptest.NewUnstartedServer(s)
	srv.StartTLS()
	_, portText, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		srv.Close()
		return nil, err
	}
	port, err := strconv.ParseInt(portText, 10, 32)
	if err != nil {
		srv.Close()
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: externalMetricsService},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port), TargetPort: intstr.FromInt32(int32(port))}}},
	}
	if err := env.Client.Create(ctx, svc); err != nil {
		srv.Close()
		return nil, fmt.Errorf("the stub's Service: %w", err)
	}
	as := apiService(port)
	if err := env.Client.Create(ctx, as); err != nil {
		srv.Close()
		return nil, fmt.Errorf("the stub's APIService: %w", err)
	}
	return srv.Close, nil
}

func apiService(port int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": externalMetricsVersion + "." + externalMetricsGroup},
		"spec": map[string]any{"group": externalMetricsGroup, "version": externalMetricsVersion,
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100), "insecureSkipTLSVerify": true,
			"service": map[string]any{"namespace": envtestutil.OperatorNamespace, "name": externalMetricsService, "port": port}},
	}}
}

// apiServiceAvailable reports whether the stub's APIService has condition Available=True.
func apiServiceAvailable(ctx context.Context, c client.Client) (bool, error) {
	u := apiService(0)
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		return false, err
	}
	conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return false, err
	}
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Available" {
			return m["status"] == "True", nil
		}
	}
	return false, nil
}
