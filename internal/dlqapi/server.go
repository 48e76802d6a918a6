package dlqapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	registryrest "k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

// Options configure the deadletters API server.
type Options struct {
	// BindAddress is host:port to serve on (":8444" in a cluster).
	BindAddress string
	// Listener, when set, is used instead of BindAddress (tests).
	Listener net.Listener
	// CertDir holds tls.crt and tls.key (cert-manager, a mounted Secret); empty: the certificate is
	// self-managed (Certs).
	CertDir string
	// Certs manages the serving certificate when CertDir is empty.
	Certs *CertManager
	// Config reaches the API server as the manager: for delegated authentication (TokenReview, the
	// extension-apiserver-authentication ConfigMap) and authorization (SubjectAccessReview).
	Config *rest.Config
	// Storage serves deadletters.
	Storage *Storage
	// Clock times the backoff of a server that stopped (default the real clock).
	Clock clock.WithTicker
	// Groups are other API groups served beside deadletters, with the same certificate,
	// authentication and authorization (internal/extmetrics: external.metrics.k8s.io).
	Groups []Group
}

// Group is another API group the server installs; this package knows nothing of what it serves.
type Group interface {
	// APIGroupInfo is the group, its versions and their storage.
	APIGroupInfo() *genericapiserver.APIGroupInfo
	// Scheme holds the group's kinds (the OpenAPI names of its types).
	Scheme() *runtime.Scheme
	// OpenAPIDefinitions are the schemas of its kinds.
	OpenAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition
	// Handler wraps the server's handler, after authentication and authorization: it may answer
	// requests of the group that no route matches.
	Handler(next http.Handler) http.Handler
}

// Server is the deadletters API server, a manager Runnable that runs on every replica.
type Server struct {
	opts Options
}

// NewServer returns a Server for o; the work happens in Start.
func NewServer(o Options) *Server { return &Server{opts: o} }

// NeedLeaderElection is false: every replica serves (an unavailable aggregated API blocks
// namespace deletion).
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends. A server that cannot start (its port taken, the API server's
// front-proxy configuration missing) is retried with a backoff of up to a minute, and logged: the
// controllers keep running without the API.
func (s *Server) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("deadletters-api")
	backoff := time.Second
	for {
		err := s.serve(ctx)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping: the error is the stop's
		}
		log.Error(err, "The deadletters API stopped; starting it again", "after", backoff)
		clk := s.opts.Clock
		if clk == nil {
			clk = clock.RealClock{}
		}
		t := clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		backoff = min(2*backoff, time.Minute)
	}
}

func (s *Server) serve(ctx context.Context) error {
	srv, cleanup, err := s.build(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	return srv.PrepareRun().RunWithContext(ctx)
}

// build configures the generic API server. It writes no file in a cluster (the root file system is
// read-only there): the self-managed certificate stays in memory and the delegation uses the
// in-cluster configuration; out of a cluster it writes the manager's kubeconfig into a temporary
// directory, which cleanup removes.
func (s *Server) build(ctx context.Context) (srv *genericapiserver.GenericAPIServer, cleanup func(), err error) {
	cleanup = func() {}
	o := s.opts
	serving := genericoptions.NewSecureServingOptions()
	serving.ServerCert.CertDirectory = ""
	serving.Listener = o.Listener
	if o.Listener == nil {
		host, port, err := net.SplitHostPort(o.BindAddress)
		if err != nil {
			return nil, cleanup, fmt.Errorf("bind address %q: %w", o.BindAddress, err)
		}
		if serving.BindPort, err = strconv.Atoi(port); err != nil {
			return nil, cleanup, fmt.Errorf("bind address %q: %w", o.BindAddress, err)
		}
		serving.BindAddress = net.ParseIP(host)
		if host == "" {
			serving.BindAddress = net.IPv4zero
		}
	}
	switch {
	case o.CertDir != "":
		serving.ServerCert.CertKey = genericoptions.CertKey{CertFile: filepath.Join(o.CertDir, "tls.crt"), KeyFile: filepath.Join(o.CertDir, "tls.key")}
	case o.Certs != nil:
		pair, err := o.Certs.Ensure(ctx)
		if err != nil {
			return nil, cleanup, err
		}
		if serving.ServerCert.GeneratedCert, err = dynamiccertificates.NewStaticCertKeyContent("deadletters-api", pair.Cert, pair.Key); err != nil {
			return nil, cleanup, err
		}
	default:
		return nil, cleanup, errors.New("no serving certificate: set CertDir or Certs")
	}
	kubeconfig := "" // in a cluster: the in-cluster configuration
	if in, err := rest.InClusterConfig(); err != nil || in.Host != o.Config.Host {
		dir, err := os.MkdirTemp("", "retryops-dlqapi-")
		if err != nil {
			return nil, cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := writeKubeconfig(o.Config, kubeconfig); err != nil {
			return nil, cleanup, err
		}
	}
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = kubeconfig
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = kubeconfig
	// Probes and discovery documents need no user.
	authz.AlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

	cfg := genericapiserver.NewConfig(Codecs)
	cfg.EffectiveVersion = utilcompatibility.DefaultBuildEffectiveVersion()
	schemes, defs := []*runtime.Scheme{Scheme}, openAPIDefinitions
	for _, g := range o.Groups {
		schemes = append(schemes, g.Scheme())
		defs = mergeDefinitions(defs, g.OpenAPIDefinitions)
	}
	namer := openapinamer.NewDefinitionNamer(schemes...)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(defs, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "retry-operator deadletters", "v1alpha1"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(defs, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "retry-operator deadletters", "v1alpha1"
	if err := serving.WithLoopback().ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, cleanup, err
	}
	if err := authn.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, cleanup, err
	}
	if err := authz.ApplyTo(&cfg.Authorization); err != nil {
		return nil, cleanup, err
	}
	cfg.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		for _, g := range o.Groups {
			h = g.Handler(h)
		}
		return genericapiserver.DefaultBuildHandlerChain(h, c)
	}
	// No metrics of the generic server: the manager has its own endpoint.
	cfg.EnableMetrics = false
	cfg.EnableProfiling = false
	srv, err = cfg.Complete(nil).New("retryops-deadletters", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, cleanup, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(dlv1.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[dlv1.SchemeGroupVersion.Version] = map[string]registryrest.Storage{dlv1.Resource: o.Storage}
	if err := srv.InstallAPIGroup(&group); err != nil {
		return nil, cleanup, err
	}
	for _, g := range o.Groups {
		if err := srv.InstallAPIGroup(g.APIGroupInfo()); err != nil {
			return nil, cleanup, err
		}
	}
	return srv, cleanup, nil
}

// mergeDefinitions returns the definitions of a and b.
func mergeDefinitions(a, b common.GetOpenAPIDefinitions) common.GetOpenAPIDefinitions {
	return func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		defs := a(ref)
		for k, v := range b(ref) {
			defs[k] = v
		}
		return defs
	}
}

// writeKubeconfig writes cfg as a kubeconfig file, for the delegating options (which read one).
func writeKubeconfig(cfg *rest.Config, path string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["api"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		TLSServerName:            cfg.ServerName,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	c.AuthInfos["manager"] = &clientcmdapi.AuthInfo{
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
		TokenFile:             cfg.BearerTokenFile,
		Username:              cfg.Username,
		Password:              cfg.Password,
		Exec:                  cfg.ExecProvider,
		AuthProvider:          cfg.AuthProvider,
	}
	c.Contexts["manager"] = &clientcmdapi.Context{Cluster: "api", AuthInfo: "manager"}
	c.CurrentContext = "manager"
	return clientcmd.WriteToFile(*c, path)
}
