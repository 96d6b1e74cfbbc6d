# Turnstile — locks as Kubernetes custom resources.
# Everything builds from the Go module proxy into ./bin; nothing else is downloaded.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

## Pinned versions
# make test's control plane: the newest version of the support range. CI tests the oldest beside it
# (KUBE_VERSIONS_CI), so the range's two ends are tested on every change.
KUBE_VERSION ?= 1.37.2
# The support range (docs/install.md, "Supported Kubernetes versions"): the newest patch of each
# minor that the Go module proxy serves. make test-versions builds and tests every one.
# 1.38.0-beta.0 cannot be built here: it needs module versions the proxy does not serve
# (k8s.io/apiextensions-api and k8s.io/ktesting v0.38.0-beta.0, structured-merge-diff/v7 v7.0.1).
KUBE_VERSIONS ?= 1.33.13 1.34.4 1.35.4 1.36.3 1.37.2
# The oldest of the range: what CI runs beside KUBE_VERSION, the newest (make test-versions-ci).
KUBE_VERSIONS_CI ?= 1.33.13
ETCD_VERSION ?= 3.6.16
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
# The Kube API Linter, run on api/ by hack/kal (its own module: hack/kal/go.mod pins the same version).
KAL_VERSION ?= v0.0.0-20260716143926-092fe0c72997
# spin comes from Debian's package (make spin); this version is tried first.
SPIN_DEB_VERSION ?= 6.5.2+dfsg-1
HELM_VERSION ?= v3.22.0
HELM_UNITTEST_VERSION ?= v1.1.2
# The Kubernetes version `helm template` and `helm lint` assume, as in Helm's own release build
# (one past client-go's major, its minor: v0.37 -> 1.37).
HELM_KUBE_VERSION_MINOR ?= 37
# krew and its manifest validator (krew-index's), for test/release's checks of the krew manifest.
KREW_VERSION ?= v0.4.3
# promtool comes from Debian's prometheus package (make promtool); this version is tried first.
PROMETHEUS_DEB_VERSION ?= 2.42.0+ds-5+deb12u1

