#!/usr/bin/env bash
# Builds MetalLB's speaker and controller from its Go module into $1
# (default bin/metallb), and copies the module's CRDs (config/crd/bases,
# Apache-2.0, from go.universe.tf/metallb at the version below) into
# $1/crds, for the kernel test that moves a MetalLB cluster to svcnet
# (test/kernel/metallb_test.go). Nothing of MetalLB is vendored in this
# repository. A stamp skips a second run.
#
# The version is pinned here and nowhere else. v0.16.2 is the newest v0.16
# patch the Go module proxy lists, but it cannot be built from the proxy:
# it needs github.com/metallb/frr-k8s v0.0.27, whose zip the proxy refuses
# ("403 This module version is not available"). v0.16.1 needs frr-k8s
# v0.0.25, which the proxy serves.
set -euo pipefail
version=v0.16.1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/metallb}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.stamp
want=$(cat "$0" | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $out/speaker && -x $out/controller ]]; then
  echo "metallb: up to date in $out"
  exit 0
fi
# Outside this repository's module: go install pkg@version builds with
# MetalLB's own go.mod, not with svcnet's dependencies.
cd "$out"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "metallb: building speaker and controller $version into $out"
GOBIN=$out go install -trimpath -ldflags "-s -w" \
  "go.universe.tf/metallb/speaker@$version" "go.universe.tf/metallb/controller@$version"
src=$(go mod download -json "go.universe.tf/metallb@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
rm -rf "$out/crds"
mkdir -p "$out/crds"
cp "$src"/config/crd/bases/*.yaml "$src/LICENSE" "$out/crds/"
chmod -R u+w "$out/crds"
echo "$version" > "$out/VERSION"
echo "$want" > "$stamp"
echo "metallb: done"
