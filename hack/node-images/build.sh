#!/usr/bin/env bash
# Builds the filesystems of the container images that `svcnet up`'s
# simulated nodes run as real programs (docs/operations.md, "Images the
# simulated nodes run") into $1 (default bin/images), one folder each:
#
#   <name>/image.json  the repositories it stands for, its OCI config and
#                      the folders of this machine it sees read-only,
#                      merged under its own files (hostDirs)
#   <name>/rootfs/     the image's own files, placed at / of the container
#
# Nothing is downloaded but Go modules and Debian packages: packages are
# fetched with `apt-get download` and unpacked with `dpkg-deb -x`, so no
# maintainer script runs and nothing is installed on this machine. Go
# programs are built from hack/k8s-bins's module (agnhost), hack/coredns's
# and the main module's (pause), sharing their download and build caches.
# A stamp records the inputs, so a second run with nothing changed does
# nothing.
set -euo pipefail
# An image's folders and files keep the modes its packages and this
# script give them, whatever the builder's umask: under 077 a container
# user other than root could not reach its own programs.
umask 022
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/bin/images}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.stamp
k8s_mod=$repo/hack/k8s-bins
coredns_mod=$repo/hack/coredns
images=(agnhost serve-hostname busybox nginx httpd pause curl dnsutils distroless-iptables boom-server)

