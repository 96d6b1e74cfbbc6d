#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the Go module proxy into a cached directory.
#
# These machines reach the Go module proxy and nothing else that hosts Kubernetes binaries, so
# setup-envtest cannot download its tarballs. Instead we compile the binaries from source: a
# throwaway module requires k8s.io/kubernetes at the pinned version and replaces every staging
# module with its published release, and etcd's server module (itself a main package) is built
# the same way. The result is version-stamped and cached; it is rebuilt only when a pin changes.
#
# Every Kubernetes version of the support range builds this way (make k8s-bins-all, make
# test-versions): the throwaway module takes kubernetes' own `go` and `godebug` lines, so an
# older release compiles with the language version and runtime defaults it was released with,
# and a release whose go.mod needs a newer Go than this machine's is built with GOTOOLCHAIN set
# to an approved newer toolchain (KUBE_GOTOOLCHAIN, default go1.27.3: the go command takes it
# from the module proxy like a module). etcd does not depend on the Kubernetes version: it is
# built once per ETCD_VERSION into bin/k8s/etcd-v<version>-<os>-<arch> and copied from there.
#
# Usage: hack/build-k8s-bins.sh <output-dir>
# Env:   KUBE_VERSION (default 1.37.2; a pre-release as 1.38.0-beta.0), ETCD_VERSION (default
#        3.6.16), KUBE_GOTOOLCHAIN (default go1.27.3: used only when kubernetes' go.mod needs a
#        newer Go than the local one),
#        CONTROL_PLANE=1 also builds kube-scheduler and kube-controller-manager (the gated
#        workloads' e2e needs them; nothing else does, so they are built only when asked)
# Each binary's build time is appended to <output-dir>/.build-times (seconds).
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
OUT=${1:?usage: $0 <output-dir>}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STAMP="$OUT/.stamp"
WANT="kube=v${KUBE_VERSION} etcd=v${ETCD_VERSION} $(go env GOOS)/$(go env GOARCH)"

