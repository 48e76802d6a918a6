#!/usr/bin/env bash
# `make run`: runs the manager locally.
# - With KUBECONFIG set, against that cluster: installs the CRDs there and runs the manager.
# - Otherwise, starts a local control plane (kube-apiserver + etcd built from the Go module proxy by
#   hack/setup-envtest.sh), installs the CRDs and runs the manager against it until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/manager ./cmd/manager
if [ -n "${KUBECONFIG:-}" ]; then
  echo "==> Installing the CRDs into the cluster of KUBECONFIG=$KUBECONFIG"
  kubectl apply --server-side -k config/crd
  echo "==> Running the manager (Ctrl-C stops it)"
  exec bin/manager "$@"
fi
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(hack/setup-envtest.sh --print-path)}"
go build -o bin/dev ./hack/dev
exec bin/dev -- --metrics-bind-address=127.0.0.1:8080 --health-probe-bind-address=127.0.0.1:8081 "$@"
