#!/usr/bin/env bash
# Installs the Debian packages svcnet's tests and `svcnet up` use, only the
# ones missing: iptables, nftables, conntrack, iproute2, curl (the tour's and
# the walkthrough's client requests by name) and util-linux (for
# unshare). Needs root for apt-get; prints what to install otherwise.
set -euo pipefail
need=()
for pair in iptables:iptables iptables-restore:iptables nft:nftables conntrack:conntrack ip:iproute2 curl:curl unshare:util-linux; do
  cmd=${pair%%:*} pkg=${pair#*:}
  if ! command -v "$cmd" >/dev/null 2>&1 && [[ " ${need[*]-} " != *" $pkg "* ]]; then
    need+=("$pkg")
  fi
done
if ((${#need[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "install-deps: missing packages: ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "install-deps: apt-get install ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
