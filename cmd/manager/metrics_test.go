package main

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// readClusterRole reads a ClusterRole shipped in config/rbac.
func readClusterRole(t *testing.T, file string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return role
}

// serviceAccountToken creates a ServiceAccount in namespace, binds it to the ClusterRole role (none
// when empty) and returns a token for it from the TokenRequest API.
func serviceAccountToken(ctx context.Context, t *testing.T, cs kubernetes.Interface, namespace, name, role string) string {
	t.Helper()
	g := NewWithT(t)
	_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	if role != "" {
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.Status.Token).NotTo(BeEmpty())
	return tr.Status.Token
}

// scrape GETs url with token as bearer token (none when empty), trusting any certificate: the
// manager serves a self-signed one unless given its own, and what is tested here is who may read.
func scrape(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test server's certificate is self-signed
	}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestMetricsEndpointNeedsAnAuthorisedToken starts the metrics server with the manager's default
// flags (only the port changed) against envtest, the manager itself authenticating as a
// ServiceAccount bound to config/rbac/metrics_auth_role.yaml and nothing else. A scrape without
// credentials gets 401, one with the token of a ServiceAccount bound to
// config/rbac/metrics_reader_role.yaml gets the metrics, and one with the token of a ServiceAccount
// without that binding gets 403.
func TestMetricsEndpointNeedsAnAuthorisedToken(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := startEnv(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())

	authRole, readerRole := readClusterRole(t, "metrics_auth_role.yaml"), readClusterRole(t, "metrics_reader_role.yaml")
	for _, role := range []*rbacv1.ClusterRole{authRole, readerRole} {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	const ns = "default"
	managerToken := serviceAccountToken(ctx, t, cs, ns, "controller-manager", authRole.Name)
	readerToken := serviceAccountToken(ctx, t, cs, ns, "prometheus", readerRole.Name)
	strangerToken := serviceAccountToken(ctx, t, cs, ns, "stranger", "")

	// A pod binds every interface (the default ":8443"); only the port differs here.
	_, port, err := net.SplitHostPort(freeAddr(t))
	g.Expect(err).NotTo(HaveOccurred())
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--metrics-bind-address=:" + port})
	g.Expect(err).NotTo(HaveOccurred())

	managerCfg := rest.AnonymousClientConfig(env.Config)
	managerCfg.BearerToken = managerToken
	httpClient, err := rest.HTTPClientFor(managerCfg)
	g.Expect(err).NotTo(HaveOccurred())
	srv, err := metricsserver.NewServer(metricsOptions(o), managerCfg, httpClient)
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			g.Expect(err).NotTo(HaveOccurred())
		case <-time.After(30 * time.Second):
			t.Error("the metrics server did not stop within 30s of its context ending")
		}
	}()
	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "the metrics server never listened")

	url := "https://127.0.0.1:" + port + "/metrics"
	code, body, err := scrape(url, "")
	g.Expect(err).NotTo(HaveOccurred(), "an HTTPS scrape of the default metrics endpoint")
	g.Expect(code).To(Equal(http.StatusUnauthorized), "a scrape without credentials: %s", body)

	code, body, err = scrape(url, strangerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a scrape by a ServiceAccount not bound to %s: %s", readerRole.Name, body)

	code, body, err = scrape(url, readerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), "a scrape by a ServiceAccount bound to %s: %s", readerRole.Name, body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	// The manager's own API calls (the TokenReviews and SubjectAccessReviews just made) are counted.
	g.Expect(families).To(HaveKey("rest_client_requests_total"))
}

// TestMetricsFlags: HTTPS with authentication and authorisation unless --metrics-secure=false or
// a loopback address without --metrics-secure.
func TestMetricsFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		addr   string
		secure bool
	}{
		{nil, ":8443", true},
		{[]string{"--metrics-bind-address=:8080"}, ":8080", true},
		{[]string{"--metrics-bind-address=0.0.0.0:8443"}, "0.0.0.0:8443", true},
		{[]string{"--metrics-bind-address=10.0.0.1:8443"}, "10.0.0.1:8443", true},
		{[]string{"--metrics-secure=false"}, ":8443", false},
		{[]string{"--metrics-bind-address=127.0.0.1:8080"}, "127.0.0.1:8080", false},
		{[]string{"--metrics-bind-address=localhost:8080"}, "localhost:8080", false},
		{[]string{"--metrics-bind-address=[::1]:8080"}, "[::1]:8080", false},
		{[]string{"--metrics-bind-address=127.0.0.1:8443", "--metrics-secure"}, "127.0.0.1:8443", true},
		{[]string{"--metrics-secure=true", "--metrics-bind-address=localhost:8443"}, "localhost:8443", true},
	} {
		o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		opts := metricsOptions(o)
		if opts.BindAddress != tc.addr || opts.SecureServing != tc.secure || (opts.FilterProvider != nil) != tc.secure {
			t.Errorf("%v: address %q, secure %v, filter %v; want %q, %v, %v", tc.args, opts.BindAddress, opts.SecureServing, opts.FilterProvider != nil, tc.addr, tc.secure, tc.secure)
		}
	}
}
