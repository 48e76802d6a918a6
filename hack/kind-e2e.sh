#!/usr/bin/env bash
# Runs retry-operator on a kind cluster with a real, secured Kafka (Strimzi), for users with Docker:
#   1. builds the operator and dispatcher images and loads them into a new kind cluster,
#   2. installs the Strimzi operator and a one-broker KRaft Kafka cluster whose only listener is TLS
#      with SCRAM-SHA-512 users and simple authorization (hack/strimzi-kafka.yaml),
#   3. creates the Kafka users of config/strimzi: the manager's (retry-operator) and one per
#      namespace of pipelines (<namespace>-consumer), each with the ACLs it needs and nothing more,
#   4. deploys retry-operator with `kubectl apply -k config/strimzi/manager` (config/default on the
#      TLS listener as retry-operator, --kafka-consumer-secret={namespace}-consumer,
#      --topic-prefix={namespace}.),
#   5. applies the samples (config/strimzi/samples: config/samples renamed to fit the claim policy)
#      before their namespace holds its consumer Secret, checks the pipeline says so
#      (KafkaCredentialsMissing) and has no Deployment, then copies the Secret in and waits for the
#      consumers to run, with no edit to the pipeline.
# It cannot run on the project's build machines (no Docker engine there); the same loop runs in CI on
# a local control plane and an embedded Kafka (`make dev`, test/e2e).
#
# Environment: CLUSTER (default retryops), TAG (default dev), STRIMZI_VERSION (default 1.2.0, the
# release whose CRDs test/strimzi checks hack/strimzi-kafka.yaml and config/strimzi against),
# STRIMZI_INSTALL (the cluster operator's install manifest, a URL or a file; default that release's
# strimzi-cluster-operator-<version>.yaml), KEEP=1 keeps the cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-retryops}
TAG=${TAG:-dev}
IMG=ghcr.io/retryops/retry-operator:$TAG
DISPATCHER_IMG=ghcr.io/retryops/retry-dispatcher:$TAG
STRIMZI_VERSION=${STRIMZI_VERSION:-1.2.0}
STRIMZI_INSTALL=${STRIMZI_INSTALL:-https://github.com/strimzi/strimzi-kafka-operator/releases/download/$STRIMZI_VERSION/strimzi-cluster-operator-$STRIMZI_VERSION.yaml}
OPERATOR_NS=retry-operator-system
SAMPLES_NS=retryops-samples

for tool in docker kind kubectl curl; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 1; }
done

# copy_secret FROM_NS NAME TO_NS copies a Secret's type and data under the same name, as a secret
# replicator would: not its labels nor its owner reference (the KafkaUser, in another namespace).
# Run again after a rotation (Strimzi rewrites the Secret when the password changes).
copy_secret() {
  # shellcheck disable=SC2016 # a go-template, for kubectl to expand, not the shell
  kubectl -n "$1" get secret "$2" -o go-template='apiVersion: v1
kind: Secret
type: {{or .type "Opaque"}}
metadata:
  name: {{.metadata.name}}
data:
{{- range $k, $v := .data}}
  {{$k}}: {{$v}}
{{- end}}
' | kubectl -n "$3" apply --server-side --force-conflicts -f -
}

# consumer_user NS prints the KafkaUser of namespace NS's consumers: config/strimzi's example, written
# for retryops-samples, with the namespace substituted (user name, topic and group prefixes).
consumer_user() {
  sed "s/retryops-samples/$1/g" config/strimzi/kafkauser-consumer.yaml
}

# until_ok DESCRIPTION COMMAND... retries COMMAND every 2s for up to 3 minutes.
until_ok() {
  local what=$1; shift
  for _ in $(seq 90); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 2
  done
  echo "kind-e2e: timed out waiting for $what" >&2
  return 1
}

echo "==> Building $IMG and $DISPATCHER_IMG"
docker build -t "$IMG" .
docker build -t "$DISPATCHER_IMG" --build-arg CMD=dispatcher .

echo "==> Creating the kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
[ "${KEEP:-0}" = 1 ] || trap 'kind delete cluster --name "$CLUSTER"' EXIT
kind load docker-image --name "$CLUSTER" "$IMG" "$DISPATCHER_IMG"

echo "==> Installing Strimzi $STRIMZI_VERSION and a Kafka cluster (TLS listener, SCRAM users, ACLs)"
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

echo "==> Creating the Kafka users: retry-operator and $SAMPLES_NS-consumer"
kubectl -n kafka apply -f config/strimzi/kafkauser-operator.yaml
consumer_user "$SAMPLES_NS" | kubectl -n kafka apply -f -
kubectl -n kafka wait kafkauser/retry-operator "kafkauser/$SAMPLES_NS-consumer" --for=condition=Ready --timeout=180s

echo "==> Deploying retry-operator as the Kafka user retry-operator"
kubectl create namespace "$OPERATOR_NS" --dry-run=client -o yaml | kubectl apply -f -
# The cluster CA is public: the manager verifies the brokers with it and hands it on to the pods of
# pipelines on the default connection (their dispatcher ConfigMap). The user's Secret is the
# manager's alone; no pipeline's pod ever mounts it.
copy_secret kafka my-cluster-cluster-ca-cert "$OPERATOR_NS"
copy_secret kafka retry-operator "$OPERATOR_NS"
tmp=$(mktemp -d)
cp -r config "$tmp/"
# Both `images` entries (the manager's and, through --dispatcher-image, the dispatcher's) take $TAG.
(cd "$tmp/config/manager" && kubectl kustomize . >/dev/null &&
  sed -i "s|newTag: .*|newTag: $TAG|" kustomization.yaml)
kubectl apply --server-side -k "$tmp/config/strimzi/manager"
rm -rf "$tmp"
kubectl -n "$OPERATOR_NS" rollout status deployment/retry-operator-controller-manager --timeout=180s

echo "==> Applying the samples in $SAMPLES_NS, which has no consumer Secret yet"
kubectl create namespace "$SAMPLES_NS" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply --server-side -k config/strimzi/samples
kubectl -n "$SAMPLES_NS" wait retrypolicy --all --for=condition=Ready --timeout=120s
kubectl -n "$SAMPLES_NS" wait deadletterqueue --all --for=condition=Ready --timeout=180s
kubectl -n "$SAMPLES_NS" wait consumerpipeline/chat --timeout=180s \
  --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=KafkaCredentialsMissing
kubectl -n "$SAMPLES_NS" get consumerpipeline/chat \
  -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}{"\n"}'
if kubectl -n "$SAMPLES_NS" get deployment/chat-dispatcher >/dev/null 2>&1; then
  echo "kind-e2e: chat has a Deployment although $SAMPLES_NS has no consumer Secret" >&2
  exit 1
fi

echo "==> Copying the Secret $SAMPLES_NS-consumer into $SAMPLES_NS: the pipeline runs, unedited"
copy_secret kafka "$SAMPLES_NS-consumer" "$SAMPLES_NS"
# The operator does not watch Secrets: it finds this one at the pipeline's next status refresh.
until_ok "deployment/chat-dispatcher in $SAMPLES_NS" kubectl -n "$SAMPLES_NS" get deployment/chat-dispatcher
# Ready pods have joined the group retryops-samples.alice-orchestrator, which only the consumer
# user's ACLs allow: retry-operator may describe groups, not join them.
kubectl -n "$SAMPLES_NS" rollout status deployment/chat-dispatcher --timeout=180s
kubectl -n "$SAMPLES_NS" wait consumerpipeline/chat --for=condition=DeploymentReady --timeout=180s
kubectl get retryops -n "$SAMPLES_NS"
