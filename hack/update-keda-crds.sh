#!/usr/bin/env bash
# Copies the keda.sh CRDs of the pinned KEDA release into test/keda/testdata/<version>/, where
# test/keda dry-runs the operator's ScaledObjects against them. They come from the Go module
# github.com/kedacore/keda/v2 at the release's tag (its config/crd/bases), so nothing is downloaded
# but a Go module.
#
#   hack/update-keda-crds.sh           writes testdata/<KEDA_VERSION>/, removes other versions
#   hack/update-keda-crds.sh --check   fails unless the committed files are the release's
#
# A KEDA upgrade: change KEDA_VERSION below (the one place the release is named; test/keda reads it
# from here), run the script, commit test/keda/testdata. Progress goes to stderr.
set -euo pipefail

KEDA_VERSION=2.21.0
MODULE=github.com/kedacore/keda/v2
# The kinds a ScaledObject of the operator's may refer to (ScaledJobs are not used).
CRDS=(keda.sh_scaledobjects.yaml keda.sh_triggerauthentications.yaml keda.sh_clustertriggerauthentications.yaml)

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTDATA=$ROOT/test/keda/testdata
DEST=$TESTDATA/$KEDA_VERSION

log() { echo "update-keda-crds: $*" >&2; }
die() { echo "update-keda-crds: ERROR: $*" >&2; exit 1; }

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
esac

# Outside the repository's module, so that its go.mod and go.sum stay as they are.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log "go mod download $MODULE@v$KEDA_VERSION"
json=$(cd "$tmp" && GO111MODULE=on GOFLAGS=-mod=mod go mod download -json "$MODULE@v$KEDA_VERSION") ||
  die "go mod download failed: $json"
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
[ -d "$dir/config/crd/bases" ] || die "$MODULE@v$KEDA_VERSION has no config/crd/bases (Dir: $dir)"

# The README of the directory: where the files come from, so that a reader can check them.
readme() {
  cat <<EOF
The CustomResourceDefinitions of the \`keda.sh\` kinds a ScaledObject of the operator's uses
(ScaledObject, TriggerAuthentication, ClusterTriggerAuthentication), as KEDA v$KEDA_VERSION ships
them, unchanged: \`config/crd/bases/\` of the Go module \`$MODULE@v$KEDA_VERSION\`
(module sum \`$sum\`).
Written by \`hack/update-keda-crds.sh\`, which pins the release; its \`--check\` compares these
files with the module's.

| file | sha256 |
| --- | --- |
EOF
  for f in "${CRDS[@]}"; do
    echo "| $f | $(sha256sum "$dir/config/crd/bases/$f" | cut -d' ' -f1) |"
  done
}

if $check; then
  [ -d "$DEST" ] || die "$DEST is missing: run hack/update-keda-crds.sh"
  for f in "${CRDS[@]}"; do
    cmp -s "$dir/config/crd/bases/$f" "$DEST/$f" || die "$DEST/$f differs from $MODULE@v$KEDA_VERSION's"
  done
  readme | cmp -s - "$DEST/README.md" || die "$DEST/README.md is stale"
  extra=$(find "$TESTDATA" -mindepth 1 -maxdepth 1 ! -name "$KEDA_VERSION")
  [ -z "$extra" ] || die "other releases in $TESTDATA: $extra"
  log "test/keda/testdata/$KEDA_VERSION is KEDA v$KEDA_VERSION's"
  exit 0
fi

find "$TESTDATA" -mindepth 1 -maxdepth 1 ! -name "$KEDA_VERSION" -exec rm -rf {} + 2>/dev/null || true
rm -rf "$DEST"
mkdir -p "$DEST"
for f in "${CRDS[@]}"; do
  install -m 0644 "$dir/config/crd/bases/$f" "$DEST/$f"
done
readme >"$DEST/README.md"
log "wrote ${DEST#"$ROOT"/}"
