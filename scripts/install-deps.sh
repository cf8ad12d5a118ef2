#!/usr/bin/env bash
# Installs everything sluice's tests and benchmarks need, idempotently.
# CI starts from a clean checkout on a possibly new machine, so this is the single
# place that knows which Debian packages and Rust components the project relies on.
set -euo pipefail

APT_PACKAGES=(
  libnfs-utils        # nfs-ls / nfs-cp / nfs-cat: a third-party NFS client
  tshark              # wire-format oracle
  nfs-ganesha         # a third-party NFS server (client interop)
  nfs-ganesha-vfs
  rpcbind             # ganesha refuses to start without registering
  qemu-system-x86     # tests/peers/kclient boots the real Linux NFS client
  busybox-static
  fuse3               # fusermount3 for `sluice mount`
  libfuse3-dev
  pkg-config
  iperf3              # loopback limit in benchmark ratios
  rsync
  attr                # setfattr / getfattr: the mount's user.* extended attributes test
  # used by tests/peers/*.sh and tests/peers/kclient/build.sh; not in a minimal Debian 12 image
  iproute2            # ss: port checks in tests/peers/ganesha.sh
  gcc                 # kclient build.sh compiles a static mount helper
  libc6-dev
  binutils            # strip
  bc                  # kclient run.sh timings
  python3             # kclient build.sh (module closure, vmlinux extraction)
  zstd                # KC_SUITE=trixie kclient build.sh: Debian 13's kernel image is zstd-packed
  debian-archive-keyring  # verifies the private trixie package lists of that build
  ca-certificates
  xfsprogs            # mkfs.xfs: the CLONE test's reflink=1 file system on a loop device
  # tests/peers/ceph.sh: a private one-node Ceph cluster on loopback for the CephFS backend
  # (crates/ceph loads libcephfs.so.2 at run time; ceph-fuse is the tests' independent reader)
  ceph-mon
  ceph-osd
  ceph-mds
  ceph-mgr            # CEPH_MGR=1: without a manager the cluster reports no capacity (FSSTAT)
  ceph-common
  ceph-fuse
  libcephfs-dev
  nfs-ganesha-ceph    # ganesha's FSAL_CEPH: the comparison gateway of bench/ceph-vs-ganesha.sh
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  # Installing nfs-ganesha / rpcbind / the ceph daemons would start their system services, which listen on all
  # interfaces (rpcbind on port 111). We only ever run private loopback instances
  # (tests/peers/ganesha.sh), so forbid service starts during the install with the standard
  # policy-rc.d mechanism (honoured by invoke-rc.d and deb-systemd-invoke).
  POLICY=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$POLICY"; chmod 755 "$POLICY"; own_policy=1
    trap 'if [ "$own_policy" = 1 ]; then rm -f "$POLICY"; fi' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
  if [ "$own_policy" = 1 ]; then rm -f "$POLICY"; own_policy=0; fi
fi

# tests/peers/kclient/build.sh resolves and downloads the Debian kernel package with apt:
# it needs package lists even when every package above was preinstalled.
if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
  echo "install-deps: apt-get update (no package lists, needed by kclient build.sh)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
fi

# The packaged services must not hold ports or answer on non-loopback interfaces. Stop them
# where they run (never by process name: private test instances of ganesha may be running).
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now nfs-ganesha.service rpcbind.socket rpcbind.service >/dev/null 2>&1 || true
fi
# the packaged ganesha's own pidfile (our private instances use a private /run)
if [ -r /run/ganesha/ganesha.pid ]; then
  gpid="$(cat /run/ganesha/ganesha.pid 2>/dev/null || true)"
  if [ -n "$gpid" ] && [ "$(cat "/proc/$gpid/comm" 2>/dev/null)" = ganesha.nfsd ]; then
    kill "$gpid" 2>/dev/null || true
  fi
fi

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi
echo "install-deps: ok" >&2
