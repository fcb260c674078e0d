#!/usr/bin/env bash
# Builds the real Kubernetes control plane that the operator's tests run against —
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (Kubernetes
# v1.36.x), etcd (v3.6.x), KWOK and Kueue — from the Go module proxy into a versioned
# cache outside the repository, once per machine. Test infrastructure only: nothing here
# is linked into or shipped with Bulwark.
#
#   scripts/k8s-control-plane.sh [--kwok] [--kueue]          build what is missing, print
#                                                             the bin dir
#   scripts/k8s-control-plane.sh --print [--kwok] [--kueue]  print the bin dir, build
#                                                             nothing (exit 1 when the
#                                                             cache is incomplete)
#
# KWOK (5,000 simulated nodes for bench/operator) is built only with --kwok, Kueue (the
# real Kueue controller for the operator's `scheduling.gang: kueue` e2e test) only with
# --kueue. A fresh build with Kueue took 1,507 s and 1,566 s on 2 cores beside other work
# (28 November 2026, empty Go caches); KWOK takes about 3 minutes more. --kueue also
# copies the manifests the test needs out of Kueue's module — its CRDs and webhook
# configurations — into <cache>/kueue/ (next to bin/).
#
# Not built: Volcano. The Go module proxy refuses it (`go list -m -versions
# volcano.sh/volcano` -> "reading https://proxy.golang.org/volcano.sh/volcano/@v/list: 403
# Forbidden ... This module version is not available."; github.com/volcano-sh/volcano
# likewise), so the `gang: volcano` test binds pods with a stand-in.
#
# Cache: ${BULWARK_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/k8s}/<versions>/bin.
# A finished component leaves a stamp file, so an interrupted build resumes where it
# stopped and a complete cache costs nothing.
#
# Kubernetes' own go.mod replaces its staging modules (k8s.io/api, k8s.io/client-go,
# ...) with paths inside its repository, so `go install k8s.io/kubernetes/cmd/...@v`
# is refused. A wrapper module requires k8s.io/kubernetes at the tag and pins every
# staging module to the matching published v0.X.Y; the list is read from that tag's
# own go.mod. etcd's binary is a one-line main around etcdmain (the root module of etcd
# has the same replace problem).
set -euo pipefail
K8S_VERSION="${BULWARK_K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${BULWARK_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${BULWARK_KWOK_VERSION:-v0.8.0}"
KUEUE_VERSION="${BULWARK_KUEUE_VERSION:-v0.17.0}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE_ROOT="${BULWARK_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/k8s}"
DIR="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
BIN="$DIR/bin"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
PRINT=0
OPTIONAL=""  # the optional components' flags, for messages
for arg in "$@"; do
  case "$arg" in
    --print) PRINT=1 ;;
    --kwok) COMPONENTS+=(kwok); OPTIONAL+=" --kwok" ;;
    --kueue) COMPONENTS+=(kueue); OPTIONAL+=" --kueue" ;;
    *) echo "k8s-control-plane: unknown argument '$arg' (use --print, --kwok, --kueue)" >&2; exit 2 ;;
  esac
done

# A component's stamp. Kueue's names its version: the cache directory's name does not
# (adding Kueue must not invalidate the rest of the cache).
stamp() {
  case "$1" in
    kueue) echo "$BIN/.kueue-$KUEUE_VERSION.done" ;;
    *) echo "$BIN/.$1.done" ;;
  esac
}
complete() {
  local c
  for c in "${COMPONENTS[@]}"; do [ -f "$(stamp "$c")" ] || return 1; done
}
if [ "$PRINT" = 1 ]; then
  complete && { echo "$BIN"; exit 0; }
  echo "k8s-control-plane: cache $BIN is incomplete; run scripts/k8s-control-plane.sh$OPTIONAL" >&2
  exit 1
fi
if complete; then echo "$BIN"; exit 0; fi

command -v go >/dev/null 2>&1 || {
  echo "k8s-control-plane: 'go' is not on PATH (Go 1.26+ is needed to build the test control plane)" >&2
  exit 1
}
mkdir -p "$BIN" "$DIR/src"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath"
export CGO_ENABLED=0
log() { echo "k8s-control-plane: $*" >&2; }
timed() {  # timed NAME CMD...: runs CMD, logs its duration, stamps NAME done
  local name="$1" start=$SECONDS; shift
  "$@"
  touch "$(stamp "$name")"
  log "$name built in $((SECONDS - start)) s"
}

build_kubernetes() {
  local w="$DIR/src/kubernetes" mod staging
  mkdir -p "$w"
  mod="$(curl -fsS "${GOPROXY_URL:-https://proxy.golang.org}/k8s.io/kubernetes/@v/$K8S_VERSION.mod")" || {
    log "could not read k8s.io/kubernetes@$K8S_VERSION's go.mod from the module proxy"; return 1; }
  # Staging modules: the k8s.io/* requirements at v0.0.0 that the replace block maps
  # to ./staging/src/....
  staging="$(printf '%s\n' "$mod" | awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' | sort -u)"
  {
    echo "module bulwark.dev/testinfra/kubernetes"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m $STAGING_VERSION"; done
    echo ")"
  } >"$w/go.mod"
  cat >"$w/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "$w" && go mod tidy >/dev/null)
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [ -f "$BIN/.$c.done" ] && continue
    timed "$c" bash -c "cd '$w' && go build -ldflags '$ld' -o '$BIN/$c' k8s.io/kubernetes/cmd/$c"
  done
}

build_etcd() {
  local w="$DIR/src/etcd"
  mkdir -p "$w"
  cat >"$w/go.mod" <<GO
module bulwark.dev/testinfra/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GO
  cat >"$w/main.go" <<'GO'
// Command etcd is etcd's server, built from go.etcd.io/etcd/server/v3 (etcd's root
// module, whose main.go is this call, replaces its submodules with local paths).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$w" && go mod tidy >/dev/null)
  timed etcd bash -c "cd '$w' && go build -ldflags '-s -w' -o '$BIN/etcd' ."
}

build_kwok() {
  timed kwok bash -c "GOBIN='$BIN' go install -ldflags '-s -w' sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

# Kueue's controller manager, and from the same module version (in the Go module cache
# after the install) the manifests the e2e test applies: the CRDs and the webhook
# configurations (src/k8s/testing/kueue.h rewrites their clientConfig for loopback).
install_kueue() {
  local mod out="$DIR/kueue"
  rm -f "$BIN"/.kueue-*.done  # one Kueue at a time: bin/kueue is replaced
  GOBIN="$BIN" go install -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  mod="$(go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION/config/components"
  [ -d "$mod" ] || { log "no $mod after installing kueue@$KUEUE_VERSION"; return 1; }
  rm -rf "$out"
  mkdir -p "$out/crd" "$out/webhook"
  # The module cache is read-only: copy the contents, not the modes.
  install -m 0644 "$mod"/crd/bases/*.yaml "$out/crd/"
  install -m 0644 "$mod/webhook/manifests.yaml" "$out/webhook/"
  echo "$KUEUE_VERSION" >"$out/VERSION"
}
build_kueue() {
  timed kueue install_kueue
}

start=$SECONDS
[ -f "$BIN/.etcd.done" ] || build_etcd
build_kubernetes
if [[ " ${COMPONENTS[*]} " == *" kwok "* ]] && [ ! -f "$BIN/.kwok.done" ]; then build_kwok; fi
if [[ " ${COMPONENTS[*]} " == *" kueue "* ]] && [ ! -f "$(stamp kueue)" ]; then build_kueue; fi
log "control plane ready in $BIN ($((SECONDS - start)) s)"
echo "$BIN"
