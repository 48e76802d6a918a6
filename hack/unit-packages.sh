#!/usr/bin/env bash
# Prints the packages of the Go module in the current directory that `make test-unit` runs: those
# with tests whose test binary links neither envtest (a kube-apiserver and etcd) nor chromedp (a
# browser). The helm, install and end-to-end suites start envtest, so they fall out with it. The
# list is computed from the imports, never kept by hand: a package whose tests start using envtest
# or a browser leaves the quick tier by itself.
set -euo pipefail
go list -test -f '{{if and (eq .Name "main") (not .ForTest)}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}' ./... |
  awk '$1 ~ /\.test$/ {
    heavy = 0
    for (i = 2; i <= NF; i++) if ($i == "sigs.k8s.io/controller-runtime/pkg/envtest" || $i == "github.com/chromedp/chromedp") heavy = 1
    if (!heavy) print substr($1, 1, length($1) - 5)
  }'
