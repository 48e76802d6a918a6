#!/usr/bin/env bash
# Runs retry-operator on a kind cluster with a real Kafka (Strimzi), for users with Docker:
#   1. builds the operator and dispatcher images and loads them into a new kind cluster,
#   2. installs the Strimzi operator and a one-broker KRaft Kafka cluster,
#   3. deploys retry-operator with `kubectl apply -k config/default` pointed at that Kafka,
#   4. applies the samples and shows `kubectl get retryops`.
# It cannot run on the project's build machines (no Docker engine there); the same loop runs in CI on
# a local control plane and an embedded Kafka (`make dev`, test/e2e).
#
# Environment: CLUSTER (default retryops), TAG (default dev), STRIMZI_VERSION (default 1.2.0, the
# release whose CRDs test/strimzi checks hack/strimzi-kafka.yaml against), STRIMZI_INSTALL (the
# cluster operator's install manifest, a URL or a file; default that release's
# strimzi-cluster-operator-<version>.yaml), KEEP=1 keeps the cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-retryops}
TAG=${TAG:-dev}
IMG=ghcr.io/retryops/retry-operator:$TAG
DISPATCHER_IMG=ghcr.io/retryops/retry-dispatcher:$TAG
STRIMZI_VERSION=${STRIMZI_VERSION:-1.2.0}
STRIMZI_INSTALL=${STRIMZI_INSTALL:-https://github.com/strimzi/strimzi-kafka-operator/releases/download/$STRIMZI_VERSION/strimzi-cluster-operator-$STRIMZI_VERSION.yaml}

for tool in docker kind kubectl curl; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 1; }
done

echo "==> Building $IMG and $DISPATCHER_IMG"
docker build -t "$IMG" .
docker build -t "$DISPATCHER_IMG" --build-arg CMD=dispatcher .

echo "==> Creating the kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
[ "${KEEP:-0}" = 1 ] || trap 'kind delete cluster --name "$CLUSTER"' EXIT
kind load docker-image --name "$CLUSTER" "$IMG" "$DISPATCHER_IMG"

echo "==> Installing Strimzi $STRIMZI_VERSION and a Kafka cluster"
kubectl create namespace kafka --dry-run=client -o yaml | kubectl apply -f -
strimzi=$(mktemp)
case "$STRIMZI_INSTALL" in
  http://*|https://*) curl -fsSL -o "$strimzi" "$STRIMZI_INSTALL" ;;
  *) cp "$STRIMZI_INSTALL" "$strimzi" ;;
esac
# The release's RoleBindings name the namespace myproject; the operator runs in (and watches) kafka.
sed -i 's/namespace: myproject/namespace: kafka/' "$strimzi"
# Server-side: the CRDs are too large for the last-applied annotation of a client-side apply.
kubectl apply --server-side --force-conflicts -n kafka -f "$strimzi"
rm -f "$strimzi"
kubectl -n kafka rollout status deployment/strimzi-cluster-operator --timeout=300s
kubectl -n kafka apply -f hack/strimzi-kafka.yaml
kubectl -n kafka wait kafka/my-cluster --for=condition=Ready --timeout=600s

echo "==> Deploying retry-operator"
tmp=$(mktemp -d)
cp -r config "$tmp/"
# Both `images` entries (the manager's and, through --dispatcher-image, the dispatcher's) take $TAG.
(cd "$tmp/config/manager" && kubectl kustomize . >/dev/null &&
  sed -i "s|newTag: .*|newTag: $TAG|" kustomization.yaml)
kubectl apply --server-side -k "$tmp/config/default"
kubectl -n retry-operator-system rollout status deployment/retry-operator-controller-manager --timeout=180s

echo "==> Applying the samples"
kubectl create namespace retryops-samples --dry-run=client -o yaml | kubectl apply -f -
kubectl apply --server-side -n retryops-samples -k config/samples
kubectl -n retryops-samples wait retrypolicy --all --for=condition=Ready --timeout=120s
kubectl -n retryops-samples wait deadletterqueue --all --for=condition=Ready --timeout=180s
kubectl get retryops -n retryops-samples
