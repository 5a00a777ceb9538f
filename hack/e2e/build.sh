#!/usr/bin/env bash
# Builds upstream Kubernetes' e2e.test (this folder's e2e_test.go: the
# framework and the [sig-network] tests) and the ginkgo CLI at the version
# compiled into it, from the Go modules pinned in this folder's go.mod, into
# $1 (default bin/e2e). A stamp file records what was built from which
# inputs, so a second run with nothing changed does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../bin/e2e}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp="$out/.stamp"
want=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/e2e_test.go" "$here/tools.go" | sha256sum | cut -d' ' -f1)
bins="e2e.test ginkgo"
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  missing=0
  for b in $bins; do [[ -x $out/$b ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "e2e-bins: up to date in $out"
    exit 0
  fi
fi
cd "$here"
# The same settings as hack/k8s-bins, whose go.mod pins the same versions,
# so the packages both build come from one build cache.
export CGO_ENABLED=0
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
ginkgo_version=$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
minor=${k8s_version#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
rm -f "$stamp"
echo "e2e-bins: building e2e.test of k8s.io/kubernetes $k8s_version into $out (minutes when cold)"
go test -c -trimpath -ldflags "-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean" \
  -o "$out/e2e.test" .
echo "e2e-bins: building the ginkgo CLI $ginkgo_version into $out"
go build -trimpath -ldflags "-s -w" -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
echo "$want" > "$stamp"
echo "e2e-bins: done"
