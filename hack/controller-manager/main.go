// Command controller-manager runs, against a local control plane, the Kubernetes controllers that
// retry-operator's local loop needs, and only those: the garbage collector (owner references), the
// Deployment and ReplicaSet controllers (rollouts and pods), the namespace controller (namespace
// deletion) and the clusterrole-aggregation controller (the rules of ClusterRoles labelled
// aggregate-to-edit, -admin or -view copied into the built-in edit, admin and view, which the API
// server's RBAC bootstrap creates with only their aggregation rules). They are Kubernetes' own controllers (k8s.io/kubernetes/pkg/controller/...), wired the
// way kube-controller-manager wires them; leaving out the rest of kube-controller-manager (the
// scheduler and kubelet code it links, volume plugins, some forty other controllers) cuts the first
// `make dev` build by several minutes.
//
// hack/setup-envtest.sh builds it inside its throwaway module that requires k8s.io/kubernetes: this
// directory is a module of its own, so the project's `go build ./...` leaves it alone.
//
//	controller-manager --kubeconfig=FILE [--concurrent-gc-syncs=N]
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
	"k8s.io/apimachinery/pkg/util/wait"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/replicaset"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	gcWorkers := flag.Int("concurrent-gc-syncs", 5, "garbage collector workers")
	showVersion := flag.Bool("version", false, "print the Kubernetes version and exit")
	klog.InitFlags(nil)
	flag.Parse()
	if *showVersion {
		fmt.Println("controller-manager (Kubernetes " + version.Get().GitVersion + " controllers)")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *kubeconfig, *gcWorkers); err != nil {
		fmt.Fprintln(os.Stderr, "controller-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, gcWorkers int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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

	const syncPeriod = 30 * time.Second
	go gc.Run(ctx, gcWorkers, syncPeriod)
	go gc.Sync(ctx, client.Discovery(), syncPeriod)
	go dc.Run(ctx, 5)
	go rsc.Run(ctx, 5)
	go nsc.Run(ctx, 5)
	go crac.Run(ctx, 5)
	shared.Start(ctx.Done())
	metadataInformers.Start(ctx.Done())
	close(started)
	klog.InfoS("Running the garbage collector, deployment, replicaset, namespace and clusterrole-aggregation controllers")
	<-ctx.Done()
	shared.Shutdown()
	metadataInformers.Shutdown()
	return nil
}
