#!/usr/bin/env bash
# Unpacks FRR (the router `svcnet up --lb-announce=bgp` and the BGP tests
# run inside network namespaces they make) from Debian's packages into $1
# (default bin/frr): `apt-get download` and `dpkg-deb -x`, so no
# maintainer script runs, no service is started and nothing is installed on
# this machine. The daemons run from there with LD_LIBRARY_PATH set to the
# unpacked libraries (localcluster/frr). Only the libraries this
# machine lacks are unpacked beside FRR. A stamp skips a second run.
set -euo pipefail
# The unpacked folders keep the modes the packages and this script give
# them, whatever the builder's umask: under 077 a daemon that drops root
# could not reach its own files.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/frr}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.stamp
want=$( (cat "$0"; dpkg --print-architecture) | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $out/root/usr/lib/frr/bgpd ]]; then
  echo "frr: up to date in $out"
  exit 0
fi
apt_opts=(-qq)
if [[ $(id -u) == 0 ]]; then
  apt_opts+=(-o APT::Sandbox::User=root)
fi
if ! apt-cache show --no-all-versions frr >/dev/null 2>&1; then
  if [[ $(id -u) != 0 ]]; then
    echo "frr: apt knows no packages; run apt-get update as root" >&2
    exit 1
  fi
  apt-get update -qq
fi
# FRR and the libraries it needs that this machine does not have.
pkgs=(frr)
for lib in libyang2 libc-ares2 libjson-c5 libprotobuf-c1 libpcre2-8-0 libcap2 libreadline8 libpam0g libcrypt1; do
  if ! dpkg -s "$lib" >/dev/null 2>&1 && apt-cache show --no-all-versions "$lib" >/dev/null 2>&1; then
    pkgs+=("$lib")
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${apt_opts[@]}" "${pkgs[@]}")
rm -rf "$out/root"
mkdir -p "$out/root"
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$out/root"
done
echo "$want" >"$stamp"
echo "frr: ${pkgs[*]} unpacked into $out/root"
