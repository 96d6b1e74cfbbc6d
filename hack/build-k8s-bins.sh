#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the Go module proxy into a cached directory.
#
# These machines reach the Go module proxy and nothing else that hosts Kubernetes binaries, so
# setup-envtest cannot download its tarballs. Instead we compile the binaries from source: a
# throwaway module requires k8s.io/kubernetes at the pinned version and replaces every staging
# module with its published release, and etcd's server module (itself a main package) is built
# the same way. The result is version-stamped and cached; it is rebuilt only when a pin changes.
#
# Usage: hack/build-k8s-bins.sh <output-dir>
# Env:   KUBE_VERSION (default 1.36.3), ETCD_VERSION (default 3.6.16),
#        CONTROL_PLANE=1 also builds kube-scheduler and kube-controller-manager (the gated
#        workloads' e2e needs them; nothing else does, so they are built only when asked)
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.36.3}
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

minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
staging_version="v0.${KUBE_VERSION#*.}"
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date} -X $pkg.gitCommit=modproxy-v${KUBE_VERSION}"
done

if [[ ${#need[@]} -gt 0 ]]; then
log "building ${need[*]} v${KUBE_VERSION} from the Go module proxy (first time: ~4 min for kube-apiserver and kubectl)"
mkdir -p "$WORK/kube" && cd "$WORK/kube"
go mod init turnstile.local/kubebuild >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@v${KUBE_VERSION}"
kube_gomod=$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f "$kube_gomod" ]] || { log "could not download k8s.io/kubernetes@v${KUBE_VERSION}"; exit 1; }
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
go mod tidy
for c in "${need[@]}"; do
  go build -trimpath -ldflags "$ldflags" -o "$OUT/$c" "k8s.io/kubernetes/cmd/$c"
done
fi

if $need_etcd; then
log "building etcd v${ETCD_VERSION} from the Go module proxy"
mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
go mod init turnstile.local/etcdbuild >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" >/dev/null 2>&1
go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
fi

echo "$WANT" > "$STAMP"
log "done: $("$OUT/kube-apiserver" --version), $("$OUT/etcd" --version | head -1)"
