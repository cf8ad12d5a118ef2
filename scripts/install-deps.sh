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
  qemu-system-x86     # ../shared/kclient boots the real Linux NFS client
  busybox-static
  fuse3               # fusermount3 for `sluice mount`
  libfuse3-dev
  pkg-config
  iperf3              # loopback limit in benchmark ratios
  rsync
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's ganesha/rpcbind packages try to start services on install; we run our own private
# instances (see tests/peers/ganesha.sh), so make sure the system ones are not holding ports.
if command -v systemctl >/dev/null 2>&1; then
  systemctl stop nfs-ganesha rpcbind rpcbind.socket >/dev/null 2>&1 || true
fi
pkill -x ganesha.nfsd >/dev/null 2>&1 || true

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
fi
echo "install-deps: ok" >&2
