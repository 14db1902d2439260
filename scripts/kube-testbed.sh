#!/usr/bin/env bash
# Builds the real Kubernetes programs duet's Kubernetes tests run (etcd, kube-apiserver,
# kube-scheduler) from the Go module proxy at the release tools/kube-testbed/go.mod pins, into
# $HOME/.cache/duet-kube/<release>/bin, once: a later call finds them and only prints the
# folder. Prints the folder on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
module="$here/tools/kube-testbed"
release="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$module/go.mod")"
if [ -z "$release" ]; then
  echo "error: $module/go.mod requires no k8s.io/kubernetes" >&2
  exit 1
fi
out="${DUET_KUBE_BIN:-$HOME/.cache/duet-kube/$release/bin}"
stamp="$(cat "$module/go.mod" "$module/go.sum" "$module/etcd/main.go" "$0" | sha256sum | cut -c1-16)"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] \
  && [ -x "$out/etcd" ] && [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-scheduler" ]; then
  echo "$out"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain (go) is needed to build Kubernetes $release for the tests" >&2
  exit 1
fi
echo "==> building etcd, kube-apiserver and kube-scheduler $release into $out (once; about 10 minutes on 2 cores)" >&2
start=$SECONDS
mkdir -p "$out"
rm -f "$out/.stamp"
version="-X k8s.io/component-base/version.gitVersion=$release -X k8s.io/component-base/version.gitMajor=1"
version="$version -X k8s.io/component-base/version.gitMinor=$(echo "$release" | cut -d. -f2)"
(
  cd "$module"
  export CGO_ENABLED=0 GOFLAGS=-mod=readonly
  go build -trimpath -ldflags "-s -w $version" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
  go build -trimpath -ldflags "-s -w" -o "$out/etcd" ./etcd
)
echo "$stamp" >"$out/.stamp"
echo "    built in $((SECONDS - start)) s" >&2
echo "$out"
