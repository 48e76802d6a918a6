package dlqcli

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Resources of retry.retryops.dev the plugin reads or writes.
const (
	resourceQueues  = "deadletterqueues"
	resourceActions = "deadletteractions"
)

var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := authenticationv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := retryv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := dlv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// clients are the plugin's connections to the API server, all under the user's kubeconfig identity.
type clients struct {
	namespace string
	retry     rest.Interface
	letters   rest.Interface
	kube      kubernetes.Interface
	// clock paces polling (the real clock when nil).
	clock clock.WithTicker
}

// restClient returns a REST client for one API group version: no discovery, one request per call.
func restClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = "kubectl-dlq"
	}
	return rest.RESTClientFor(c)
}

func newClients(flags *genericclioptions.ConfigFlags, warnings rest.WarningHandler) (*clients, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.WarningHandler = warnings
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	c := &clients{namespace: ns}
	if c.retry, err = restClient(cfg, retryv1alpha1.GroupVersion); err != nil {
		return nil, err
	}
	if c.letters, err = restClient(cfg, dlv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// whoAmI returns the username the API server sees, from the SelfSubjectReview API: the
// requestedBy of every action (the admission policy requires exactly that name).
func (c *clients) whoAmI(ctx context.Context) (string, error) {
	r, err := c.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are (SelfSubjectReview): %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", fmt.Errorf("the API server did not say who you are (SelfSubjectReview gave no username)")
	}
	return r.Status.UserInfo.Username, nil
}

func (c *clients) getQueue(ctx context.Context, name string) (*retryv1alpha1.DeadLetterQueue, error) {
	q := &retryv1alpha1.DeadLetterQueue{}
	err := c.retry.Get().Namespace(c.namespace).Resource(resourceQueues).Name(name).Do(ctx).Into(q)
	return q, err
}

func (c *clients) createAction(ctx context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterAction, error) {
	out := &retryv1alpha1.DeadLetterAction{}
	err := c.retry.Post().Namespace(c.namespace).Resource(resourceActions).Body(a).Do(ctx).Into(out)
	return out, err
}

func (c *clients) getAction(ctx context.Context, name string) (*retryv1alpha1.DeadLetterAction, error) {
	out := &retryv1alpha1.DeadLetterAction{}
	err := c.retry.Get().Namespace(c.namespace).Resource(resourceActions).Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *clients) listActions(ctx context.Context, allNamespaces bool) (*retryv1alpha1.DeadLetterActionList, error) {
	out := &retryv1alpha1.DeadLetterActionList{}
	req := c.retry.Get().Resource(resourceActions)
	if !allNamespaces {
		req = req.Namespace(c.namespace)
	}
	err := req.Do(ctx).Into(out)
	return out, err
}

// watchAction watches one action from resourceVersion on.
func (c *clients) watchAction(ctx context.Context, name, resourceVersion string) (watch.Interface, error) {
	opts := metav1.ListOptions{
		Watch:           true,
		FieldSelector:   "metadata.name=" + name,
		ResourceVersion: resourceVersion,
	}
	return c.retry.Get().Namespace(c.namespace).Resource(resourceActions).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}
