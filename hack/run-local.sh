#!/usr/bin/env bash
# `make run` and `make dev`.
# - With KUBECONFIG set (and KAFKA_BOOTSTRAP_SERVERS naming the operator-wide Kafka), runs the manager
#   against that cluster: installs the CRDs there first.
# - Otherwise starts a local control plane (kube-apiserver, etcd and kube-controller-manager built from
#   the Go module proxy by hack/setup-envtest.sh), an embedded Kafka and the manager, and runs the
#   operator's dispatcher Deployments as local processes. `make dev` (--demo) adds a demo pipeline,
#   sink and producer and a live view. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> Building the manager, the dispatcher and the dev tools"
# The CRDs and RBAC in config/ are generated and committed (`make verify` keeps them in sync), so
# nothing is generated here.
if [ -n "${KUBECONFIG:-}" ]; then
  go build -o bin/manager ./cmd/manager
  echo "==> Installing the CRDs into the cluster of KUBECONFIG=$KUBECONFIG"
  kubectl apply --server-side -k config/crd
  echo "==> Running the manager (Ctrl-C stops it)"
  args=()
  [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] && args+=("--kafka-bootstrap-servers=$KAFKA_BOOTSTRAP_SERVERS")
  exec bin/manager "${args[@]}"
fi
# One go build for the four programs: the packages they share are compiled once.
mkdir -p bin
go build -o bin/ ./cmd/manager ./cmd/dispatcher ./hack/kafka ./hack/dev
echo "==> Built in ${SECONDS}s. Building the local control plane's binaries (first time only: several minutes)"
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(hack/setup-envtest.sh --print-path --with-controller-manager)}"
echo "==> Ready to start after ${SECONDS}s"
# The asset directory holds a kubectl (a link to the one on PATH, or one built when there was none).
export PATH="$KUBEBUILDER_ASSETS:$PATH"
exec bin/dev "$@"
