package envtestutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// FrontProxyClientName is the common name of the front proxy's client certificate (the
// kube-apiserver's, when it proxies to an aggregated API), as --requestheader-allowed-names says.
const FrontProxyClientName = "front-proxy-client"

// StartAggregated is Start with the API aggregation layer configured as kubeadm does: a front-proxy
// CA (--requestheader-client-ca-file), the kube-apiserver's client certificate signed by it
// (--proxy-client-cert-file, --proxy-client-key-file) and the X-Remote-* headers, which the
// kube-apiserver publishes in kube-system/extension-apiserver-authentication for aggregated API
// servers (their delegated authentication) to read. An APIService whose Service is an ExternalName
// then reaches a server on this machine.
func StartAggregated(extraCRDDirs ...string) (*Env, error) {
	dir, err := os.MkdirTemp("", "retryops-front-proxy-")
	if err != nil {
		return nil, err
	}
	env, err := start(func(te *envtest.Environment) error {
		caFile, certFile, keyFile, err := writeFrontProxyPKI(dir)
		if err != nil {
			return err
		}
		args := te.ControlPlane.GetAPIServer().Configure()
		args.Set("requestheader-client-ca-file", caFile)
		args.Set("requestheader-allowed-names", FrontProxyClientName)
		args.Set("requestheader-username-headers", "X-Remote-User")
		args.Set("requestheader-group-headers", "X-Remote-Group")
		args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
		args.Set("proxy-client-cert-file", certFile)
		args.Set("proxy-client-key-file", keyFile)
		return nil
	}, extraCRDDirs...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	env.extraDirs = append(env.extraDirs, dir)
	return env, nil
}

// writeFrontProxyPKI writes a front-proxy CA and a client certificate it signs into dir.
func writeFrontProxyPKI(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: FrontProxyClientName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "front-proxy-ca.crt"), filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return caFile, certFile, keyFile, nil
}
