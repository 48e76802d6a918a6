module github.com/retryops/retry-operator/hack/controller-manager

go 1.26

// Built by hack/setup-envtest.sh in a module that requires k8s.io/kubernetes; see main.go.
