#!/usr/bin/env bash
# `make images`: builds svcnet's container images as OCI archives into $1
# (default bin/oci), without a Docker daemon:
#
#   svcnet.tar        ghcr.io/svcnet-io/svcnet, the manager
#   svcnet-agent.tar  ghcr.io/svcnet-io/svcnet-agent, the node agent
#   digests.txt       each archive's image digest
#
# The svcnet binary is built static (CGO_ENABLED=0, -trimpath, no build
# ID or VCS stamp) with the version $VERSION; root.sh assembles each
# image's root (the agent's from Debian packages, apt-get download and
# dpkg-deb -x, cached in $1/.debs); this folder's Go module writes the
# layers and archives with go-containerregistry, with fixed time stamps
# and sorted, root-owned tar entries, so the same inputs give the same
# digests. A stamp of the inputs makes a second run with nothing changed
# do nothing.
set -euo pipefail
# An image's folders and files keep the modes its packages and this
# script give them, whatever the builder's umask: under 077 a container
# user other than root could not reach its own programs.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/oci}
version=${VERSION:-devel}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.stamp

# inputs is everything the images are made of, bar the Debian archive's
# contents (apt's candidate versions at build time, recorded in
# <root>.packages).
inputs() {
  (cd "$repo" && git ls-files -z -- ':!:docs' ':!:*.md' ':!:test' | LC_ALL=C sort -z | xargs -0 cat 2>/dev/null) || true
  (cd "$repo" && git status --porcelain -- ':!:docs' ':!:*.md' ':!:test' 2>/dev/null) || true
  echo "$version"
  go version
  dpkg --print-architecture
}
want=$(inputs | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -f $out/svcnet.tar && -f $out/svcnet-agent.tar ]]; then
  echo "images: up to date in $out"
  cat "$out/digests.txt"
  exit 0
fi

work=$out/.build
rm -rf "$work"
mkdir -p "$work/roots" "$work/bin"
trap 'rm -rf "$work"' EXIT

start=$SECONDS
echo "images: building svcnet and svcnet-agent $version (static)"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -ldflags "-s -w -buildid= -X github.com/svcnet-io/svcnet/internal/platform/version.Version=$version" \
  -o "$work/bin/" ./cmd/svcnet ./cmd/svcnet-agent)
for image in svcnet svcnet-agent; do
  "$here/root.sh" "$image" "$work/roots/$image" "$out/.debs"
done
cp "$work/roots/svcnet-agent.packages" "$out/svcnet-agent.packages"
(cd "$here" && go run . -binaries "$work/bin" -roots "$work/roots" -out "$out" -version "$version")
echo "$want" >"$stamp"
echo "images: built in $((SECONDS - start))s"
