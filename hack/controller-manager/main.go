// Command controller-manager runs, against a local control plane, the Kubernetes controllers that
// retry-operator's local loop needs, and only those: the garbage collector (owner references), the
// Deployment and ReplicaSet controllers (rollouts and pods), the namespace controller (namespace
// deletion), the clusterrole-aggregation controller (the rules of ClusterRoles labelled
// aggregate-to-edit, -admin or -view copied into the built-in edit, admin and view, which the API
// server's RBAC bootstrap creates with only their aggregation rules) and the horizontal pod
// autoscaler (HorizontalPodAutoscalers scaling any scale subresource, a ConsumerPipeline's included,
// on resource, custom and external metrics). They are Kubernetes' own controllers
// (k8s.io/kubernetes/pkg/controller/...), wired the way kube-controller-manager wires them; leaving
// out the rest of kube-controller-manager (the scheduler and kubelet code it links, volume plugins,
// some forty other controllers) cuts the first `make dev` build by several minutes.
//
// hack/setup-envtest.sh builds it inside its throwaway module that requires k8s.io/kubernetes: this
// directory is a module of its own, so the project's `go build ./...` leaves it alone.
//
//	controller-manager --kubeconfig=FILE [--concurrent-gc-syncs=N]
//	    [--horizontal-pod-autoscaler-sync-period=15s] [--horizontal-pod-autoscaler-downscale-stabilization=5m]
//	    [--horizontal-pod-autoscaler-tolerance=0.1]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	hpametrics "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	resourceclient "k8s.io/metrics/pkg/client/clientset/versioned/typed/metrics/v1beta1"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"
)

// options are the flags; the horizontal pod autoscaler's defaults are kube-controller-manager's.
type options struct {
	kubeconfig string
	gcWorkers  int
	// hpaSync is how often every HorizontalPodAutoscaler is evaluated: the dev stack and the tests
	// pass a short one so that a scale-up follows the metric within seconds.
	hpaSync time.Duration
	// hpaDownscaleStabilization applies to HPAs without behavior.scaleDown.stabilizationWindowSeconds.
	hpaDownscaleStabilization time.Duration
	hpaTolerance              float64
}

