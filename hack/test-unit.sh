#!/usr/bin/env bash
# make test-unit: the tests of the three modules that need no envtest and no browser
# (hack/unit-packages.sh), with -short, without the race detector. The data plane's module runs
# beside the operator's (its tests mostly wait on timers, not on the CPU); its output follows.
set -uo pipefail
cd "$(dirname "$0")/.."
flags=(-short ${GO_TEST_FLAGS:--count=1 -timeout=30m})
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(
  set -e
  cd sdk
  pkgs=$(../hack/unit-packages.sh)
  echo "(cd sdk && go test ${flags[*]} <$(echo $pkgs | wc -w) packages>)"
  go test "${flags[@]}" $pkgs
  cd ../examples
  echo "(cd examples && go test ${flags[*]} ./...)"
  go test "${flags[@]}" ./...
) >"$log" 2>&1 &
data=$!
rc=0
pkgs=$(hack/unit-packages.sh) || exit 1
echo "go test ${flags[*]} <$(echo $pkgs | wc -w) packages>"
go test "${flags[@]}" $pkgs || rc=1
wait "$data" || rc=1
cat "$log"
exit $rc
