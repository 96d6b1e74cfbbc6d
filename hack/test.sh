#!/usr/bin/env bash
# Runs every test, all with -race: pure unit tests, envtest integration suites against a real
# kube-apiserver + etcd, the benchmark harness at smoke size, and e2e tests that drive the real
# manager binary with the real kubectl. Prints one summary line: "N passed, N failed, N skipped".
# Expects KUBEBUILDER_ASSETS (set by the Makefile after `make k8s-bins`).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KUBEBUILDER_ASSETS:?run through make test}"
go build -o bin/testsummary ./hack/testsummary
pure=$(go list ./internal/queue/... ./internal/deadlock/... ./internal/lockkey/... ./internal/dashboard/... ./pkg/workdir/...)
rest=$(go list ./... | grep -v -x -F -f <(echo "$pure"))
status=0
{
  go test -json -race -count=1 $pure || true
  # hack/release is its own module (its dependencies stay out of go.mod): its unit tests.
  (cd hack/release && go test -json -count=1 ./...) || true
  go test -json -race -count=1 -timeout 25m -p 2 $rest || true
} | bin/testsummary || status=$?
exit $status
