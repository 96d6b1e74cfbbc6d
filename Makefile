# Turnstile — locks as Kubernetes custom resources.
# Everything builds from the Go module proxy into ./bin; nothing else is downloaded.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

## Pinned versions
KUBE_VERSION ?= 1.36.3
ETCD_VERSION ?= 3.6.16
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0

BIN := $(CURDIR)/bin
K8S_BIN := $(BIN)/k8s/$(KUBE_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
export KUBEBUILDER_ASSETS := $(K8S_BIN)
export TURNSTILE_KUBECTL := $(K8S_BIN)/kubectl

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

# Where `make dev` writes its kubeconfig, and extra flags for hack/dev and the manager (e.g.
# DEV_ARGS="--metrics-bind-address=0 --health-probe-bind-address=0 -- --default-ttl=5m").
DEV_STATE ?= $(BIN)/dev
DEV_ARGS ?=

.PHONY: dev
dev: k8s-bins build ## Start a local control plane + the manager; prints a KUBECONFIG. Ctrl-C stops all.
	go build -o $(BIN)/turnstile-dev ./hack/dev
	$(BIN)/turnstile-dev --assets $(K8S_BIN) --manager $(BIN)/manager --state $(DEV_STATE) $(DEV_ARGS)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the API types and markers.
	$(CONTROLLER_GEN) rbac:roleName=turnstile-manager crd:allowDangerousTypes=false paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (built from the module proxy) and check gofmt.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GOLANGCI_LINT) run ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Fail if generated files are out of date.
	@git diff --exit-code -- config/crd config/rbac api || { echo "generated files are stale: run make manifests generate"; exit 1; }

##@ Test

.PHONY: test
test: k8s-bins build ## Unit + envtest + e2e tests (real kube-apiserver, etcd, kubectl); prints a summary.
	hack/test.sh

# The dashboard's browser tests (test/dashboard) run in Debian's chromium. `make test` skips them,
# saying so, where it is missing (the README's commands need only Go); CI installs it first with
# `make chromium` and then fails rather than skips.
.PHONY: chromium
chromium: ## Install Debian's chromium for the browser tests (apt-get, as root) unless it is there.
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "make chromium: needs root to run apt-get install -y chromium"; exit 1; fi; \
	  echo "installing Debian's chromium for the dashboard's browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@chromium --version

.PHONY: test-browser
test-browser: k8s-bins build chromium ## Only the dashboard's browser tests, in headless Chromium (installed if missing).
	TURNSTILE_REQUIRE_BROWSER=1 go test -count=1 -v ./test/dashboard/

.PHONY: dashboard-screenshots
dashboard-screenshots: k8s-bins build chromium ## Run the browser tests and write their screenshots into docs/dashboard.
	TURNSTILE_REQUIRE_BROWSER=1 TURNSTILE_SCREENSHOTS=$(CURDIR)/docs/dashboard go test -count=1 -v ./test/dashboard/

.PHONY: test-unit
test-unit: ## Only the pure unit tests (no control plane).
	go test -race ./internal/queue/... ./internal/deadlock/... ./internal/lockkey/... ./internal/dashboard/... ./pkg/workdir/...

# BENCH_PROFILE=10 records 10 s of manager CPU profile per hand-off depth into bin/bench/*.pprof.
BENCH_PROFILE ?= 0

.PHONY: bench
bench: k8s-bins build ## Benchmark harness (test/bench): Turnstile vs the raw API server and leaderelection; a table + bin/bench/results.json.
	go run ./test/bench/cmd --size full --manager $(BIN)/manager --out $(BIN)/bench --profile $(BENCH_PROFILE)

##@ Build

.PHONY: build
build: ## Build the manager and the kubectl plugin into ./bin.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/kubectl-turnstile ./cmd/kubectl-turnstile

.PHONY: k8s-bins
k8s-bins: ## Build kube-apiserver, etcd and kubectl from the Go module proxy (cached in ./bin/k8s).
	@KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) hack/build-k8s-bins.sh $(K8S_BIN)

$(CONTROLLER_GEN):
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(BIN)/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/golangci-lint $@
