#!/usr/bin/env bash
# Runs the suites that depend on the API server against every Kubernetes version of the support
# range (docs/install.md, "Supported Kubernetes versions"), each with that version's own
# kube-apiserver, etcd, kubectl, kube-scheduler and kube-controller-manager (hack/build-k8s-bins.sh,
# cached in bin/k8s/<version>-<os>-<arch>), and writes a table of the results.
#
# Per version (SUITES=full, make test-versions):
#   install     the chart (helm install, its mutating policies as .Capabilities says) and the
#               bundle a user of that version installs (framework.BundleFor)
#   admission   who may do what, as deployed (test/admission), and the validating-only install
#               (test/validatingonly)
#   deployed    the manager binary as its ServiceAccount under the policies (test/deployed)
#   e2e         the core e2e with that version's kubectl (test/e2e: kubectl and the plugin)
#   gated       gated Pods and Jobs, full or validating-only (test/gated)
#   faults      the fault classes that depend on the API server: its restart, and a relist
#               after 410 Gone (test/faults)
#   watch       the watch decoder and the relister against that server's watch and watch-list
#               (internal/watchjson, pkg/client)
# SUITES=ci keeps install, admission, gated, faults and watch (what differs by version; e2e and
# deployed run on the default version in make test).
# On 1.34 and 1.35, where MutatingAdmissionPolicy is beta and off, the install, admission and
# gated suites run a second time with its v1beta1 turned on, as an admin would
# (the row "<version> +v1beta1"), unless BETA=0.
#
# Usage: hack/test-versions.sh VERSION...   (make test-versions KUBE_VERSIONS="1.33.13 ...")
# Env:   SUITES=full|ci, BETA=1|0, OUT=bin/versions (logs, summary.md),
#        JOBS=N runs N versions at once, each in OUT/<version> (make test-versions-ci runs its
#        two at once: a suite spends most of its time waiting on its API server, so two
#        versions side by side take little longer than one)
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -gt 0 ]] || { echo "usage: $0 VERSION..." >&2; exit 2; }
SUITES=${SUITES:-full}
BETA=${BETA:-1}
OUT=${OUT:-bin/versions}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
goos=$(go env GOOS); goarch=$(go env GOARCH)
JOBS=${JOBS:-1}
[[ -n "${TESTSUMMARY_BUILT:-}" ]] || go build -o bin/testsummary ./hack/testsummary

# JOBS > 1: each version in a process of its own (this script, JOBS=1), its lines prefixed
# with it as they come, then one table of them all.
if [[ $JOBS -gt 1 && $# -gt 1 ]]; then
  pids=() versions=("$@") failed=0 running=0
  for version in "${versions[@]}"; do
    if [[ $running -ge $JOBS ]]; then
      wait -n || true
      running=$((running - 1))
    fi
    mkdir -p "$OUT/$version"
    (OUT="$OUT/$version" JOBS=1 TESTSUMMARY_BUILT=1 "$0" "$version" 2>&1 | sed -u "s/^/[$version] /") &
    pids+=($!) running=$((running + 1))
  done
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  {
    echo "| Kubernetes | suite | passed | failed | skipped | seconds |"
    echo "| --- | --- | ---: | ---: | ---: | ---: |"
    for version in "${versions[@]}"; do
      if [[ -f "$OUT/$version/summary.md" ]]; then tail -n +3 "$OUT/$version/summary.md"; else echo "| $version | (did not run) | 0 | 1 | 0 | 0 |"; fi
    done
  } > "$OUT/summary.md"
  read -r p f s <<<"$(awk -F'|' 'NR > 2 { p += $4; f += $5; s += $6 } END { print p+0, f+0, s+0 }' "$OUT/summary.md")"
  echo
  cat "$OUT/summary.md"
  echo
  echo "test-versions: ${p} passed, ${f} failed, ${s} skipped"
  [[ $f -eq 0 ]]
  exit
fi

declare -A pkgs=(
  [install]="./test/install/"
  [admission]="./test/admission/ ./test/validatingonly/"
  [deployed]="./test/deployed/"
  [e2e]="./test/e2e/"
  [gated]="./test/gated/"
  [faults]="./test/faults/"
  [watch]="./internal/watchjson/ ./pkg/client/"
)
declare -A focus=(
  [e2e]="Turnstile, driven with kubectl|The kubectl turnstile plugin"
  [faults]="API server restart|relist after 410"
)
case "$SUITES" in
  full) order=(install admission deployed e2e gated faults watch) ;;
  ci) order=(install admission gated faults watch) ;;
  *) echo "SUITES=$SUITES: want full or ci" >&2; exit 2 ;;
