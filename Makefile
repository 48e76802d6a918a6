# retry-operator Makefile (kubebuilder layout). `make help` lists the targets.

# Tools are pinned and installed into ./bin.
LOCALBIN ?= $(shell pwd)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
CONTROLLER_TOOLS_VERSION ?= v0.23.0
# golangci-lint with kube-api-linter compiled in (hack/setup-lint.sh); KAL's go.mod pins golangci-lint.
KAL_VERSION ?= v0.0.0-20260716143926-092fe0c72997
export KAL_VERSION

# envtest binaries (kube-apiserver, etcd, controller-manager) are built from the Go module proxy
# by hack/setup-envtest.sh into a cache outside the checkout.
ENVTEST_K8S_VERSION ?= 1.36.3
export ENVTEST_K8S_VERSION

IMG ?= ghcr.io/retryops/retry-operator:dev
DISPATCHER_IMG ?= ghcr.io/retryops/retry-dispatcher:dev
# The example consumer (examples/consumer) the library-mode sample pipeline runs (config/samples).
EXAMPLE_IMG ?= ghcr.io/retryops/retry-operator-example-consumer:dev

# -timeout bounds each package's test binary: a hung test fails with its goroutines' stacks instead
# of holding `make test` for ever. The slowest package here (cmd/dispatcher, the storms) took 205 s
# on 2 busy cores; 20m never kills a healthy run.
GO_TEST_FLAGS ?= -count=1 -timeout=30m
# The data plane is a module of its own in sdk/ (sdk/go.mod; go.mod's replace points at it): Go
# commands for its packages run from that directory, and every target here covers both modules.
SDK_DIR := sdk
# examples/ is a third module (examples/go.mod), the complete small consumer a team would write: it
# depends on the data plane's module as a user's go.mod does (a replace to ../sdk for development).
EXAMPLES_DIR := examples
# The packages with goroutines of their own run under the race detector in `make test`: in the
# operator's module the controllers, Kafka clients and statistics, Kubernetes circuit reporting
# (pkg/kubereport); in the data plane's (SDK_RACE_PKGS, from sdk/) the dispatcher, circuit-state
# reporting, the library and the batch contract.
RACE_PKGS ?= ./controllers/... ./internal/kafka/... ./internal/kafkastats/... ./pkg/...
SDK_RACE_PKGS ?= ./dispatcher/... ./circuitstate/... ./retryloop/... ./batch/...
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs into config/crd/bases, the ClusterRole into config/rbac, the Argo CD health checks' argocd-cm snippet into config/argocd, and the chart's copies of them (hack/chartgen), and docs/api-reference.md (hack/apidocs).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=false paths="./api/v1alpha1/...;./controllers/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./config/argocd/gen
	go run ./hack/chartgen
	go run ./hack/apidocs

.PHONY: generate
generate: controller-gen ## Generate deepcopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: dashboard
dashboard: ## Generate the Grafana dashboard (internal/dashboard) into config/grafana and the chart's copy (hack/chartgen).
	go run ./hack/dashboard generate
	go run ./hack/chartgen

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')

.PHONY: vet
vet: ## Run go vet on every module.
	go vet ./...
	cd $(SDK_DIR) && go vet ./...
	cd $(EXAMPLES_DIR) && go vet ./...

.PHONY: verify
verify: manifests generate dashboard ## Fail when generated files are stale, gofmt would change a file, go vet complains or a go.mod or go.sum is untidy (both modules).
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@if [ -n "$$(git status --porcelain -- api config charts docs/api-reference.md)" ]; then \
	  echo "generated files are stale: run 'make manifests generate dashboard' and commit:"; git status --porcelain -- api config charts docs/api-reference.md; git --no-pager diff --stat -- api config charts docs/api-reference.md; exit 1; fi
	@for dir in . $(SDK_DIR) $(EXAMPLES_DIR); do if ! diff=$$(cd $$dir && go mod tidy -diff); then \
	  echo "$$dir/go.mod or go.sum is untidy: run 'go mod tidy' in $$dir and commit:"; echo "$$diff"; exit 1; fi; done
	go vet ./...
	cd $(SDK_DIR) && go vet ./...
	cd $(EXAMPLES_DIR) && go vet ./...

.PHONY: lint
lint: ## Run golangci-lint on both modules (.golangci.yml) and kube-api-linter on the API types (.golangci-kal.yml).
	@lint=$$(hack/setup-lint.sh) && \
	  $$lint run ./... && \
	  (cd $(SDK_DIR) && $$lint run --config ../.golangci.yml ./...) && \
	  (cd $(EXAMPLES_DIR) && $$lint run --config ../.golangci.yml ./...) && \
	  $$lint run --config .golangci-kal.yml ./api/...

.PHONY: setup-envtest
setup-envtest: ## Build (first time) the envtest binaries and print their directory.
	hack/setup-envtest.sh --print-path