BIN := $(CURDIR)/bin
K8S_BIN := $(BIN)/k8s/$(KUBE_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KAL := $(BIN)/kal-$(KAL_VERSION)
HELM := $(BIN)/helm-$(HELM_VERSION)
KREW := $(BIN)/krew-$(KREW_VERSION)
VALIDATE_KREW := $(BIN)/validate-krew-manifest-$(KREW_VERSION)
# helm-unittest is a Helm plugin: helm finds it in HELM_PLUGINS.
export HELM_PLUGINS := $(BIN)/helm-plugins
HELM_UNITTEST := $(HELM_PLUGINS)/unittest/untt-$(HELM_UNITTEST_VERSION)
CHART := charts/turnstile
export KUBEBUILDER_ASSETS := $(K8S_BIN)
export TURNSTILE_KUBECTL := $(K8S_BIN)/kubectl
export TURNSTILE_HELM := $(HELM)
export TURNSTILE_KREW := $(KREW)
export TURNSTILE_VALIDATE_KREW := $(VALIDATE_KREW)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

# Where `make dev` writes its kubeconfigs and the manager's token, and extra flags for hack/dev and the manager (e.g.
# DEV_ARGS="--metrics-bind-address=0 --health-probe-bind-address=0 -- --default-ttl=5m").
# FLEET=N starts a fleet instead (docs/fleet.md): a hub and N spokes, each its own control plane.
DEV_STATE ?= $(BIN)/dev
DEV_ARGS ?=
FLEET ?=

.PHONY: dev
dev: k8s-bins build ## Start a local control plane, install config/default, run the manager as its ServiceAccount; prints what to paste. Ctrl-C stops all. FLEET=2: a hub and two spokes (docs/fleet.md).
	go build -o $(BIN)/turnstile-dev ./hack/dev
	$(BIN)/turnstile-dev --assets $(K8S_BIN) --manager $(BIN)/manager --plugin $(BIN)/kubectl-turnstile --state $(DEV_STATE) $(if $(FLEET),--fleet=$(FLEET)) $(DEV_ARGS)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the API types and markers, and the chart's copies of them.
	$(CONTROLLER_GEN) rbac:roleName=turnstile-manager crd:allowDangerousTypes=false paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/chartgen

.PHONY: chart
chart: ## Regenerate the chart's CRDs, RBAC, alerts and dashboard from config/ (hack/chartgen).
	go run ./hack/chartgen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

# Modules nested in the tree that the root's ./... does not reach: hack/kal (lint-api),
# hack/release (make release's dependencies stay out of go.mod) and test/gitopsfreeze (Flux's and
# Helm's own libraries). hack/test.sh runs the tests of the last two.
NESTED_MODULES := hack/release test/gitopsfreeze

.PHONY: vet
vet: ## go vet (the nested test modules too).
	go vet ./...
	for m in $(NESTED_MODULES); do (cd $$m && go vet ./...); done

.PHONY: lint
lint: $(GOLANGCI_LINT) lint-api ## Run golangci-lint (built from the module proxy), check gofmt, and run the Kube API Linter (lint-api).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GOLANGCI_LINT) run ./...
	cd hack/kal && $(GOLANGCI_LINT) run ./...
	for m in $(NESTED_MODULES); do (cd $$m && $(GOLANGCI_LINT) run ./...); done

.PHONY: lint-api
lint-api: $(KAL) ## Run the Kube API Linter (KAL) on api/: hack/kal (its own tests first), with the settings in hack/kal/config.yaml.
	cd hack/kal && go test ./...
	$(KAL) -config hack/kal/config.yaml ./api/...

# The largest file the repository may track: build outputs and binaries belong in bin/, not git.
MAX_TRACKED_BYTES ?= 5242880

.PHONY: check-tracked-size
check-tracked-size: ## Fail when a tracked file is over 5 MB (MAX_TRACKED_BYTES): a binary or build output was committed.
	@big=$$(git ls-files -z | xargs -0 -r stat -L -c '%s %n' -- 2>/dev/null | awk -v max=$(MAX_TRACKED_BYTES) '$$1 > max'); \
	if [ -n "$$big" ]; then echo "tracked files over $(MAX_TRACKED_BYTES) bytes (git rm --cached them; build outputs go in bin/):"; echo "$$big"; exit 1; fi; \
	echo "no tracked file is over $(MAX_TRACKED_BYTES) bytes"

.PHONY: verify-generated
verify-generated: manifests generate ## Fail if generated files are out of date.
	@git diff --exit-code -- config/crd config/rbac api $(CHART) || { echo "generated files are stale: run make manifests generate"; exit 1; }
	@test -z "$$(git status --porcelain -- $(CHART))" || { echo "untracked generated chart files:"; git status --porcelain -- $(CHART); exit 1; }

##@ Test

.PHONY: test
test: k8s-bins build helm helm-unittest krew ## Unit + envtest + e2e tests (real kube-apiserver, etcd, kubectl, helm); prints a summary.
	RELEASE_PLATFORMS=$(TEST_RELEASE_PLATFORMS) hack/test.sh

# SUITES=ci runs the subset that differs by version (install, admission, gated, faults, watch);
# BETA=0 skips the second run of 1.34 and 1.35 with MutatingAdmissionPolicy v1beta1 enabled.
SUITES ?= full
BETA ?= 1
# JOBS: how many versions make test-versions runs at once (each in bin/versions/<version>).
JOBS ?= 1

.PHONY: test-versions
test-versions: build helm ## Per Kubernetes version in KUBE_VERSIONS: installs, admission, deployed, e2e, gated, API-server faults, watch (hack/test-versions.sh; table in bin/versions/summary.md).
	@$(MAKE) --no-print-directory k8s-bins-versions KUBE_VERSIONS="$(KUBE_VERSIONS)"
	SUITES=$(SUITES) BETA=$(BETA) JOBS=$(JOBS) hack/test-versions.sh $(KUBE_VERSIONS)

.PHONY: test-versions-ci
test-versions-ci: ## What CI runs beside make test (the newest version): SUITES=ci BETA=0 on the oldest (KUBE_VERSIONS_CI).
	@$(MAKE) --no-print-directory test-versions KUBE_VERSIONS="$(KUBE_VERSIONS_CI)" SUITES=ci BETA=0 JOBS=2

.PHONY: test-chart
test-chart: helm helm-unittest ## Only the chart: helm lint --strict and the helm-unittest suites (make test runs both too).
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f test/chart/testdata/all-on.yaml
	$(HELM) unittest --strict $(CHART)

.PHONY: test-alerts
test-alerts: promtool ## promtool check rules + test rules on config/prometheus (promtool from Debian; run in CI).
	promtool check rules config/prometheus/turnstile.rules.yaml
	cd config/prometheus && promtool test rules turnstile.rules.test.yaml
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
test-unit: ## Only the pure unit tests (no control plane), the packages' *_internal_test.go included.
	go test -race ./api/... ./internal/queue/... ./internal/deadlock/... ./internal/lockkey/... ./internal/dashboard/... ./internal/cache/... ./pkg/workdir/... ./internal/testing/framework/
	go test -race -skip '^TestControllers$$' ./internal/controller/

# The long run of the safety simulation (test/safety): seeds and steps per seed. A failure prints
# the seed that replays it: make soak SOAK_SEEDS=<seed>.
SOAK_SEEDS ?= 101,102,103,104,105,106,107,108
SOAK_STEPS ?= 5000

.PHONY: soak
soak: k8s-bins ## The safety simulation with a long budget (SOAK_SEEDS, SOAK_STEPS): 3 managers on lagging caches.
	TURNSTILE_SIM_SEEDS=$(SOAK_SEEDS) TURNSTILE_SIM_STEPS=$(SOAK_STEPS) go test -v -count=1 -timeout 0 ./test/safety/ -ginkgo.focus "seeded simulation" -ginkgo.v | grep -a -E "seed [0-9]+:|simulation:|FAIL|Expected|^ok"

# The liveness soak (issue #47): the churn specs and every fault class in turns, under CPU
# pressure, reporting the longest time a key with work went undecided (hack/soak-undecided.sh).
SOAK_MINUTES ?= 60
SOAK_HOGS ?= 2

.PHONY: soak-undecided
soak-undecided: k8s-bins build ## The churn specs and the fault classes in turns for SOAK_MINUTES (60) beside SOAK_HOGS (2) busy loops: the longest time a key with work went undecided.
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_HOGS=$(SOAK_HOGS) SOAK_OUT=$(BIN)/soak-undecided TURNSTILE_MANAGER=$(BIN)/manager hack/soak-undecided.sh

# The fault matrix (test/faults): every fault class x FAULTS_SEEDS x FAULTS_REPLICAS manager
# replicas, judged from the clients' records; FAULTS_FOCUS narrows it to classes (a regexp of
# their names, e.g. FAULTS_FOCUS="API server"). `make test` runs one seed per class.
FAULTS_SEEDS ?= 1,2,3
FAULTS_REPLICAS ?= 1,3
FAULTS_FOCUS ?= .

.PHONY: faults
faults: k8s-bins build ## The fault matrix (test/faults): partitions, restarts, 410, 429, skew... x seeds x 1 and 3 replicas; prints the summary table.
	@mkdir -p $(BIN)/faults
	status=0; TURNSTILE_FAULTS_SEEDS=$(FAULTS_SEEDS) TURNSTILE_FAULTS_REPLICAS=$(FAULTS_REPLICAS) TURNSTILE_FAULTS_SUMMARY=$(BIN)/faults/summary.md \
	  go test -v -count=1 -timeout 0 ./test/faults/ -ginkgo.focus "$(FAULTS_FOCUS)" -ginkgo.v -ginkgo.no-color > $(BIN)/faults/log.txt 2>&1 || status=$$?; \
	  grep -a -E "holds checked|\[FAIL|Expected|^ok|^FAIL" $(BIN)/faults/log.txt || true; \
	  echo "full log: $(BIN)/faults/log.txt"; cat $(BIN)/faults/summary.md 2>/dev/null || true; exit $$status

# The long run of the active-active chaos test (test/crash): rounds per requester.
CHAOS_ROUNDS ?= 60

.PHONY: chaos
chaos: k8s-bins build ## SIGKILL random active-active replicas during churn, longer than make test does (CHAOS_ROUNDS); checks invariants and porcupine.
	TURNSTILE_CHAOS_ROUNDS=$(CHAOS_ROUNDS) go test -v -count=1 -timeout 0 ./test/crash/ -ginkgo.focus "Active-active" -ginkgo.v | grep -a -E "grants across|invariant checker|porcupine|FAIL|Expected|^ok"

.PHONY: model-check
model-check: spin ## Model-check the grant protocol (model/turnstile.pml) with spin: each configuration exhaustively, each mutation refuted (MODEL_FULL=1: the larger ones too).
	hack/model-check.sh

.PHONY: spin
spin: ## Install spin (Debian's package, as root) when it is missing.
	@command -v spin >/dev/null || { \
	  apt-get update -qq && \
	  { apt-get install -y -qq --no-install-recommends spin=$(SPIN_DEB_VERSION) || \
	    { echo "spin=$(SPIN_DEB_VERSION) is not available; installing Debian's current spin"; \
	      apt-get install -y -qq --no-install-recommends spin; }; }; }
	@spin -V

.PHONY: mutants
mutants: k8s-bins ## Take each guard of the grant path out in turn and check that a test fails (hack/mutants).
	go run ./hack/mutants

# In CI: every guard's marker is in the code once, every marker is named by a mutant, and every
# mutant applies and builds (go build + go vet of what it edits and of its test package, through
# an overlay: the tree is not touched). No tests run, so no KUBEBUILDER_ASSETS.
.PHONY: mutants-dry
mutants-dry: ## Check that every mutant's markers are in the code and that every mutant applies and builds (hack/mutants -dry).
	go run ./hack/mutants -dry

# BENCH_PROFILE=10 records 10 s of CPU profile of every manager per hand-off depth (and per
# replicas mode and deep-queue run) into bin/bench/*.pprof.
BENCH_PROFILE ?= 0
# BENCH_ROUNDS=8 runs the replicas phase for 8 rounds instead of 5 (about 5 minutes a round).
# Runs of the same code pool round by round:
#   go run ./test/bench/cmd --pool run1/results.json,run2/results.json
BENCH_ROUNDS ?= 0
# BENCH_PHASES=failover runs only that phase (steady, scale, run, shared, gated, freeze, replicas, failover, roll; default all).
# BENCH_REPLICAS=2 runs the steady-state phases with two managers active-active; with
# BENCH_LEADER_ELECT=true, with leader election instead (one leads, one stands by).
BENCH_PHASES ?=
BENCH_REPLICAS ?= 1
BENCH_LEADER_ELECT ?= false
# BENCH_SCALE_BASELINE=/path/to/manager restarts that manager (e.g. built from main) beside this
# one at every point of the scale curve; BENCH_SCALE_POINTS=10000,30000 stops the curve there.
BENCH_SCALE_BASELINE ?=
BENCH_SCALE_POINTS ?=
# BENCH_MEM_LIMIT=576Mi runs every manager under that container memory limit instead of 256Mi,
# passed as the chart passes it (docs/performance.md sizes it); BENCH_CGROUP=true enforces it
# with a memory cgroup, as a container runtime does (needs root).
BENCH_MEM_LIMIT ?=
BENCH_CGROUP ?= false

.PHONY: bench
bench: k8s-bins build ## Benchmark harness (test/bench): Turnstile vs the raw API server and leaderelection; a table + bin/bench/results.json.
	go run ./test/bench/cmd --size full --manager $(BIN)/manager --out $(BIN)/bench --profile $(BENCH_PROFILE) --phases "$(BENCH_PHASES)" --replicas $(BENCH_REPLICAS) --leader-elect=$(BENCH_LEADER_ELECT) --rounds $(BENCH_ROUNDS) --scale-baseline "$(BENCH_SCALE_BASELINE)" --scale-points "$(BENCH_SCALE_POINTS)" --mem-limit "$(BENCH_MEM_LIMIT)" --cgroup=$(BENCH_CGROUP)

##@ Build

.PHONY: build
# The flags of make release's builds (hack/release/build.go), so that the release's linux/amd64
# binaries reuse what this compiled (the -X version and the link are all that differ).
BUILD_FLAGS := -trimpath -tags=timetzdata

.PHONY: build
build: ## Build the manager (static, as the image builds it) and the kubectl plugin into ./bin.
	CGO_ENABLED=0 go build $(BUILD_FLAGS) -o $(BIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build $(BUILD_FLAGS) -o $(BIN)/kubectl-turnstile ./cmd/kubectl-turnstile

.PHONY: helm
helm: $(HELM) ## Build helm from the Go module proxy (cached in ./bin).

.PHONY: helm-unittest
helm-unittest: $(HELM_UNITTEST) ## Build the helm-unittest plugin from its Go module into ./bin/helm-plugins.

.PHONY: krew
krew: $(KREW) $(VALIDATE_KREW) ## Build krew and validate-krew-manifest from the Go module proxy (cached in ./bin): test/release installs the plugin with them.

.PHONY: promtool
promtool: ## Install promtool (Debian's prometheus package, as root) when it is missing.
	@command -v promtool >/dev/null || { \
	  apt-get update -qq && \
	  { apt-get install -y -qq --no-install-recommends prometheus=$(PROMETHEUS_DEB_VERSION) || \
	    { echo "prometheus=$(PROMETHEUS_DEB_VERSION) is not available; installing Debian's current prometheus"; \
	      apt-get install -y -qq --no-install-recommends prometheus; }; }; }
	@promtool --version 2>&1 | head -1

.PHONY: k8s-bins
k8s-bins: ## Build kube-apiserver, etcd, kubectl, kube-scheduler and kube-controller-manager from the Go module proxy (cached in ./bin/k8s).
	@KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) CONTROL_PLANE=1 hack/build-k8s-bins.sh $(K8S_BIN)

# One version at a time, niced: each is several minutes of both cores (bin/k8s/<v>/.build-times).
# .ci/run builds CI's pair at NICE=19 while make test runs, in the time its suites wait.
NICE ?= 10
.PHONY: k8s-bins-versions
k8s-bins-versions: ## Build the control-plane binaries of every version in KUBE_VERSIONS (cached in ./bin/k8s/<version>-<os>-<arch>).
	@for v in $(KUBE_VERSIONS); do \
	  KUBE_VERSION=$$v ETCD_VERSION=$(ETCD_VERSION) CONTROL_PLANE=1 nice -n $(NICE) hack/build-k8s-bins.sh $(BIN)/k8s/$$v-$(shell go env GOOS)-$(shell go env GOARCH) || exit 1; \
	done

$(CONTROLLER_GEN):
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(BIN)/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/golangci-lint $@

# Helm's release flags: its version, and the Kubernetes version it assumes without a cluster.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) -X helm.sh/helm/v3/internal/version.metadata= \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_KUBE_VERSION_MINOR) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_KUBE_VERSION_MINOR)

# hack/kal is its own module, so KAL's dependencies stay out of go.mod; its go.mod must pin
# KAL_VERSION. Rebuilt when the driver changes.
$(KAL): hack/kal/main.go hack/kal/go.mod hack/kal/go.sum
	@v=$$(cd hack/kal && go list -m -f '{{.Version}}' sigs.k8s.io/kube-api-linter); test "$$v" = "$(KAL_VERSION)" || { \
	  echo "hack/kal/go.mod pins sigs.k8s.io/kube-api-linter $$v, not KAL_VERSION=$(KAL_VERSION):"; \
	  echo "  cd hack/kal && go get sigs.k8s.io/kube-api-linter@$(KAL_VERSION) && go mod tidy"; exit 1; }
	cd hack/kal && go build -o $@ .

$(KREW):
	GOBIN=$(BIN) go install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)
	mv $(BIN)/krew $@