esac
beta_suites=(install admission gated)
beta_args="--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true"

summary="$OUT/summary.md"
{
  echo "| Kubernetes | suite | passed | failed | skipped | seconds |"
  echo "| --- | --- | ---: | ---: | ---: | ---: |"
} > "$summary"
total_failed=0 total_passed=0 total_skipped=0

# run_suite ROW VERSION SUITE [APISERVER_ARGS]: runs one suite against one version's binaries,
# appends its row.
run_suite() {
  local row=$1 version=$2 suite=$3 apiserver_args=${4:-} assets log start args=() line
  assets="$PWD/bin/k8s/${version}-${goos}-${goarch}"
  log="$OUT/${row// /}-${suite}.log"
  [[ -n "${focus[$suite]:-}" ]] && args=(-args "-ginkgo.focus=${focus[$suite]}")
  start=$SECONDS
  # shellcheck disable=SC2086
  KUBEBUILDER_ASSETS="$assets" TURNSTILE_KUBECTL="$assets/kubectl" TURNSTILE_KUBE_APISERVER_ARGS="$apiserver_args" \
    go test -json -race -count=1 -timeout 30m -p 1 ${pkgs[$suite]} "${args[@]}" 2>&1 | bin/testsummary > "$log"
  line=$(tail -1 "$log")
  local p f s
  read -r p f s <<<"$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' <<<"$line")"
  p=${p:-0} f=${f:-1} s=${s:-0}
  total_passed=$((total_passed + p)) total_failed=$((total_failed + f)) total_skipped=$((total_skipped + s))
  echo "| $row | $suite | $p | $f | $s | $((SECONDS - start)) |" >> "$summary"
  printf '%-22s %-10s %s (%ss; %s)\n' "$row" "$suite" "$line" "$((SECONDS - start))" "$log"
  if [[ $f -gt 0 ]]; then grep -a -E "^FAILED:|\[FAIL\]" "$log" | head -20; fi
}

for version in "$@"; do
  assets="bin/k8s/${version}-${goos}-${goarch}"
  if [[ ! -x "$assets/kube-apiserver" || ! -x "$assets/kube-controller-manager" ]]; then
    echo "missing $assets: make k8s-bins-version KUBE_VERSION=$version (hack/build-k8s-bins.sh)" >&2
    echo "| $version | (binaries) | 0 | 1 | 0 | 0 |" >> "$summary"
    total_failed=$((total_failed + 1))
    continue
  fi
  echo "== Kubernetes $version ($("$assets/kube-apiserver" --version))"
  for suite in "${order[@]}"; do
    run_suite "$version" "$version" "$suite"
  done
  minor=${version#1.}; minor=${minor%%.*}
  if [[ $BETA == 1 && ( $minor == 34 || $minor == 35 ) ]]; then
    echo "== Kubernetes $version with MutatingAdmissionPolicy v1beta1 enabled"
    for suite in "${beta_suites[@]}"; do
      run_suite "$version +v1beta1" "$version" "$suite" "$beta_args"
    done
  fi
done

echo
cat "$summary"
echo
echo "test-versions: ${total_passed} passed, ${total_failed} failed, ${total_skipped} skipped"
[[ $total_failed -eq 0 ]]