cmds=(kube-apiserver kubectl)
[[ "${CONTROL_PLANE:-0}" == 1 ]] && cmds+=(kube-scheduler kube-controller-manager)
fresh=false
[[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && fresh=true
# With a fresh stamp only what is missing is built (CONTROL_PLANE=1 after a plain build adds
# the two, nothing else); a stale stamp rebuilds everything and drops binaries of the old pin.
need=()
for c in "${cmds[@]}"; do
  $fresh && [[ -x "$OUT/$c" ]] || need+=("$c")
done
need_etcd=true
$fresh && [[ -x "$OUT/etcd" ]] && need_etcd=false
if [[ ${#need[@]} -eq 0 && $need_etcd == false ]]; then
  exit 0
fi
$fresh || rm -f "$OUT/kube-scheduler" "$OUT/kube-controller-manager"

log() { printf '[hack] %s\n' "$*" >&2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
# Times one build into .build-times: "<binary> <seconds> <go version>".
timed() {
  local name=$1 start=$SECONDS; shift
  "$@"
  echo "$name $((SECONDS - start)) $(go env GOVERSION)" >> "$OUT/.build-times"
}
# version_lt A B: A < B for Go versions as 1.26.8, 1.27.0, 1.27rc1 (the patch defaults to 0).
version_lt() {
  [[ "$1" != "$2" ]] && [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" == "$1" ]]
}

minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
staging_version="v0.${KUBE_VERSION#*.}"
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date} -X $pkg.gitCommit=modproxy-v${KUBE_VERSION}"
done

if [[ ${#need[@]} -gt 0 ]]; then
mkdir -p "$WORK/kube" && cd "$WORK/kube"
# The go.mod alone (the .mod file the proxy serves): `go mod download` of the module itself
# refuses one that needs a newer Go before GOTOOLCHAIN is chosen from it.
kube_gomod=$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" 2>/dev/null | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' || true)
[[ -f "$kube_gomod" ]] || { log "the Go module proxy does not serve k8s.io/kubernetes@v${KUBE_VERSION} (go list -m -versions k8s.io/kubernetes lists those it does)"; exit 1; }
kube_go=$(awk '$1 == "go" {print $2; exit}' "$kube_gomod")
local_go=$(GOTOOLCHAIN=local go env GOVERSION); local_go=${local_go#go}
if version_lt "$local_go" "$kube_go"; then
  export GOTOOLCHAIN=${KUBE_GOTOOLCHAIN:-go1.27.3}
  log "k8s.io/kubernetes@v${KUBE_VERSION} needs go ${kube_go}; this machine has ${local_go}: building with GOTOOLCHAIN=${GOTOOLCHAIN}"
fi
log "building ${need[*]} v${KUBE_VERSION} from the Go module proxy with $(go env GOVERSION) (first time: ~4 min for kube-apiserver and kubectl)"
go mod init turnstile.local/kubebuild >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@v${KUBE_VERSION}"
# Kubernetes' language version and runtime defaults (its `godebug default=goX` line), not this
# machine's: an older release then runs as it was released.
go mod edit -go="$kube_go"
awk '$1 == "godebug" && $2 != "(" {print $2}' "$kube_gomod" | while read -r d; do go mod edit -godebug="$d"; done
# Every `k8s.io/x => ./staging/src/k8s.io/x` replace in kubernetes' go.mod becomes `=> k8s.io/x v0.N.M`.
grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kube_gomod" | awk '{print $1}' | sort -u | while read -r mod; do
  go mod edit -replace="${mod}=${mod}@${staging_version}"
done
# Other dependencies need no pins: kubernetes' own go.mod requirements still apply under MVS;
# only its replace directives are ignored, which is what the loop above restores.
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for c in "${need[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
  printf ')\n'
} > tools.go
if ! go mod tidy 2> "$WORK/tidy.err"; then
  cat "$WORK/tidy.err" >&2
  # A module version the proxy does not serve (a new staging module of a pre-release, say) cannot
  # be built around: say which, rather than leave it in go's long import chains.
  missing=$(grep -oE '[^ ]+@v[^ :]+: reading [^ ]+: 40[34]' "$WORK/tidy.err" | cut -d: -f1 | sort -u | tr '\n' ' ' || true)
  [[ -n "$missing" ]] && log "k8s.io/kubernetes@v${KUBE_VERSION} needs module versions the Go module proxy does not serve: ${missing}- it cannot be built here"
  exit 1
fi
for c in "${need[@]}"; do
  timed "$c" go build -trimpath -ldflags "$ldflags" -o "$OUT/$c" "k8s.io/kubernetes/cmd/$c"
done
unset GOTOOLCHAIN
fi

if $need_etcd; then
  # One etcd per ETCD_VERSION for every Kubernetes version: taken from the shared cache, or from a
  # sibling version's directory built with the same pin, or built into the cache.
  goos=$(go env GOOS); goarch=$(go env GOARCH)
  etcd_cache="$(dirname "$OUT")/etcd-v${ETCD_VERSION}-${goos}-${goarch}"
  if [[ ! -x "$etcd_cache/etcd" ]]; then
    for d in "$(dirname "$OUT")"/*-"${goos}-${goarch}"; do
      if [[ -x "$d/etcd" && -f "$d/.stamp" ]] && grep -q " etcd=v${ETCD_VERSION} " "$d/.stamp"; then
        mkdir -p "$etcd_cache" && cp "$d/etcd" "$etcd_cache/etcd.tmp" && mv "$etcd_cache/etcd.tmp" "$etcd_cache/etcd"
        break
      fi
    done
  fi
  if [[ ! -x "$etcd_cache/etcd" ]]; then
    log "building etcd v${ETCD_VERSION} from the Go module proxy"
    mkdir -p "$WORK/etcd" "$etcd_cache" && cd "$WORK/etcd"
    go mod init turnstile.local/etcdbuild >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" >/dev/null 2>&1
    timed etcd go build -trimpath -ldflags "-s -w" -o "$etcd_cache/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$etcd_cache/etcd.tmp" "$etcd_cache/etcd"
  fi
  cp "$etcd_cache/etcd" "$OUT/etcd"
fi

echo "$WANT" > "$STAMP"
log "done: $("$OUT/kube-apiserver" --version), $("$OUT/etcd" --version | head -1)"
