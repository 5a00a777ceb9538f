#!/usr/bin/env bash
# Assembles the root filesystem of one of svcnet's images, bar the svcnet
# binary, into $2. Both have the passwd, group and nsswitch.conf of base/,
# /tmp and /run. `root.sh svcnet ROOT` is the manager's: nothing more.
# `root.sh svcnet-agent ROOT [DEBS]` is the agent's, with the Debian
# packages of agent.packages and everything
# they depend on (no recommends), unpacked with `dpkg-deb -x` (no
# maintainer script runs, nothing is installed on this machine), /usr
# merged as Debian 12 does, iptables pointing at iptables-nft as Debian's
# alternatives choose, and the passwd, group and nsswitch.conf of base/.
# Packages are fetched with `apt-get download` into DEBS (default
# ROOT.debs) and kept there. Both `make images` (build.sh) and the
# Dockerfile run this script, so the two builds hold the same files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: root.sh svcnet|svcnet-agent ROOT [DEBS]"
image=${1:?$usage}
root=${2:?$usage}

# base makes what every image has.
base() {
  install -d -m 0755 "$root"/etc "$root"/run "$root"/var
  install -d -m 1777 "$root"/tmp
  ln -s ../run "$root/var/run"
  install -m 0644 "$here"/base/passwd "$here"/base/group "$here"/base/nsswitch.conf "$root/etc/"
}

case $image in
svcnet)
  rm -rf "$root"
  mkdir -p "$root"
  base
  exit 0
  ;;
svcnet-agent) ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac

debs=${3:-$root.debs}
mkdir -p "$debs"
debs=$(cd "$debs" && pwd)

apt_opts=(-qq)
if [[ $(id -u) == 0 ]]; then
  # Downloads land in $debs, which apt's sandbox user may not reach.
  apt_opts+=(-o APT::Sandbox::User=root)
fi

mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/agent.packages")

# specs prints name=version of each package wanted and of all it depends
# on, at apt's candidate versions, sorted.
specs() {
  local p
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${wanted[@]}" |
    grep -v '^[[:space:]<]' | LC_ALL=C sort -u |
    while read -r p; do
      echo "$p=$(apt-cache show --no-all-versions "$p" | sed -n 's/^Version: //p' | head -1)"
    done
}

# deb_file prints the downloaded file of name=version, if any.
deb_file() {
  local name=${1%%=*} version=${1#*=}
  compgen -G "$debs/${name}_${version//:/%3a}_*.deb" | head -1 || true
}

fetch() {
  local spec missing=()
  for spec in "${all[@]}"; do
    [[ -n $(deb_file "$spec") ]] || missing+=("$spec")
  done
  if ((${#missing[@]} > 0)); then
    echo "images: downloading ${missing[*]}"
    (cd "$debs" && apt-get "${apt_opts[@]}" download "${missing[@]}")
  fi
}

if ! apt-cache show --no-all-versions "${wanted[0]}" >/dev/null 2>&1; then
  apt-get update -qq # a fresh machine or container has no lists
fi
mapfile -t all < <(specs)
if ! fetch; then
  echo "images: downloading failed; apt-get update and once more"
  apt-get update -qq
  mapfile -t all < <(specs)
  fetch
fi

rm -rf "$root"
mkdir -p "$root"
for spec in "${all[@]}"; do
  dpkg-deb -x "$(deb_file "$spec")" "$root"
done
printf '%s\n' "${all[@]}" >"$root.packages" # what went in, for the build's record

# Documentation and the packages' own metadata are not needed at run time.
rm -rf "$root"/usr/share/{doc,man,info,lintian,bug} "$root"/etc/{init.d,logrotate.d}

# Debian 12 merges /bin, /sbin and /lib* into /usr; dpkg-deb -x does not.
for d in bin sbin lib lib64; do
  if [[ -d $root/$d && ! -L $root/$d ]]; then
    mkdir -p "$root/usr/$d"
    cp -a "$root/$d/." "$root/usr/$d/"
    rm -rf "${root:?}/$d"
  fi
  mkdir -p "$root/usr/$d"
  ln -s "usr/$d" "$root/$d"
done

# What update-alternatives would make: the nft backend of iptables.
for t in iptables ip6tables; do
  for s in "" -restore -save; do
    ln -sf "$t-nft$s" "$root/usr/sbin/$t$s"
  done
done

base
