#!/usr/bin/env bash
# Installs the linters `make lint` runs into ./bin, from the Go module proxy, at pinned versions, and
# prints the binary's path on stdout.
#
#   hack/setup-lint.sh
#
# The binary is kube-api-linter's golangci-lint build (sigs.k8s.io/kube-api-linter/cmd/
# golangci-lint-kube-api-linter): golangci-lint itself (the version kube-api-linter's go.mod
# requires, v2.5.0 for the pinned KAL) with the kube-api-linter module compiled in, so one binary
# runs both .golangci.yml (the whole tree) and .golangci-kal.yml (the API types), as cluster-api
# runs them. Nothing is downloaded but Go modules. Progress goes to stderr.
#
# Environment:
#   KAL_VERSION  the kube-api-linter module version (default: the Makefile's pin)
#   LOCALBIN     where to install (default: ./bin of the checkout)
set -euo pipefail

KAL_VERSION=${KAL_VERSION:-v0.0.0-20260716143926-092fe0c72997}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCALBIN=${LOCALBIN:-$ROOT/bin}
BIN=$LOCALBIN/golangci-lint-kube-api-linter
STAMP=$LOCALBIN/.golangci-lint-kube-api-linter.version

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "setup-lint: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$KAL_VERSION" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$LOCALBIN"
echo "setup-lint: building golangci-lint with kube-api-linter $KAL_VERSION (once; a few minutes on 2 cores)" >&2
start=$(date +%s)
GOBIN=$LOCALBIN go install "sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter@$KAL_VERSION"
echo "$KAL_VERSION" >"$STAMP"
echo "setup-lint: ready after $(( $(date +%s) - start ))s: $("$BIN" version 2>&1 | head -1)" >&2
echo "$BIN"
