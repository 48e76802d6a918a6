#!/usr/bin/env bash
# Builds the helm binaries (Helm 4 and Helm 3) from the Go module proxy, pinned, and caches them
# outside the checkout so every clone on this machine, CI included, reuses them. The chart's tests
# (test/helm) run both majors.
#
#   hack/setup-helm.sh [--print-path]
#
# The cache holds helm (Helm 4) and helm3 (Helm 3). Each is built with the ldflags of Helm's own
# Makefile: its version, and for Helm 3 the Kubernetes version of the client-go it is built with (the
# default for `helm template`'s .Capabilities.KubeVersion; Helm 4 reads it from its build info).
#
# Environment:
#   HELM_VERSION    Helm 4 version to build (default 4.3.1)
#   HELM3_VERSION   Helm 3 version to build (default 3.22.0)
#   HELM_CACHE_DIR  cache root (default ${XDG_DATA_HOME:-$HOME/.local/share}/retry-operator/helm)
#
# Progress goes to stderr; with --print-path the directory holding helm and helm3 goes to stdout.
set -euo pipefail

HELM4_VERSION=${HELM_VERSION:-4.3.1}
HELM3_VERSION=${HELM3_VERSION:-3.22.0}
CACHE_ROOT=${HELM_CACHE_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/retry-operator/helm}

print_path=0
for arg in "$@"; do
  case "$arg" in
    --print-path) print_path=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup-helm: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "setup-helm: $*" >&2; }
die() { echo "setup-helm: ERROR: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go 1.26 or newer first"
DIR="$CACHE_ROOT/helm-$HELM4_VERSION-helm3-$HELM3_VERSION-$(go env GOOS)-$(go env GOARCH)"
mkdir -p "$DIR" || die "cannot create the cache directory $DIR (set HELM_CACHE_DIR)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# works NAME VERSION: the cached binary exists and says it is VERSION.
works() {
  [ -x "$DIR/$1" ] && "$DIR/$1" version --template '{{.Version}}' 2>/dev/null | grep -qxF "v$2"
}

# build NAME MAJOR VERSION: `go install helm.sh/helm/vMAJOR/cmd/helm@vVERSION` into the cache as NAME.
build() {
  local name=$1 major=$2 version=$3 mod="helm.sh/helm/v$2" ldflags gomod minor
  if works "$name" "$version"; then log "$name v$version: cached"; return 0; fi
  ldflags="-s -w -X $mod/internal/version.version=v$version -X $mod/internal/version.metadata= -X $mod/internal/version.gitTreeState=clean"
  if [ "$major" = 3 ]; then
    # Helm 3 takes its default Kubernetes version from ldflags: the minor of the client-go it requires.
    gomod=$(cd "$WORK" && GOFLAGS= go mod download -json "$mod@v$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -n "$gomod" ] || die "cannot download $mod@v$version from the Go module proxy"
    minor=$(sed -n 's/^\s*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
    [ -n "$minor" ] || die "no k8s.io/client-go requirement in $mod@v$version's go.mod"
    ldflags="$ldflags -X $mod/pkg/chartutil.k8sVersionMajor=1 -X $mod/pkg/chartutil.k8sVersionMinor=$minor"
    ldflags="$ldflags -X $mod/pkg/lint/rules.k8sVersionMajor=1 -X $mod/pkg/lint/rules.k8sVersionMinor=$minor"
  fi
  log "building $name v$version ($mod/cmd/helm; first time only: a few minutes on 2 cores)"
  # GOFLAGS cleared: a -mod flag from the environment would make `go install pkg@version` refuse.
  (cd "$WORK" && GOFLAGS= GOBIN="$WORK/out-$name" CGO_ENABLED=0 nice go install -trimpath -ldflags "$ldflags" \
      "$mod/cmd/helm@v$version") || die "building $name v$version failed (see the go output above)"
  mv "$WORK/out-$name/helm" "$DIR/$name"
  works "$name" "$version" || die "$name was built but does not report v$version"
}

build helm 4 "$HELM4_VERSION"
build helm3 3 "$HELM3_VERSION"

log "helm v$HELM4_VERSION and helm3 v$HELM3_VERSION ready in $DIR"
[ "$print_path" = 1 ] && echo "$DIR"
exit 0
