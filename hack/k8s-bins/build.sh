#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kubectl and kube-proxy
# from the Go modules pinned in this folder's go.mod, and CoreDNS from
# hack/coredns's, into $1 (default bin/k8s). A stamp file records what was built from which go.mod/go.sum, so
# a second run with nothing changed does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../bin/k8s}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp="$out/.stamp"
coredns_src=$here/../coredns
want=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/etcd/main.go" \
  "$coredns_src/go.mod" "$coredns_src/go.sum" "$coredns_src/main.go" | sha256sum | cut -d' ' -f1)
bins="etcd coredns kube-apiserver kube-controller-manager kubectl kube-proxy"
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  missing=0
  for b in $bins; do [[ -x $out/$b ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "k8s-bins: up to date in $out"
    exit 0
  fi
fi
cd "$here"
export CGO_ENABLED=0
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${k8s_version#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
echo "k8s-bins: building etcd into $out"
go build -trimpath -ldflags "-s -w" -o "$out/etcd" ./etcd
coredns_version=$(cd "$coredns_src" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
echo "k8s-bins: building coredns $coredns_version into $out"
# `coredns -version` names the module version it was built from.
(cd "$coredns_src" && go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" -o "$out/coredns" .)
# Stamp the version the way Kubernetes' own release build does, so that
# `kubectl version` and the apiserver's /version tell the truth.
flags=(-trimpath -ldflags "-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean")
for cmd in kube-apiserver kube-controller-manager kubectl kube-proxy; do
  echo "k8s-bins: building $cmd into $out (kube-apiserver takes minutes when cold)"
  go build "${flags[@]}" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd"
done
echo "$want" > "$stamp"
echo "k8s-bins: done"
