#!/usr/bin/env bash
# Builds the kubectl dlq release archives and writes the krew manifest plugins/dlq.yaml for them.
#
#   plugins/release.sh v0.1.0 [REF]   # archives of REF (default HEAD) into dist/, manifest with their sha256
#
# It builds from a clean export of the commit REF, never from the working tree, so the archives are
# those of a commit (tag it VERSION).
# Upload dist/kubectl-dlq_<version>_<os>_<arch>.tar.gz to the GitHub release <version>; then
# `kubectl krew install --manifest=plugins/dlq.yaml` installs it (or submit the manifest to a krew index).
set -euo pipefail
version=${1:?usage: plugins/release.sh VERSION [REF] (for example v0.1.0)}
ref=${2:-HEAD}
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$root/dist
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git -C "$root" archive "$ref" | tar -x -C "$src"
commit=$(git -C "$root" rev-parse --short "$ref")
repo=https://github.com/retryops/retry-operator
mkdir -p "$dist"
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
entries=""
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  name=kubectl-dlq_${version}_${os}_${arch}
  work=$(mktemp -d)
  (cd "$src" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$work/kubectl-dlq" ./cmd/kubectl-dlq)
  cp "$src/plugins/kubectl_complete-dlq" "$work/"
  tar -C "$work" --owner=0 --group=0 --mtime=@0 --sort=name -czf "$dist/$name.tar.gz" kubectl-dlq kubectl_complete-dlq
  rm -rf "$work"
  sum=$(sha256sum "$dist/$name.tar.gz" | cut -d' ' -f1)
  entries+="  - selector:
      matchLabels: {os: $os, arch: $arch}
    uri: $repo/releases/download/$version/$name.tar.gz
    sha256: $sum
    files:
    - {from: kubectl-dlq, to: .}
    - {from: kubectl_complete-dlq, to: .}
    bin: kubectl-dlq
"
done
cat >"$root/plugins/dlq.yaml" <<YAML
# krew manifest of kubectl dlq, written by plugins/release.sh $version $ref (commit $commit); do not edit by hand.
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: dlq
spec:
  version: $version
  homepage: $repo#kubectl-dlq
  shortDescription: Browse, export, replay, resolve and purge Kafka dead letters
  description: |
    kubectl dlq is the terminal side of retry-operator's dead-letter operations. It lists, shows and
    exports the dead letters of a DeadLetterQueue through the deadletters aggregated API, and replays,
    resolves, ignores or purges them by creating DeadLetterActions, under your own kubeconfig identity
    and RBAC: it holds no Kafka credentials. It also shows a queue's counts by state, reason, error type
    and pipeline, and the recent actions.
  caveats: |
    The cluster needs retry-operator with its deadletters API. For shell completion of queue names,
    put kubectl_complete-dlq (in the plugin's directory) on your PATH.
  platforms:
YAML
printf '%s' "$entries" >>"$root/plugins/dlq.yaml"
echo "wrote $root/plugins/dlq.yaml and ${#platforms[@]} archives in $dist"
