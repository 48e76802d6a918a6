package dlqapi

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// APIServiceName is the name of the APIService that registers the deadletters API.
const APIServiceName = "v1alpha1.deadletters.retryops.dev"

// ExternalMetricsAPIServiceName is the name of the APIService that registers
// external.metrics.k8s.io (config/external-metrics, opt-in: KEDA and prometheus-adapter register
// it too, and one server per cluster serves it).
const ExternalMetricsAPIServiceName = "v1beta1.external.metrics.k8s.io"

// CertManager keeps the serving certificate of the deadletters API in a Secret, so that every
// replica serves the same one, and writes its CA into the APIService's caBundle.
type CertManager struct {
	// Client reads and writes the Secret (uncached: Secrets are never cached) and patches the
	// APIService.
	Client client.Client
	// Namespace and SecretName name the Secret; Service is the name of the Service the APIService
	// points at (in Namespace): the certificate is for <Service>.<Namespace>.svc.
	Namespace, SecretName, Service string
	// APIService is the APIService to patch (default APIServiceName); "-" patches none.
	APIService string
	// ExternalMetricsAPIService is an APIService the same server may serve (default
	// ExternalMetricsAPIServiceName; "-" none): its caBundle is written only when it points at
	// Service in Namespace, never when another server (KEDA, prometheus-adapter) has it.
	ExternalMetricsAPIService string
}

// CertPair is a serving certificate (with its CA appended), its key and the CA.
type CertPair struct {
	Cert, Key, CA []byte
}

// Secret keys.
const (
	keyCert = "tls.crt"
	keyKey  = "tls.key"
	keyCA   = "ca.crt"
)

// Ensure returns the serving certificate from the Secret, creating the Secret (a new self-signed
// CA and certificate) when there is none, and writes the CA into the APIService's caBundle.
func (m *CertManager) Ensure(ctx context.Context) (CertPair, error) {
	pair, err := m.load(ctx)
	if apierrors.IsNotFound(err) {
		pair, err = m.create(ctx)
		if apierrors.IsAlreadyExists(err) { // another replica was first
			pair, err = m.load(ctx)
		}
	}
	if err != nil {
		return CertPair{}, fmt.Errorf("serving certificate (Secret %s/%s): %w", m.Namespace, m.SecretName, err)
	}
	if err := m.patchCABundle(ctx, pair.CA); err != nil {
		return CertPair{}, err
	}
	if err := m.patchExternalMetricsCABundle(ctx, pair.CA); err != nil {
		return CertPair{}, err
	}
	return pair, nil
}

func (m *CertManager) load(ctx context.Context) (CertPair, error) {
	var s corev1.Secret
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.SecretName}, &s); err != nil {
		return CertPair{}, err
	}
	p := CertPair{Cert: s.Data[keyCert], Key: s.Data[keyKey], CA: s.Data[keyCA]}
	if len(p.Cert) == 0 || len(p.Key) == 0 || len(p.CA) == 0 {
		return CertPair{}, fmt.Errorf("the Secret lacks %s, %s or %s: delete it to have a new one made", keyCert, keyKey, keyCA)
	}
	return p, nil
}

func (m *CertManager) create(ctx context.Context) (CertPair, error) {
	host := m.Service + "." + m.Namespace + ".svc"
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{m.Service, m.Service + "." + m.Namespace, host + ".cluster.local"})
	if err != nil {
		return CertPair{}, err
	}
	// certPEM is the serving certificate followed by the CA that signed it.
	_, rest := pem.Decode(certPEM)
	ca := bytes.TrimSpace(rest)
	if len(ca) == 0 {
		return CertPair{}, fmt.Errorf("generated certificate has no CA")
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "retry-operator"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{keyCert: certPEM, keyKey: keyPEM, keyCA: append(ca, '\n')},
	}
	if err := m.Client.Create(ctx, s); err != nil {
		return CertPair{}, err
	}
	return CertPair{Cert: certPEM, Key: keyPEM, CA: s.Data[keyCA]}, nil
}

// patchCABundle writes ca into the APIService (a missing APIService is not an error: it may be
// installed later, and the next start patches it).
func (m *CertManager) patchCABundle(ctx context.Context, ca []byte) error {
	name, ok := apiServiceNamed(m.APIService, APIServiceName)
	if !ok {
		return nil
	}
	u := apiService(name)
	patch := fmt.Appendf(nil, `{"spec":{"caBundle":%q}}`, encodeB64(ca))
	err := m.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the CA bundle into APIService %s: %w", name, err)
	}
	return nil
}

// patchExternalMetricsCABundle writes ca into the external metrics APIService when it points at
// this server's Service; one that is missing or points elsewhere is left alone.
func (m *CertManager) patchExternalMetricsCABundle(ctx context.Context, ca []byte) error {
	name, ok := apiServiceNamed(m.ExternalMetricsAPIService, ExternalMetricsAPIServiceName)
	if !ok {
		return nil
	}
	u := apiService(name)
	err := m.Client.Get(ctx, client.ObjectKey{Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading APIService %s: %w", name, err)
	}
	ns, _, _ := unstructured.NestedString(u.Object, "spec", "service", "namespace")
	svc, _, _ := unstructured.NestedString(u.Object, "spec", "service", "name")
	if ns != m.Namespace || svc != m.Service {
		return nil
	}
	if current, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle"); current == encodeB64(ca) {
		return nil
	}
	// The resourceVersion makes the patch fail rather than write into an APIService that another
	// server took over since the read.
	patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"spec":{"caBundle":%q}}`, u.GetResourceVersion(), encodeB64(ca))
	if err := m.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("writing the CA bundle into APIService %s: %w", name, err)
	}
	return nil
}

// apiService is an empty APIService named name.
func apiService(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(name)
	return u
}

// apiServiceNamed resolves an APIService flag: empty is def, "-" is none (ok false).
func apiServiceNamed(flag, def string) (name string, ok bool) {
	switch flag {
	case "-":
		return "", false
	case "":
		return def, true
	}
	return flag, true
}
