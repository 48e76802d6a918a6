#!/usr/bin/env bash
# `make run` and `make dev`.
# - With KUBECONFIG set (and KAFKA_BOOTSTRAP_SERVERS naming the operator-wide Kafka), runs the manager
#   against that cluster: installs the CRDs there first.
# - Otherwise starts a local control plane (kube-apiserver, etcd and a controller manager built from
#   the Go module proxy by hack/setup-envtest.sh), an embedded Kafka and the manager, and runs the
#   operator's dispatcher Deployments as local processes. `make dev` (--demo) adds a demo pipeline,
#   sink and producer and a live view. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> Building the manager, the dispatcher, the example consumer and the dev tools"
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
# The control plane's binaries are built (first time only) in the background while the programs build:
# two go builds keep both cores busier than one. It runs in its own process group, so that Ctrl-C here
# (which a background job would ignore) stops it through the trap.
setup_pid=
assets_file=$(mktemp)
stop_setup() { if [ -n "$setup_pid" ]; then kill -TERM -- "-$setup_pid" 2>/dev/null || true; fi; rm -f "$assets_file"; }
trap stop_setup EXIT
trap 'stop_setup; exit 130' INT TERM
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  echo "==> Checking the local control plane's binaries, built alongside the first time (about 10 minutes)"
  setsid hack/setup-envtest.sh --print-path --with-controller-manager >"$assets_file" &
  setup_pid=$!
fi
# One go build for the operator module's four programs: the packages they share are compiled once.
mkdir -p bin
go build -o bin/ ./cmd/manager ./cmd/dispatcher ./hack/kafka ./hack/dev
# The library-mode sample's consumer: a module of its own (examples/), run for the documents
# pipeline's image.
(cd examples && go build -o ../bin/example-consumer ./consumer)
echo "==> Programs built after ${SECONDS}s"
if [ -n "$setup_pid" ]; then
  wait "$setup_pid" || { echo "hack/setup-envtest.sh failed (see above)" >&2; exit 1; }
  setup_pid=
  KUBEBUILDER_ASSETS=$(cat "$assets_file")
fi
export KUBEBUILDER_ASSETS
echo "==> Control plane binaries ready after ${SECONDS}s"
# The asset directory holds a kubectl (a link to the one on PATH, or one built when there was none).
export PATH="$KUBEBUILDER_ASSETS:$PATH"
stop_setup
trap - EXIT INT TERM
exec bin/dev "$@"