# inputs is everything the images are made from, bar the Debian archive's
# contents (the packages' versions are apt's candidates at build time).
inputs() {
  find "$here" -type f -print0 | LC_ALL=C sort -z | xargs -0 cat
  cat "$k8s_mod/go.mod" "$k8s_mod/go.sum" "$k8s_mod/tools.go" \
    "$coredns_mod/go.mod" "$coredns_mod/go.sum" "$coredns_mod/main.go"
  go version
  dpkg --print-architecture
}
want=$(inputs | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  missing=0
  for name in "${images[@]}"; do [[ -f $out/$name/image.json ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "node-images: up to date in $out"
    exit 0
  fi
fi

work=$out/.build
debs=$out/.debs # downloaded packages, kept across builds
rm -rf "$work"
mkdir -p "$work" "$debs"
trap 'rm -rf "$work"' EXIT
default_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

## Debian packages

apt_opts=(-qq)
if [[ $(id -u) == 0 ]]; then
  # Downloads land in $debs, which apt's sandbox user may not reach.
  apt_opts+=(-o APT::Sandbox::User=root)
fi

# apt_lists makes sure apt knows the archive's packages (a fresh
# container has no lists until apt-get update).
apt_lists() {
  if apt-cache show --no-all-versions busybox-static >/dev/null 2>&1; then
    return
  fi
  if [[ $(id -u) != 0 ]]; then
    echo "node-images: apt knows no packages; run apt-get update as root" >&2
    exit 1
  fi
  apt-get update -qq
}

# packages prints name=version of each package named and of every
# dependency this machine lacks, as `apt-get install` would choose them;
# what the machine has is seen through the image's hostDirs. Perl, which
# apache2-bin depends on for its helper scripts only, is left out.
packages() {
  local p
  for p in "$@"; do
    echo "$p=$(apt-cache show --no-all-versions "$p" | sed -n 's/^Version: //p' | head -1)"
  done
  apt-get -s -qq install --no-install-recommends "$@" |
    sed -n 's/^Inst \([^ ]*\) .*(\([^ ]*\) .*/\1=\2/p' |
    grep -Ev '^(perl|perl-modules-[0-9.]+|libperl[0-9.]+)=' || true
}

# deb_file prints the downloaded file of name=version, if any.
deb_file() {
  local name=${1%%=*} version=${1#*=}
  compgen -G "$debs/${name}_${version//:/%3a}_*.deb" | head -1 || true
}

# unpack unpacks the packages named, and the dependencies this machine
# lacks, into the root folder $1, downloading those not downloaded yet.
# Lists too old for the archive (a version gone) are updated once.
unpack() {
  local root=$1 spec specs
  shift
  if ! fetch "$@"; then
    if [[ $(id -u) != 0 ]]; then
      echo "node-images: downloading $* failed; run apt-get update as root" >&2
      exit 1
    fi
    echo "node-images: downloading failed; apt-get update and once more"
    apt-get update -qq
    fetch "$@"
  fi
  mkdir -p "$root"
  for spec in "${specs[@]}"; do
    dpkg-deb -x "$(deb_file "$spec")" "$root"
  done
  rm -rf "$root"/usr/share/{doc,man,info,lintian,bug,apport,initramfs-tools}
}

# fetch sets unpack's specs to what the packages named need and downloads
# what is not downloaded yet.
fetch() {
  local spec missing=()
  mapfile -t specs < <(packages "$@" | LC_ALL=C sort -u)
  for spec in "${specs[@]}"; do
    [[ -n $(deb_file "$spec") ]] || missing+=("$spec")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  echo "node-images: downloading ${missing[*]}"
  (cd "$debs" && apt-get "${apt_opts[@]}" download "${missing[@]}")
}

# merge_usr moves what packages put in /bin, /sbin, /lib ... into /usr
# where this machine has merged them: such a hostDir is a link in the
# container, so the image keeps nothing at its path.
merge_usr() {
  local root=$1 d target
  for d in bin sbin lib lib32 lib64 libx32; do
    if [[ -L /$d && -d $root/$d && ! -L $root/$d ]]; then
      target=$(readlink "/$d")
      mkdir -p "$root/$target"
      cp -a "$root/$d/." "$root/$target/"
      rm -rf "${root:?}/$d"
    fi
  done
}

## image.json

# json_list prints its arguments as a JSON array of strings.
json_list() {
  local s sep="" out="["
  for s in "$@"; do
    s=${s//\\/\\\\}
    out+="$sep\"${s//\"/\\\"}\""
    sep=", "
  done
  echo "$out]"
}

# host_dirs prints the hostDirs of an image that runs this machine's
# programs: /usr and its links, the alternatives they go through, and the
# extra folders given, as far as they exist here.
host_dirs() {
  local d dirs=()
  for d in /usr /bin /lib /lib64 /sbin /etc/alternatives "$@"; do
    if [[ -e $d || -L $d ]]; then dirs+=("$d"); fi
  done
  json_list "${dirs[@]}"
}

# image_json writes $1/image.json; the others are JSON arrays (see
# json_list) but for WorkingDir, User and StopSignal.
image_json() {
  local dir=$1 repositories=$2 entrypoint=$3 cmd=$4 env=$5 workdir=$6 user=$7 stopsignal=$8 hostdirs=$9
  cat >"$dir/image.json" <<EOF
{"repositories": $repositories,
 "config": {"Entrypoint": $entrypoint, "Cmd": $cmd, "Env": $env, "WorkingDir": "$workdir", "User": "$user", "StopSignal": "$stopsignal"},
 "hostDirs": $hostdirs}
EOF
}

## Files every root has

# base_root makes the usual folders and /etc files of a Debian-like root
# whose programs come from hostDirs; $2 and $3 are extra passwd and group
# lines.
base_root() {
  local root=$1 users=${2:-} groups=${3:-}
  mkdir -p "$root"/{etc,home,root,run,tmp,var/tmp,var/log}
  chmod 0700 "$root/root"
  chmod 1777 "$root/tmp" "$root/var/tmp"
  # Relative, so that unpacking through it stays in the root.
  ln -s ../run "$root/var/run"
  cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
${users}
EOF
  cat >"$root/etc/group" <<EOF
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
www-data:x:33:
users:x:100:
nogroup:x:65534:
${groups}
EOF
  sed -i '/^$/d' "$root/etc/passwd" "$root/etc/group"
  nsswitch "$root"
}

nsswitch() {
  cat >"$1/etc/nsswitch.conf" <<EOF
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
EOF
}

## The images

build_agnhost() {
  local dir=$work/agnhost root=$work/agnhost/rootfs src version coredns_version
  base_root "$root" \
    "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh" \
    "user-defined-in-image:x:1000:
group-defined-in-image:x:50000:user-defined-in-image"
  mkdir -p "$root/home/user-defined-in-image" "$root/uploads"
  chown 1000:1000 "$root/home/user-defined-in-image" 2>/dev/null || true
  # Downloaded first: on a fresh machine `go list -m` knows no folder yet.
  src=$(cd "$k8s_mod" && go mod download k8s.io/kubernetes && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost
  version=$(cat "$src/VERSION")
  echo "node-images: building agnhost $version (minutes when cold)"
  (cd "$k8s_mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=$version" \
    -o "$root/agnhost" k8s.io/kubernetes/test/images/agnhost)
  ln -s agnhost "$root/agnhost-2"
  # Upstream's DNS tests run CoreDNS from agnhost's image.
  coredns_version=$(cd "$coredns_mod" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
  (cd "$coredns_mod" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" -o "$root/coredns" .)
  install -m 0644 "$src/porter/localhost.crt" "$src/porter/localhost.key" "$root/"
  # The rest of agnhost's image (sh, bash, curl, ip, ss, grep ...) is this
  # machine's; these are the tools it may lack.
  unpack "$root" netcat-openbsd bind9-dnsutils bind9-host socat iperf iputils-ping procps netbase
  merge_usr "$root"
  # Links that the packages' maintainer scripts would make.
  ln -s nc.openbsd "$root/usr/bin/nc"
  mkdir -p "$root/usr/local/bin"
  ln -s /usr/bin/iperf "$root/usr/local/bin/iperf"
  image_json "$dir" "$(json_list registry.k8s.io/e2e-test-images/agnhost)" \
    "$(json_list /agnhost)" "$(json_list pause)" "$(json_list "PATH=$default_path")" "" "" "" \
    "$(host_dirs /etc/ssl)"
}

# serve-hostname is the image the Kubernetes docs' "Debug Services" page
# deploys (registry.k8s.io/serve_hostname): agnhost's serve-hostname, which
# answers every request on 9376 with the Pod's name. It shares agnhost's
# files (hard links).
build_serve-hostname() {
  local dir=$work/serve-hostname
  mkdir -p "$dir"
  cp -al "$work/agnhost/rootfs" "$dir/rootfs"
  image_json "$dir" "$(json_list registry.k8s.io/serve_hostname gcr.io/google_containers/serve_hostname)" \
    "$(json_list /agnhost serve-hostname)" null "$(json_list "PATH=$default_path")" "" "" "" \
    "$(host_dirs /etc/ssl)"
}

build_busybox() {
  local dir=$work/busybox root=$work/busybox/rootfs applet
  unpack "$root" busybox-static
  rm -rf "${root:?}/usr/share"
  for applet in $("$root/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -s busybox "$root/bin/$applet"
  done
  mkdir -p "$root"/{etc,home,root,tmp,usr/sbin,var/spool/mail,var/www}
  chmod 0700 "$root/root"
  chmod 1777 "$root/tmp"
  cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  cat >"$root/etc/group" <<EOF
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:26:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
EOF
  nsswitch "$root"
  image_json "$dir" "$(json_list busybox docker.io/library/busybox registry.k8s.io/e2e-test-images/busybox)" \
    "null" "$(json_list sh)" "$(json_list "PATH=$default_path")" "" "" "" "[]"
}

build_nginx() {
  local dir=$work/nginx root=$work/nginx/rootfs
  base_root "$root" "nginx:x:101:101:nginx user:/nonexistent:/bin/false" "nginx:x:101:"
  unpack "$root" nginx nginx-common netbase
  # Debian's service files and site layout; the official image has
  # conf.d only.
  rm -rf "$root"/etc/{init.d,default,logrotate.d,ufw} "$root/lib/systemd" \
    "$root"/etc/nginx/{sites-available,sites-enabled,modules-available,modules-enabled,snippets}
  merge_usr "$root"
  install -m 0644 "$here/nginx/nginx.conf" "$root/etc/nginx/nginx.conf"
  install -m 0644 "$here/nginx/default.conf" "$root/etc/nginx/conf.d/default.conf"
  install -m 0755 "$here/nginx/docker-entrypoint.sh" "$root/docker-entrypoint.sh"
  mkdir -p "$root/var/log/nginx" "$root/var/cache/nginx"
  ln -sf /dev/stdout "$root/var/log/nginx/access.log"
  ln -sf /dev/stderr "$root/var/log/nginx/error.log"
  if ! grep -q '<title>Welcome to nginx!</title>' "$root/usr/share/nginx/html/index.html"; then
    echo "node-images: Debian's nginx-common has no welcome page at /usr/share/nginx/html/index.html" >&2
    exit 1
  fi
  image_json "$dir" "$(json_list nginx docker.io/library/nginx registry.k8s.io/e2e-test-images/nginx)" \
    "$(json_list /docker-entrypoint.sh)" "$(json_list nginx -g "daemon off;")" \
    "$(json_list "PATH=$default_path")" "" "" SIGQUIT "$(host_dirs)"
}

build_httpd() {
  local dir=$work/httpd root=$work/httpd/rootfs prefix=$work/httpd/rootfs/usr/local/apache2
  base_root "$root"
  unpack "$root" apache2-bin media-types netbase
  merge_usr "$root"
  mkdir -p "$prefix"/{bin,conf,htdocs,logs} "$root/etc/apache2" "$root/usr/local/bin"
  ln -s /usr/sbin/apache2 "$prefix/bin/httpd"
  ln -s /usr/lib/apache2/modules "$prefix/modules"
  install -m 0644 "$here/httpd/httpd.conf" "$prefix/conf/httpd.conf"
  # Debian's apache2 reads /etc/apache2/apache2.conf.
  ln -s /usr/local/apache2/conf/httpd.conf "$root/etc/apache2/apache2.conf"
  echo '<html><body><h1>It works!</h1></body></html>' >"$prefix/htdocs/index.html"
  install -m 0755 "$here/httpd/httpd-foreground" "$root/usr/local/bin/httpd-foreground"
  image_json "$dir" "$(json_list httpd docker.io/library/httpd registry.k8s.io/e2e-test-images/httpd)" \
    "null" "$(json_list httpd-foreground)" \
    "$(json_list "PATH=/usr/local/apache2/bin:$default_path" HTTPD_PREFIX=/usr/local/apache2)" \
    /usr/local/apache2 "" SIGWINCH "$(host_dirs)"
}

build_pause() {
  local dir=$work/pause root=$work/pause/rootfs
  mkdir -p "$root"
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/pause" ./hack/node-images/pause)
  image_json "$dir" "$(json_list registry.k8s.io/pause k8s.gcr.io/pause)" \
    "$(json_list /pause)" "null" "$(json_list "PATH=$default_path")" "" "" "" "[]"
}

build_curl() {
  local dir=$work/curl root=$work/curl/rootfs
  base_root "$root"
  unpack "$root" netbase
  merge_usr "$root"
  install -m 0755 "$here/curl/entrypoint.sh" "$root/entrypoint.sh"
  image_json "$dir" "$(json_list curlimages/curl docker.io/curlimages/curl)" \
    "$(json_list /entrypoint.sh)" "$(json_list curl)" "$(json_list "PATH=$default_path")" "" "" "" \
    "$(host_dirs /etc/ssl)"
}

build_dnsutils() {
  local dir=$work/dnsutils root=$work/dnsutils/rootfs
  base_root "$root"
  unpack "$root" bind9-dnsutils bind9-host netbase
  merge_usr "$root"
  image_json "$dir" "$(json_list registry.k8s.io/e2e-test-images/jessie-dnsutils \
    registry.k8s.io/e2e-test-images/glibc-dns-testing registry.k8s.io/dns/dnsutils \
    gcr.io/kubernetes-e2e-test-images/dnsutils)" \
    "null" "$(json_list bash)" "$(json_list "PATH=$default_path")" "" "" "" "$(host_dirs /etc/ssl)"
}

# distroless-iptables is the build image Kubernetes ships iptables and
# conntrack in; upstream's KubeProxy CLOSE_WAIT test runs it privileged on
# a node's network to read that node's conntrack table.
build_distroless-iptables() {
  local dir=$work/distroless-iptables root=$work/distroless-iptables/rootfs
  base_root "$root"
  unpack "$root" iptables conntrack netbase
  merge_usr "$root"
  image_json "$dir" "$(json_list registry.k8s.io/build-image/distroless-iptables)" \
    "null" "null" "$(json_list "PATH=$default_path")" "" "" "" "$(host_dirs)"
}

# boom-server is upstream's regression-issue-74839 program: a TCP server
# that also sends its clients an out-of-window packet through a raw socket,
# for the e2e test of the invalid conntrack state bug.
build_boom-server() {
  local dir=$work/boom-server root=$work/boom-server/rootfs src version
  base_root "$root"
  src=$(cd "$k8s_mod" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/regression-issue-74839
  version=$(cat "$src/VERSION")
  echo "node-images: building regression-issue-74839 $version"
  (cd "$k8s_mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$root/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839)
  image_json "$dir" "$(json_list registry.k8s.io/e2e-test-images/regression-issue-74839)" \
    "$(json_list /regression-issue-74839)" "null" "$(json_list "PATH=$default_path")" "" "" "" "[]"
}

apt_lists
for name in "${images[@]}"; do
  echo "node-images: building $name"
  "build_$name"
done
for name in "${images[@]}"; do
  rm -rf "${out:?}/$name"
  mv "$work/$name" "$out/$name"
done
echo "$want" >"$stamp"
echo "node-images: done in $out"
