#!/usr/bin/env bash
# Builds the binaries that envtest (and `make dev`) need from the Go module proxy, and caches them
# outside the checkout so every clone on this machine, CI included, reuses them.
#
#   hack/setup-envtest.sh [--print-path] [--with-controller-manager]
#
# --with-controller-manager adds controller-manager (hack/controller-manager): Kubernetes' garbage
# collector, Deployment, ReplicaSet, namespace, clusterrole-aggregation and horizontal pod autoscaler
# controllers, without the rest of kube-controller-manager; built again when
# hack/controller-manager/main.go changes.
#
# kube-apiserver and controller-manager come from k8s.io/kubernetes, which `go install` refuses
# because of its replace directives; they are built inside a throwaway module that requires
# k8s.io/kubernetes and replaces every k8s.io staging module with its published version. etcd is built
# in the same module and the same `go build` (go.etcd.io/etcd/server/v3 at the version Kubernetes
# itself requires), so the packages they share, most of etcd's, are compiled once. kubectl is built
# only when none is on PATH.
#
# Environment:
#   ENVTEST_K8S_VERSION   Kubernetes version to build (default 1.36.3; the proxy serves no source for 1.37.x yet)
#   ENVTEST_ETCD_VERSION  etcd version to build (default: the one k8s.io/kubernetes requires, 3.6.8 for 1.36.3)
#   ENVTEST_CACHE_DIR     cache root (default ${XDG_DATA_HOME:-$HOME/.local/share}/retry-operator/envtest)
#
# Progress goes to stderr; with --print-path the asset directory (for KUBEBUILDER_ASSETS) goes to stdout.
set -euo pipefail

K8S_VERSION=${ENVTEST_K8S_VERSION:-1.36.3}
ETCD_VERSION=${ENVTEST_ETCD_VERSION:-}
CACHE_ROOT=${ENVTEST_CACHE_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/retry-operator/envtest}

print_path=0
with_kcm=0
for arg in "$@"; do
  case "$arg" in
    --print-path) print_path=1 ;;
    --with-controller-manager) with_kcm=1 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "setup-envtest: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "setup-envtest: $*" >&2; }
die() { echo "setup-envtest: ERROR: $*" >&2; exit 1; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go 1.26 or newer first"
GOOS=$(go env GOOS)
GOARCH=$(go env GOARCH)
ASSETS="$CACHE_ROOT/k8s-$K8S_VERSION${ETCD_VERSION:+-etcd-$ETCD_VERSION}-$GOOS-$GOARCH"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$ASSETS" || die "cannot create the cache directory $ASSETS (set ENVTEST_CACHE_DIR)"

minor=${K8S_VERSION#*.}; minor=${minor%%.*}
staging_version="0.$minor.${K8S_VERSION##*.}"
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

# controller-manager is this repository's own program: its cached binary is kept with the sha256 of
# the source it was built from (controller-manager.sha256), and built again when the source changes.
KCM_SOURCE="$REPO/hack/controller-manager/main.go"
source_sum() { { sha256sum "$KCM_SOURCE" 2>/dev/null || shasum -a 256 "$KCM_SOURCE"; } | cut -d' ' -f1; }

# works BIN: true when the cached binary exists and runs (controller-manager: and was built from
# the current source).
works() {
  [ -x "$ASSETS/$1" ] || return 1
  if [ "$1" = controller-manager ] && [ "$(cat "$ASSETS/controller-manager.sha256" 2>/dev/null)" != "$(source_sum)" ]; then
    return 1
  fi
  if [ "$1" = kubectl ]; then "$ASSETS/$1" version --client >/dev/null 2>&1; else "$ASSETS/$1" --version >/dev/null 2>&1; fi
}

# kubernetes_module DIR: a throwaway module that can build k8s.io/kubernetes commands.
kubernetes_module() {
  local dir=$1 gomod
  log "resolving k8s.io/kubernetes v$K8S_VERSION and its staging modules (v$staging_version)"
  (cd "$dir" && go mod init envtest-build >/dev/null 2>&1)
  gomod=$(cd "$dir" && go list -m -json "k8s.io/kubernetes@v$K8S_VERSION" 2>/dev/null | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p') || true
  [ -n "$gomod" ] || die "cannot download k8s.io/kubernetes@v$K8S_VERSION from the Go module proxy"
  {
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo "replace ("
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
      awk -v v="v$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
    # etcd at the version Kubernetes requires (an indirect requirement of its go.mod), unless set.
    if [ -n "$ETCD_VERSION" ]; then echo "require go.etcd.io/etcd/server/v3 v$ETCD_VERSION"; fi
  } >>"$dir/go.mod"
}

# build NAME...: builds the missing binaries NAME (kube-apiserver, kubectl: k8s.io/kubernetes/cmd/NAME;
# etcd: go.etcd.io/etcd/server/v3; controller-manager: hack/controller-manager) into the cache, in one
# `go build`.
build() {
  local name missing=() pkgs=()
  for name in "$@"; do
    if works "$name"; then log "$name: cached"; continue; fi
    missing+=("$name")
    case "$name" in
      etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
      controller-manager) pkgs+=(./controller-manager) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$name") ;;
    esac
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local tmp; tmp=$(mktemp -d "$WORK/build.XXXXXX")
  kubernetes_module "$tmp"
  mkdir -p "$tmp/out" "$tmp/controller-manager"
  cp "$REPO/hack/controller-manager/main.go" "$tmp/controller-manager/"
  log "building ${missing[*]} (Kubernetes v$K8S_VERSION; first time only: about 10 minutes on 2 cores)"
  # The same build settings as the project's own builds, so that the packages both use (the standard
  # library at least) are compiled once.
  (cd "$tmp" && GOFLAGS=-mod=mod go build -ldflags "$ldflags" \
      -o "$tmp/out/" "${pkgs[@]}") || die "building ${missing[*]} failed (see the go output above)"
  # go build names etcd's binary after its package directory, server.
  if [ -f "$tmp/out/server" ]; then mv "$tmp/out/server" "$tmp/out/etcd"; fi
  for name in "${missing[@]}"; do
    mv "$tmp/out/$name" "$ASSETS/$name"
    if [ "$name" = controller-manager ]; then source_sum >"$ASSETS/controller-manager.sha256"; fi
    works "$name" || die "$name was built but does not run"
  done
}

wanted=(etcd kube-apiserver)
[ "$with_kcm" = 1 ] && wanted+=(controller-manager)
if command -v kubectl >/dev/null 2>&1; then
  ln -sf "$(command -v kubectl)" "$ASSETS/kubectl"
elif ! works kubectl; then
  log "no kubectl on PATH: building one"
  wanted+=(kubectl)
fi
build "${wanted[@]}"

log "assets ready in $ASSETS"
[ "$print_path" = 1 ] && echo "$ASSETS"
exit 0