.PHONY: test
test: manifests generate ## Build the envtest binaries (kube-apiserver, etcd, controller-manager) if needed, then run every test of both modules; RACE_PKGS and SDK_RACE_PKGS under the race detector.
	hack/setup-prometheus.sh >/dev/null
	hack/setup-chromium.sh >/dev/null
	hack/setup-helm.sh >/dev/null
	@assets=$$(hack/setup-envtest.sh --print-path --with-controller-manager) && \
	  race=$$(go list $(RACE_PKGS)) && \
	  rest=$$(go list ./... | grep -vxF -f <(echo "$$race")) && \
	  echo "go test $(GO_TEST_FLAGS) <$$(echo $$rest | wc -w) packages>" && \
	  KUBEBUILDER_ASSETS=$$assets go test $(GO_TEST_FLAGS) $$rest && \
	  echo "go test -race $(GO_TEST_FLAGS) $(RACE_PKGS)" && \
	  KUBEBUILDER_ASSETS=$$assets go test -race $(GO_TEST_FLAGS) $$race
# The data plane's module needs no control plane: its tests run without KUBEBUILDER_ASSETS.
	@cd $(SDK_DIR) && \
	  race=$$(go list $(SDK_RACE_PKGS)) && \
	  rest=$$(go list ./... | grep -vxF -f <(echo "$$race")) && \
	  echo "(cd $(SDK_DIR) && go test $(GO_TEST_FLAGS) <$$(echo $$rest | wc -w) packages>)" && \
	  go test $(GO_TEST_FLAGS) $$rest && \
	  echo "(cd $(SDK_DIR) && go test -race $(GO_TEST_FLAGS) $(SDK_RACE_PKGS))" && \
	  go test -race $(GO_TEST_FLAGS) $$race
	@echo "(cd $(EXAMPLES_DIR) && go test $(GO_TEST_FLAGS) ./...)" && cd $(EXAMPLES_DIR) && go test $(GO_TEST_FLAGS) ./...

.PHONY: test-unit
test-unit: ## The quick loop, under 2 minutes once the build cache is warm: the tests of the three modules that need no envtest and no browser (hack/unit-packages.sh lists them), with -short, without the race detector.
	GO_TEST_FLAGS="$(GO_TEST_FLAGS)" hack/test-unit.sh

.PHONY: console-screenshots
console-screenshots: ## Refresh docs/console-*.png: the console's browser test in headless Chromium (hack/setup-chromium.sh), writing its screenshots into docs/.
	hack/setup-chromium.sh >/dev/null
	DLQUI_SCREENSHOTS=$(shell pwd)/docs go test $(GO_TEST_FLAGS) -run '^TestConsoleInBrowser$$' ./internal/dlqui

FUZZTIME ?= 60s
.PHONY: fuzz
fuzz: ## Run the retry core's (sdk/retry), the deadletters API's and the record of decisions' fuzz targets for FUZZTIME each.
	cd $(SDK_DIR) && go test ./retry -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZTIME)
	cd $(SDK_DIR) && go test ./retry -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)
	cd $(SDK_DIR) && go test ./retry -run '^$$' -fuzz '^FuzzPatternBudget$$' -fuzztime $(FUZZTIME)
	go test ./internal/dlqapi -run '^$$' -fuzz '^FuzzListParameters$$' -fuzztime $(FUZZTIME)
	go test ./internal/deadletters -run '^$$' -fuzz '^FuzzDecisionsBelongToTheirRecord$$' -fuzztime $(FUZZTIME)

##@ Build

.PHONY: build
build: ## Build the manager into bin/.
	go build -o $(LOCALBIN)/manager ./cmd/manager

.PHONY: run
run: ## Run the manager: against KUBECONFIG's cluster when set, else on a local control plane and embedded Kafka.
	hack/run-local.sh

.PHONY: dev
dev: ## The whole loop locally: control plane, embedded Kafka, manager, dispatchers and a live demo.
	hack/run-local.sh --demo

.PHONY: docker-build
docker-build: ## Build the operator image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: docker-build-example
docker-build-example: ## Build the example consumer's image (examples/consumer), which the library-mode sample pipeline runs (needs a Docker engine).
	docker build -f examples/Dockerfile -t $(EXAMPLE_IMG) .

.PHONY: install
install: manifests ## Install the CRDs into the cluster of the current kubeconfig.
	kubectl apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs from the cluster of the current kubeconfig.
	kubectl delete -k config/crd --ignore-not-found

.PHONY: deploy
deploy: manifests ## Deploy the operator to the cluster of the current kubeconfig.
	cd config/manager && kubectl kustomize . >/dev/null
	kubectl apply --server-side -k config/default

.PHONY: setup-helm
setup-helm: ## Build (first time) helm 4 and helm 3 and print their directory (the chart's tests run both).
	hack/setup-helm.sh --print-path

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen into bin/.
$(CONTROLLER_GEN): $(LOCALBIN)
	@test -x $(CONTROLLER_GEN) && $(CONTROLLER_GEN) --version 2>/dev/null | grep -q $(CONTROLLER_TOOLS_VERSION) || \
	  GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(LOCALBIN):
	mkdir -p $(LOCALBIN)
