#!/usr/bin/env bash
# Builds the kernel-client guest: the stock Debian kernel (linux-image-*-amd64, downloaded with
# `apt-get download`) and a small initramfs (busybox-static, the NFS/virtio/9p modules and their
# dependencies, a static mount(2) helper, GNU dd). Idempotent: does nothing when up to date.
#
#   build.sh [--force]
#
# Environment:
#   KC_CACHE      where everything goes     [REPO/target/kclient-cache] (ignored by git, ~550 MB)
#   KC_KPKG       kernel package            [what linux-image-amd64 depends on]
#   KC_STRIP_SIG  1 = drop module signatures (loads faster under TCG; the kernel logs one
#                 "module verification failed" taint line)   [1]
# Needs: apt-get, dpkg-deb, python3, gcc + libc6-dev (static), strip, busybox-static's .deb
# (downloaded here too). Results in KC_CACHE: vmlinux (the ELF kernel, booted through its PVH
# entry), initramfs.cpio (uncompressed newc: faster to unpack under TCG), kver.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../../.." && pwd -P)"
CACHE="${KC_CACHE:-$REPO/target/kclient-cache}"
FORCE=0
[ "${1:-}" = --force ] && FORCE=1

say() { printf 'kclient build: %s\n' "$*" >&2; }
die() { printf 'kclient build: ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
cd "$CACHE"

# ------------------------------------------------------------------ the packages
KPKG="${KC_KPKG:-}"
[ -n "$KPKG" ] || KPKG="$(cat kpkg.name 2>/dev/null || true)"
if [ -z "$KPKG" ]; then
    KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null \
            | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')"
    [ -n "$KPKG" ] || die "apt knows no linux-image-amd64 dependency (run apt-get update)"
fi
echo "$KPKG" > kpkg.name
KVER="${KPKG#linux-image-}"

deb_of() {   # deb_of PACKAGE: the downloaded .deb's name (downloads it the first time)
    local f
    f="$(ls -1 "$1"_*.deb 2>/dev/null | head -n 1 || true)"
    if [ -z "$f" ]; then
        say "apt-get download $1"
        apt-get download "$1" >&2 || die "apt-get download $1 failed (apt-get update?)"
        f="$(ls -1 "$1"_*.deb | head -n 1)"
    fi
    echo "$f"
}
KDEB="$(deb_of "$KPKG")"
BDEB="$(deb_of busybox-static)"

if [ ! -f "kernel/boot/vmlinuz-$KVER" ] || [ "$KDEB" -nt "kernel/boot/vmlinuz-$KVER" ]; then
    say "unpacking $KDEB"
    rm -rf kernel && mkdir kernel && dpkg-deb -x "$KDEB" kernel
    touch "kernel/boot/vmlinuz-$KVER"
fi
if [ ! -x busybox/bin/busybox ]; then
    say "unpacking $BDEB"
    rm -rf busybox && mkdir busybox && dpkg-deb -x "$BDEB" busybox
fi
BB="$CACHE/busybox/bin/busybox"
MODS="$CACHE/kernel/lib/modules/$KVER"
[ -d "$MODS" ] || die "the kernel package has no $MODS"
echo "$KVER" > kver

# The bzImage carries an xz-compressed ELF vmlinux with a PVH entry note; qemu boots that ELF
# directly (no real-mode set-up, no decompression in the guest), about 2 s less per boot
# under TCG.
if [ ! -f vmlinux ] || [ "kernel/boot/vmlinuz-$KVER" -nt vmlinux ]; then
    say "extracting the ELF kernel from vmlinuz-$KVER"
    python3 - "kernel/boot/vmlinuz-$KVER" vmlinux.part <<'PY'
import lzma, sys
blob = open(sys.argv[1], "rb").read()
at = blob.find(b"\xfd7zXZ\x00")
if at < 0:
    sys.exit("no xz stream in " + sys.argv[1])
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[at:])
if not elf.startswith(b"\x7fELF"):
    sys.exit("the xz stream is not an ELF image")
open(sys.argv[2], "wb").write(elf)
PY
    mv vmlinux.part vmlinux
fi

# ------------------------------------------------------------------ up to date?
KEY="kver=$KVER strip=${KC_STRIP_SIG:-1}"
INPUTS=("$HERE/build.sh" "$HERE/guest/init" "$HERE/guest/kc-lib.sh" "$HERE/src/kcmount.c" "$KDEB" "$BDEB")
if [ "$FORCE" = 0 ] && [ -f initramfs.cpio ] && [ "$(cat initramfs.key 2>/dev/null)" = "$KEY" ]; then
    stale=0
    for f in "${INPUTS[@]}"; do [ "$f" -nt initramfs.cpio ] && stale=1; done
    if [ "$stale" = 0 ]; then
        say "up to date (kernel $KVER, $CACHE)"
        exit 0
    fi
