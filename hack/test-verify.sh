#!/usr/bin/env bash
# Proves that `make verify` catches what it promises to catch: in a throwaway worktree of HEAD it
# (1) changes an API type (the Grafana dashboard's code, an Argo CD health script) without
# regenerating, or edits a generated file by hand (the chart's copy of a CRD or of the dashboard,
# docs/api-reference.md), (2) leaves a file unformatted, (3) adds code go vet rejects (in either
# module), (4) leaves sdk/go.mod untidy, and expects `make verify` to fail each time with the matching
# message.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
make -s controller-gen >/dev/null
gen="$root/bin/controller-gen"
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/wt" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/wt" HEAD >/dev/null 2>&1
cd "$tmp/wt"

expect_failure() {
  local what=$1 want=$2 out
  if out=$(make -s verify CONTROLLER_GEN="$gen" 2>&1); then
    echo "FAIL: make verify passed although $what"; exit 1
  fi
  if ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: make verify failed for $what but did not say \"$want\":"; echo "$out" | tail -20; exit 1
  fi
  echo "ok: make verify fails when $what"
  git checkout -q -- . && git clean -qfd
}

make -s verify CONTROLLER_GEN="$gen" >/dev/null 2>&1 || { echo "FAIL: make verify fails on a clean HEAD"; exit 1; }
echo "ok: make verify passes on a clean HEAD"

sed -i 's|// maxAttempts is the number of deliveries in all|// maxAttempts counts every delivery|' api/v1alpha1/retrypolicy_types.go
expect_failure "an API type changed without regenerating the CRDs" "generated files are stale"

sed -i 's|^type RetryPolicySpec struct {|type RetryPolicySpec struct {\n\t// extraField is new.\n\tExtraField string `json:"extraField,omitempty"`|' api/v1alpha1/retrypolicy_types.go
expect_failure "a field was added without regenerating deepcopy and CRDs" "generated files are stale"

sed -i 's|Title:       "Retry rate per pipeline"|Title:       "Retries per pipeline"|' internal/dashboard/panels.go
expect_failure "the dashboard's code changed without regenerating config/grafana" "generated files are stale"

sed -i 's|^-- Argo CD health of a RetryPolicy|-- The Argo CD health of a RetryPolicy|' config/argocd/resource_customizations/retry.retryops.dev/RetryPolicy/health.lua
expect_failure "an Argo CD health script changed without regenerating config/argocd (make manifests)" "generated files are stale"

# Committed: verify regenerates the file, so an uncommitted edit would just be undone.
sed -i 's|maxAttempts is the number of deliveries in all|maxAttempts counts every delivery|' charts/retry-operator/templates/crds/retrypolicies.yaml
git -c user.name=test-verify -c user.email=test-verify@example.invalid commit -qam "a generated file edited by hand"
expect_failure "the chart's copy of a CRD was edited instead of regenerated (hack/chartgen)" "generated files are stale"
git reset -q --hard HEAD~1

sed -i 's|"title": "Retry operator: Retry Policy Monitoring"|"title": "Retry Policy Monitoring"|' charts/retry-operator/files/dashboards/retry-operator-dashboard.json
git -c user.name=test-verify -c user.email=test-verify@example.invalid commit -qam "a copied file edited by hand"
expect_failure "the chart's copy of the dashboard was edited instead of regenerated (hack/chartgen)" "generated files are stale"
git reset -q --hard HEAD~1

sed -i 's#"pattern": "^(debug|info|#"pattern": "^(debug|verbose|info|#' charts/retry-operator/values.schema.json
git -c user.name=test-verify -c user.email=test-verify@example.invalid commit -qam "a generated schema constraint edited by hand"
expect_failure "a constraint of values.schema.json generated from internal/chartschema was edited by hand (hack/chartgen)" "generated files are stale"
git reset -q --hard HEAD~1

sed -i 's|^# API reference$|# The API reference|' docs/api-reference.md
git -c user.name=test-verify -c user.email=test-verify@example.invalid commit -qam "the API reference edited by hand"
expect_failure "docs/api-reference.md was edited instead of regenerated (hack/apidocs)" "generated files are stale"
git reset -q --hard HEAD~1

printf 'package controllers\nfunc   badlyFormatted() {}\n' > controllers/zz_unformatted.go
expect_failure "a file is not gofmt-formatted" "gofmt would change"

printf 'package controllers\n\nimport "fmt"\n\nfunc vetMe() { fmt.Printf("%%d\\n", "not a number") }\n' > controllers/zz_vet.go
expect_failure "go vet complains" "Printf format %d has arg"

# The data plane's module (sdk/) is vetted and tidied from its own directory.
printf 'package retry\n\nimport "fmt"\n\nfunc vetMe() { fmt.Printf("%%d\\n", "not a number") }\n' > sdk/retry/zz_vet.go
expect_failure "go vet complains in the data plane's module" "Printf format %d has arg"

(cd sdk && go mod edit -droprequire=github.com/onsi/gomega)
expect_failure "sdk/go.mod lacks a module its tests import" "sdk/go.mod or go.sum is untidy"
