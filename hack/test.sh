#!/usr/bin/env bash
# Runs every test, all with -race but the nested modules': pure unit tests, envtest integration suites against a real
# kube-apiserver + etcd, the benchmark harness at smoke size, and e2e tests that drive the real
# manager binary with the real kubectl. Prints one summary line: "N passed, N failed, N skipped".
# Expects KUBEBUILDER_ASSETS (set by the Makefile after `make k8s-bins`).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KUBEBUILDER_ASSETS:?run through make test}"
go build -o bin/testsummary ./hack/testsummary
pure=$(go list ./internal/queue/... ./internal/deadlock/... ./internal/lockkey/... ./internal/dashboard/... ./pkg/workdir/...)
rest=$(go list ./... | grep -v -x -F -f <(echo "$pure"))
# Modules of their own: hack/release (make release's dependencies stay out of go.mod) and
# test/gitopsfreeze (Flux's and Helm's own libraries, which would move the root module's pins).
nested="hack/release test/gitopsfreeze"
status=0
{
  go test -json -race -count=1 $pure || true
  go test -json -race -count=1 -timeout 25m -p 2 $rest || true
  # Modules of their own (each go.mod says why), in the same summary. Without -race: their
  # specs drive the API server with other projects' libraries and have no concurrency of their
  # own, and compiling Helm and Flux with -race costs CI minutes for nothing.
  for m in $nested; do
    (cd "$m" && go test -json -count=1 -timeout 10m ./...) || true
  done
} | bin/testsummary || status=$?
exit $status