// The HPA settings kube-controller-manager has flags for and this program keeps at their defaults.
const (
	hpaWorkers                 = 5
	hpaCPUInitializationPeriod = 5 * time.Minute
	hpaInitialReadinessDelay   = 30 * time.Second
)

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	flag.IntVar(&o.gcWorkers, "concurrent-gc-syncs", 5, "garbage collector workers")
	flag.DurationVar(&o.hpaSync, "horizontal-pod-autoscaler-sync-period", 15*time.Second, "how often the horizontal pod autoscaler evaluates each HorizontalPodAutoscaler")
	flag.DurationVar(&o.hpaDownscaleStabilization, "horizontal-pod-autoscaler-downscale-stabilization", 5*time.Minute,
		"how far back the horizontal pod autoscaler looks for a higher recommendation before scaling down (an HPA's behavior overrides it)")
	flag.Float64Var(&o.hpaTolerance, "horizontal-pod-autoscaler-tolerance", 0.1, "the ratio of the metric to its target within which the horizontal pod autoscaler does not scale")
	showVersion := flag.Bool("version", false, "print the Kubernetes version and exit")
	klog.InitFlags(nil)
	flag.Parse()
	if *showVersion {
		fmt.Println("controller-manager (Kubernetes " + version.Get().GitVersion + " controllers)")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "controller-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	const resync = 12 * time.Hour
	shared := informers.NewSharedInformerFactory(client, resync)
	metadataInformers := metadatainformer.NewSharedInformerFactory(metadataClient, resync)
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(client.Discovery()))
	go wait.Until(restMapper.Reset, 30*time.Second, ctx.Done())
	started := make(chan struct{})

	graph := garbagecollector.NewDependencyGraphBuilder(ctx, metadataClient, restMapper, garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(shared, metadataInformers), started)
	gc, err := garbagecollector.NewComposedGarbageCollector(ctx, client, metadataClient, restMapper, graph)
	if err != nil {
		return fmt.Errorf("garbage collector: %w", err)
	}
	dc, err := deployment.NewDeploymentController(ctx, shared.Apps().V1().Deployments(), shared.Apps().V1().ReplicaSets(), shared.Core().V1().Pods(), client)
	if err != nil {
		return fmt.Errorf("deployment controller: %w", err)
	}
	rsc := replicaset.NewReplicaSetController(ctx, shared.Apps().V1().ReplicaSets(), shared.Core().V1().Pods(), client, replicaset.BurstReplicas)
	nsc := namespacecontroller.NewNamespaceController(ctx, client, metadataClient, client.Discovery().ServerPreferredNamespacedResources,
		shared.Core().V1().Namespaces(), 5*time.Minute, v1.FinalizerKubernetes)
	crac := clusterroleaggregation.NewClusterRoleAggregation(shared.Rbac().V1().ClusterRoles(), client.RbacV1())
	hpa, apiVersions, err := newHPAController(ctx, o, cfg, client, shared, restMapper)
	if err != nil {
		return err
	}

	const syncPeriod = 30 * time.Second
	go gc.Run(ctx, o.gcWorkers, syncPeriod)
	go gc.Sync(ctx, client.Discovery(), syncPeriod)
	go dc.Run(ctx, 5)
	go rsc.Run(ctx, 5)
	go nsc.Run(ctx, 5)
	go crac.Run(ctx, 5)
	go custom_metrics.PeriodicallyInvalidate(apiVersions, o.hpaSync, ctx.Done())
	go hpa.Run(ctx, hpaWorkers)
	shared.Start(ctx.Done())
	metadataInformers.Start(ctx.Done())
	close(started)
	klog.InfoS("Running the garbage collector, deployment, replicaset, namespace, clusterrole-aggregation and horizontal pod autoscaler controllers",
		"hpaSyncPeriod", o.hpaSync)
	<-ctx.Done()
	shared.Shutdown()
	metadataInformers.Shutdown()
	return nil
}

// newHPAController is cmd/kube-controller-manager/app/autoscaling.go's: the scale client resolves a
// target's scale subresource through discovery (a custom resource's too), and the metrics client
// reads metrics.k8s.io, custom.metrics.k8s.io and external.metrics.k8s.io, whichever server the
// cluster's APIServices register for them. The returned getter must be invalidated periodically so
// that a custom metrics API registered later is found.
func newHPAController(ctx context.Context, o options, cfg *rest.Config, client kubernetes.Interface, shared informers.SharedInformerFactory,
	restMapper meta.RESTMapper) (*podautoscaler.HorizontalController, custom_metrics.AvailableAPIsGetter, error) {
	// No cached discovery: the resolver caches on its own and must see scale subresources added later.
	scaleKinds := scale.NewDiscoveryScaleKindResolver(client.Discovery())
	scaleClient, err := scale.NewForConfig(cfg, restMapper, dynamic.LegacyAPIPathResolverFunc, scaleKinds)
	if err != nil {
		return nil, nil, fmt.Errorf("horizontal pod autoscaler: scale client: %w", err)
	}
	apiVersions := custom_metrics.NewAvailableAPIsGetter(client.Discovery())
	resourceMetrics, err := resourceclient.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("horizontal pod autoscaler: resource metrics client: %w", err)
	}
	externalMetrics, err := external_metrics.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("horizontal pod autoscaler: external metrics client: %w", err)
	}
	metricsClient := hpametrics.NewRESTMetricsClient(resourceMetrics, custom_metrics.NewForConfig(cfg, restMapper, apiVersions), externalMetrics)
	hpa := podautoscaler.NewHorizontalController(ctx, client.CoreV1(), scaleClient, client.AutoscalingV2(), restMapper, metricsClient,
		shared.Autoscaling().V2().HorizontalPodAutoscalers(), shared.Core().V1().Pods(),
		o.hpaSync, o.hpaDownscaleStabilization, o.hpaTolerance, hpaCPUInitializationPeriod, hpaInitialReadinessDelay)
	return hpa, apiVersions, nil
}