fi

# ------------------------------------------------------------------ modules
# The modules the guest loads, plus everything they depend on. The package ships no
# modules.dep, so the closure comes from each module's "depends=" field; busybox depmod then
# writes modules.dep for modprobe.
WANTED=(nfs nfsv3 nfsv4 nfs_layout_nfsv41_files sunrpc lockd grace nfs_acl auth_rpcgss rpcsec_gss_krb5
        fscache netfs dns_resolver
        virtio_pci virtio_net 9p 9pnet_virtio)
ROOT="$(mktemp -d "${TMPDIR:-/tmp}/kclient-initramfs.XXXXXX")"
trap 'rm -rf "$ROOT"' EXIT
python3 - "$MODS" "$ROOT/lib/modules/$KVER" "${WANTED[@]}" <<'PY'
import os, re, shutil, sys
src, dst, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
where = {}
for d, _, names in os.walk(os.path.join(src, "kernel")):
    for n in names:
        if n.endswith(".ko"):
            where[n[:-3].replace("-", "_")] = os.path.join(d, n)
builtin = {os.path.basename(l.strip())[:-3].replace("-", "_")
           for l in open(os.path.join(src, "modules.builtin"))}
def depends(name):
    m = re.search(rb"\x00depends=([^\x00]*)\x00", open(where[name], "rb").read())
    return [d.replace("-", "_") for d in m.group(1).decode().split(",") if d] if m else []
order, seen = [], set()
def add(name):
    if name in seen:
        return
    seen.add(name)
    if name not in where:
        if name in builtin:
            return
        sys.exit("module %s is neither a file nor built in" % name)
    for d in depends(name):
        add(d)
    order.append(name)
for w in wanted:
    add(w)
TRAILER = b"~Module signature appended~\n"
strip = os.environ.get("KC_STRIP_SIG", "1") == "1"
for name in order:
    rel = os.path.relpath(where[name], src)
    os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
    data = open(where[name], "rb").read()
    if strip and data.endswith(TRAILER):
        # the signature, then struct module_signature (12 bytes, big-endian sig_len at +8)
        n = int.from_bytes(data[-len(TRAILER) - 4:-len(TRAILER)], "big")
        data = data[:len(data) - len(TRAILER) - 12 - n]
    open(os.path.join(dst, rel), "wb").write(data)
for f in ("modules.builtin", "modules.order", "modules.builtin.modinfo"):
    shutil.copy2(os.path.join(src, f), os.path.join(dst, f))
print("kclient build: %d modules" % len(order), file=sys.stderr)
PY
"$BB" depmod -b "$ROOT" "$KVER"

# ------------------------------------------------------------------ userland
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,proc,sys,dev,tmp,run,mnt,kc,root}
cp "$BB" "$ROOT/bin/busybox"
for applet in $("$BB" --list-full); do
    [ -e "$ROOT/$applet" ] || ln -s /bin/busybox "$ROOT/$applet"
done
say "compiling kcmount"
gcc -static -O2 -Wall -o "$ROOT/usr/local/bin/kcmount" "$HERE/src/kcmount.c"
strip "$ROOT/usr/local/bin/kcmount"
# GNU dd, for its throughput line. Installed as gdd: Debian's busybox shell runs its own
# applets before it searches PATH, so a "dd" would always be busybox's.
dd_bin="$(command -v dd)"
install -m 755 -D "$(readlink -f "$dd_bin")" "$ROOT/usr/local/bin/gdd"
for lib in $(ldd "$dd_bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    [ -e "$ROOT$lib" ] || install -m 755 -D "$(readlink -f "$lib")" "$ROOT$lib"
done
install -m 755 "$HERE/guest/init" "$ROOT/init"
install -m 644 "$HERE/guest/kc-lib.sh" "$ROOT/etc/kc-lib.sh"
echo "root:x:0:0:root:/root:/bin/sh" > "$ROOT/etc/passwd"
echo "root:x:0:" > "$ROOT/etc/group"
echo "127.0.0.1 localhost" > "$ROOT/etc/hosts"

say "writing initramfs.cpio"
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | "$BB" cpio -o -H newc 2>/dev/null) > initramfs.part
mv initramfs.part initramfs.cpio
echo "$KEY" > initramfs.key
say "done: kernel $KVER, $(du -h initramfs.cpio | cut -f1) initramfs in $CACHE"
