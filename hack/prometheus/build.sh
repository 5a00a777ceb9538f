#!/usr/bin/env bash
# Builds Prometheus and promtool from Prometheus' Go module into $1
# (default bin/prometheus), for the tests of svcnet's alerting rules and
# dashboards (internal/monitoring: promtool test rules; test/e2e: a real
# Prometheus scraping svcnet up). Nothing of Prometheus is vendored in
# this repository. A stamp skips a second run.
#
# The version is pinned here and nowhere else: v0.316.0 is the Go module
# of Prometheus 3.x that the Go module proxy serves. remove_all_sd leaves
# out the cloud service discoveries (file and static configs stay), which
# the tests do not use and which double the build.
set -euo pipefail
version=v0.316.0
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/prometheus}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.stamp
want=$(cat "$0" | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $out/prometheus && -x $out/promtool ]]; then
  echo "prometheus: up to date in $out"
  exit 0
fi
# Outside this repository's module: go install pkg@version builds with
# Prometheus' own go.mod, not with svcnet's dependencies.
cd "$out"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "prometheus: building prometheus and promtool $version into $out"
GOBIN=$out go install -trimpath -ldflags "-s -w" -tags remove_all_sd \
  "github.com/prometheus/prometheus/cmd/prometheus@$version" "github.com/prometheus/prometheus/cmd/promtool@$version"
echo "$version" > "$out/VERSION"
echo "$want" > "$stamp"
echo "prometheus: done"