$(VALIDATE_KREW):
	GOBIN=$(BIN) go install sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION)
	mv $(BIN)/validate-krew-manifest $@

$(HELM):
	GOBIN=$(BIN) go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(BIN)/helm $@

# helm-unittest's go.mod has a replace directive, so `go install module@version` refuses it:
# build it inside its downloaded module directory instead, and lay out the plugin directory.
$(HELM_UNITTEST):
	rm -rf $(HELM_PLUGINS)/unittest && mkdir -p $(HELM_PLUGINS)/unittest
	dir=$$(go mod download -json github.com/helm-unittest/helm-unittest@$(HELM_UNITTEST_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  test -n "$$dir" && cd "$$dir" && \
	  go build -trimpath -ldflags "-s -w -X github.com/helm-unittest/helm-unittest/internal/build.version=$(HELM_UNITTEST_VERSION:v%=%)" -o $@ ./cmd/helm-unittest
	printf 'name: "unittest"\nversion: "%s"\nusage: "unittest for helm charts"\ndescription: "helm-unittest %s, built from its Go module by make helm-unittest"\nignoreFlags: false\nplatformCommand:\n- command: "$$HELM_PLUGIN_DIR/%s"\n' \
	  "$(HELM_UNITTEST_VERSION:v%=%)" "$(HELM_UNITTEST_VERSION)" "$(notdir $@)" > $(HELM_PLUGINS)/unittest/plugin.yaml

##@ Release

# make release VERSION=vX.Y.Z writes a release into DIST with nothing but Go and helm (built
# from the Go module proxy): the manager's image for linux/amd64 and linux/arm64 as an OCI image
# layout, the chart pinned to the image's digest, the install bundle, the plugin's archives and
# krew manifest, SBOMs, release notes and SHA256SUMS (hack/release; docs/install.md#releases).
# The same commit and Go toolchain give the same bytes. It publishes nothing.
VERSION ?=
DIST ?= $(CURDIR)/dist
# The image's repository: what the chart and the install bundle name, with the digest.
RELEASE_IMAGE ?= ghcr.io/turnstile-dev/turnstile
# Where the plugin's archives will be published: the krew manifest's URIs.
RELEASE_DOWNLOAD_URL ?= https://github.com/turnstile-dev/turnstile/releases/download/{version}
# The tree built, the repository its commit is read from, and that commit: another commit's
# tree (git archive) is built with RELEASE_SOURCE=DIR RELEASE_COMMIT=REF.
RELEASE_SOURCE ?= $(CURDIR)
RELEASE_REPO ?= $(CURDIR)
RELEASE_COMMIT ?= HEAD
# true builds a tree with uncommitted changes (the tests' builds; never a real release).
RELEASE_ALLOW_DIRTY ?= false
# Some of the platforms only, comma-separated (e.g. linux/amd64): test/release's build of the
# previous release, which its upgrade runs on this machine, and the tests' build of this one
# (TEST_RELEASE_PLATFORMS); never a real release.
RELEASE_PLATFORMS ?=
# The platforms make test's release is built for (and CI's, .ci/run): the image's two, and the
# plugin for Windows as well (the platform whose syscalls differ most from Linux). make release
# builds six plugin platforms; each more costs CI about four minutes of cold compiling.
TEST_RELEASE_PLATFORMS ?= linux/amd64,linux/arm64,windows/amd64
RELEASE_TOOL := $(BIN)/turnstile-release

.PHONY: release
release: $(HELM) ## Build the release into dist/ (VERSION=vX.Y.Z): multi-arch OCI image, chart and install bundle pinned to it, plugin archives, krew manifest, SBOMs, notes, SHA256SUMS.
	@test -n "$(VERSION)" || { echo "make release needs VERSION=vX.Y.Z (e.g. make release VERSION=v0.2.0)"; exit 1; }
	cd hack/release && go build -o $(RELEASE_TOOL) .
	$(RELEASE_TOOL) --version $(VERSION) --source $(RELEASE_SOURCE) --repo $(RELEASE_REPO) --commit $(RELEASE_COMMIT) \
	  --out $(DIST) --image $(RELEASE_IMAGE) --download-url '$(RELEASE_DOWNLOAD_URL)' --helm $(HELM) --allow-dirty=$(RELEASE_ALLOW_DIRTY) --platforms '$(RELEASE_PLATFORMS)'

# print-VAR prints a variable's value (.ci/run reads TEST_RELEASE_PLATFORMS with it).
.PHONY: print-%
print-%:
	@echo '$($*)'
