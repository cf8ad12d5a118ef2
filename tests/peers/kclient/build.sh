#!/usr/bin/env bash
# Builds the kernel-client guest: the stock Debian kernel (linux-image-*-amd64, downloaded with
# `apt-get download`) and a small initramfs (busybox-static, the NFS/virtio/9p modules and their
# dependencies, a static mount(2) helper, GNU dd; in the default guest also rpcbind and
# rpc.statd, for v3 mounts with locking). Idempotent: does nothing when up to date.
#
#   build.sh [--force]
#
# Environment:
#   KC_SUITE      host | trixie                                                  [host]
#                 host: this machine's own package lists (Debian 12: kernel 6.1), with
#                 rpcbind and rpc.statd (the rpcbind and nfs-common packages) and the shared
#                 libraries they load, taken from this machine (the same release; ldd finds
#                 them), plus its /etc/netconfig, /etc/services and /etc/protocols.
#                 trixie: Debian 13's kernel (6.12, RPC-with-TLS) and tlshd (ktls-utils) with
#                 the shared libraries it needs, from a private apt configuration under the
#                 cache (its own sources.list, lists and download cache; the machine's apt
#                 sources are not touched), verified with /usr/share/keyrings'
#                 debian-archive-keyring.gpg (Debian 12's package carries the trixie keys).
#   KC_CACHE      where everything goes     [REPO/target/kclient-cache, or
#                 REPO/target/kclient-cache-trixie for KC_SUITE=trixie] (ignored by git)
#   KC_MIRROR     the Debian mirror of KC_SUITE=trixie     [http://deb.debian.org/debian]
#   KC_KPKG       kernel package            [what linux-image-amd64 depends on]
#   KC_STRIP_SIG  1 = drop module signatures (loads faster under TCG; the kernel logs one
#                 "module verification failed" taint line)   [1]
# Needs: apt-get, dpkg-deb, python3, gcc + libc6-dev (static), strip, busybox-static's .deb
# (downloaded here too); for trixie also readelf and zstd (its kernel image is zstd-packed).
# Results in KC_CACHE: vmlinux (the ELF kernel, booted through its PVH entry), initramfs.cpio
# (uncompressed newc: faster to unpack under TCG), kver.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../../.." && pwd -P)"
SUITE="${KC_SUITE:-host}"
case "$SUITE" in
    host) CACHE="${KC_CACHE:-$REPO/target/kclient-cache}" ;;
    trixie) CACHE="${KC_CACHE:-$REPO/target/kclient-cache-trixie}" ;;
    *) echo "kclient build: ERROR: KC_SUITE must be host or trixie, not $SUITE" >&2; exit 1 ;;
esac
FORCE=0
[ "${1:-}" = --force ] && FORCE=1

say() { printf 'kclient build: %s\n' "$*" >&2; }
die() { printf 'kclient build: ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
cd "$CACHE"

# put NAME TEXT: writes a small file as a new inode (the caches of several checkouts may share
# their files as hard links, so a file is replaced, never rewritten in place)
put() { printf '%s\n' "$2" > "$1.part" && mv -f "$1.part" "$1"; }

# ------------------------------------------------------------------ the packages
APT_OPTS=()
if [ "$SUITE" = trixie ]; then
    # A private apt configuration: its own sources.list, preferences, lists and download cache
    # under the cache, no dpkg status (nothing here is installed, only downloaded). The
    # machine's apt.conf.d still applies (proxies).
    KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -r "$KEYRING" ] || die "no $KEYRING (apt-get install debian-archive-keyring)"
    A="$CACHE/apt"
    mkdir -p "$A/etc/sources.list.d" "$A/etc/preferences.d" "$A/state/lists/partial" \
             "$A/cache/archives/partial"
    line="deb [signed-by=$KEYRING] ${KC_MIRROR:-http://deb.debian.org/debian} trixie main"
    [ "$(cat "$A/etc/sources.list" 2>/dev/null)" = "$line" ] || put "$A/etc/sources.list" "$line"
    APT_OPTS=(-o "Dir::Etc::sourcelist=$A/etc/sources.list"
              -o "Dir::Etc::sourceparts=$A/etc/sources.list.d"
              -o "Dir::Etc::preferencesparts=$A/etc/preferences.d"
              -o "Dir::State=$A/state" -o "Dir::State::status=/dev/null"
              -o "Dir::Cache=$A/cache" -o "APT::Architecture=amd64")
    if ! ls "$A"/state/lists/*_Packages* >/dev/null 2>&1; then
        say "apt-get update (private trixie lists in $A)"
        apt-get "${APT_OPTS[@]}" -qq update >&2 \
            || die "apt-get update of the trixie lists failed (network? a keyring without the trixie keys: $KEYRING)"
    fi
fi

KPKG="${KC_KPKG:-}"
[ -n "$KPKG" ] || KPKG="$(cat kpkg.name 2>/dev/null || true)"
if [ -z "$KPKG" ]; then
    KPKG="$(apt-cache ${APT_OPTS[@]+"${APT_OPTS[@]}"} depends linux-image-amd64 2>/dev/null \
            | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')"
    [ -n "$KPKG" ] || die "apt knows no linux-image-amd64 dependency (run apt-get update)"
fi
[ "$(cat kpkg.name 2>/dev/null)" = "$KPKG" ] || put kpkg.name "$KPKG"
KVER="${KPKG#linux-image-}"

deb_of() {   # deb_of PACKAGE: the downloaded .deb's name (downloads it the first time)
    local f
    f="$(ls -1 "$1"_*.deb 2>/dev/null | head -n 1 || true)"
    if [ -z "$f" ]; then
        say "apt-get download $1"
        if ! apt-get ${APT_OPTS[@]+"${APT_OPTS[@]}"} download "$1" >&2; then
            # the private lists may name a version the mirror no longer has: refresh, retry
            [ "$SUITE" = trixie ] || die "apt-get download $1 failed (apt-get update?)"
            say "apt-get download $1 failed; refreshing the trixie lists"
            apt-get "${APT_OPTS[@]}" -qq update >&2 && apt-get "${APT_OPTS[@]}" download "$1" >&2 \
                || die "apt-get download $1 failed (trixie lists in $CACHE/apt)"
        fi
        f="$(ls -1 "$1"_*.deb | head -n 1)"
    fi
    echo "$f"
}
KDEB="$(deb_of "$KPKG")"
BDEB="$(deb_of busybox-static)"
# rpcbind and rpc.statd (host suite): a v3 mount without nolock needs both in the guest (the
# kernel's lockd registers with rpcbind and asks statd to monitor the server). kc_nsm in
# guest/kc-lib.sh starts them.
NSM_DEBS=()
if [ "$SUITE" = host ]; then
    NSM_DEBS=("$(deb_of rpcbind)" "$(deb_of nfs-common)")
fi

# tlshd (trixie): ktls-utils and the closure of its Depends (libc6 with its loader, gnutls and
# its crypto libraries, glib, libnl, keyutils ...), unpacked side by side in userland/. Which
# of their files the guest gets is decided below from the ELF NEEDED entries.
TLS_DEBS=()
if [ "$SUITE" = trixie ]; then
    closure="$(apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests \
                 --no-conflicts --no-breaks --no-replaces --no-enhances ktls-utils \
               | grep -v '^[ <]' | sort -u)"
    [ -n "$closure" ] || die "apt knows no ktls-utils in the trixie lists"
    # one apt-get for all that are missing (each apt-get reads the 10 MB lists anew: one at a
    # time, 23 packages took a minute)
    missing=()
    for p in $closure; do ls "$p"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "apt-get download ${missing[*]}"
        apt-get "${APT_OPTS[@]}" download "${missing[@]}" >&2 || true   # deb_of retries singly
    fi
    for p in $closure; do TLS_DEBS+=("$(deb_of "$p")"); done
fi

if [ ! -f "kernel/boot/vmlinuz-$KVER" ] || [ "$KDEB" -nt "kernel/boot/vmlinuz-$KVER" ]; then
    say "unpacking $KDEB"
    rm -rf kernel && mkdir kernel && dpkg-deb -x "$KDEB" kernel
    touch "kernel/boot/vmlinuz-$KVER"
fi
# Debian 13's busybox-static installs /usr/bin/busybox, Debian 12's /bin/busybox.
if [ ! -x busybox/bin/busybox ] && [ ! -x busybox/usr/bin/busybox ]; then
    say "unpacking $BDEB"
    rm -rf busybox && mkdir busybox && dpkg-deb -x "$BDEB" busybox
fi
if [ "${#TLS_DEBS[@]}" -gt 0 ]; then
    fresh=1
    [ -d userland ] || fresh=0
    for d in "${TLS_DEBS[@]}"; do [ "$d" -nt userland ] && fresh=0; done
    if [ "$fresh" = 0 ]; then
        say "unpacking ktls-utils and its $((${#TLS_DEBS[@]} - 1)) dependencies"
        rm -rf userland && mkdir userland
        for d in "${TLS_DEBS[@]}"; do dpkg-deb -x "$d" userland; done
        touch userland
    fi
fi
if [ "${#NSM_DEBS[@]}" -gt 0 ]; then
    fresh=1
    [ -d nsm ] || fresh=0
    for d in "${NSM_DEBS[@]}"; do [ "$d" -nt nsm ] && fresh=0; done
    if [ "$fresh" = 0 ]; then
        say "unpacking rpcbind and nfs-common"
        rm -rf nsm && mkdir nsm
        for d in "${NSM_DEBS[@]}"; do dpkg-deb -x "$d" nsm; done
        touch nsm
    fi
fi
BB="$CACHE/busybox/bin/busybox"
[ -x "$BB" ] || BB="$CACHE/busybox/usr/bin/busybox"
# Debian 13 installs modules under /usr/lib/modules (merged /usr), Debian 12 under /lib.
MODS="$CACHE/kernel/lib/modules/$KVER"
[ -d "$MODS" ] || MODS="$CACHE/kernel/usr/lib/modules/$KVER"
[ -d "$MODS" ] || die "the kernel package has no lib/modules/$KVER"
[ "$(cat kver 2>/dev/null)" = "$KVER" ] || put kver "$KVER"

# The bzImage carries a compressed ELF vmlinux with a PVH entry note; qemu boots that ELF
# directly (no real-mode set-up, no decompression in the guest), about 2 s less per boot
# under TCG. Debian 12 packs it with xz (python's lzma), Debian 13 with zstd (the zstd tool,
# given exactly the payload the boot header names).
if [ ! -f vmlinux ] || [ "kernel/boot/vmlinuz-$KVER" -nt vmlinux ]; then
    say "extracting the ELF kernel from vmlinuz-$KVER"
    python3 - "kernel/boot/vmlinuz-$KVER" vmlinux.part <<'PY'
import lzma, subprocess, sys
blob = open(sys.argv[1], "rb").read()
at = blob.find(b"\xfd7zXZ\x00")
if at >= 0:
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[at:])
else:
    # the boot protocol's setup header: setup_sects at 0x1f1, payload_offset and
    # payload_length at 0x248 and 0x24c, relative to the protected-mode code
    setup = (blob[0x1F1] or 4) + 1
    off = int.from_bytes(blob[0x248:0x24C], "little") + setup * 512
    length = int.from_bytes(blob[0x24C:0x250], "little")
    payload = blob[off:off + length]
    if not payload.startswith(b"\x28\xb5\x2f\xfd"):
        sys.exit("neither an xz nor a zstd payload in " + sys.argv[1])
    # the payload ends with the uncompressed size (4 bytes), which is no zstd frame
    elf = subprocess.run(["zstd", "-dcq"], input=payload[:-4], stdout=subprocess.PIPE,
                         check=True).stdout
if not elf.startswith(b"\x7fELF"):
    sys.exit("the compressed payload is not an ELF image")
open(sys.argv[2], "wb").write(elf)
PY
    mv vmlinux.part vmlinux
fi

# ------------------------------------------------------------------ up to date?
KEY="kver=$KVER strip=${KC_STRIP_SIG:-1}"
[ "$SUITE" = host ] || KEY="$KEY suite=$SUITE"
INPUTS=("$HERE/build.sh" "$HERE/guest/init" "$HERE/guest/kc-lib.sh" "$HERE/src/kcmount.c" "$KDEB" "$BDEB"
        ${TLS_DEBS[@]+"${TLS_DEBS[@]}"} ${NSM_DEBS[@]+"${NSM_DEBS[@]}"})
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
# RPC-with-TLS: the kernel's TLS record layer and the AEADs a TLS 1.3 session may pick (the
# guest CPU, qemu64, has no AES-NI or PCLMUL: the generic ciphers). The handshake upcall
# (CONFIG_NET_HANDSHAKE) is built into trixie's kernel.
# fscache is part of netfs since 6.8.
if [ "$SUITE" = trixie ]; then
    WANTED=(${WANTED[@]/fscache} tls gcm ghash_generic chacha20poly1305 chacha_generic poly1305_generic)
fi
ROOT="$(mktemp -d "${TMPDIR:-/tmp}/kclient-initramfs.XXXXXX")"
trap 'rm -rf "$ROOT"' EXIT
if [ "$SUITE" = trixie ]; then
    # merged /usr as in Debian 13: tlshd's interpreter is /lib64/ld-linux-x86-64.so.2
    mkdir -p "$ROOT/usr/lib" "$ROOT/usr/lib64"
    ln -s usr/lib "$ROOT/lib" && ln -s usr/lib64 "$ROOT/lib64"
fi
python3 - "$MODS" "$ROOT/lib/modules/$KVER" "${WANTED[@]}" <<'PY'
import lzma, os, re, shutil, sys
src, dst, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
# Debian 12 ships plain .ko files, Debian 13 .ko.xz: the guest gets them uncompressed (no
# decompression in busybox's insmod, less work under TCG).
where = {}
for d, _, names in os.walk(os.path.join(src, "kernel")):
    for n in names:
        for ext in (".ko", ".ko.xz"):
            if n.endswith(ext):
                where[n[:-len(ext)].replace("-", "_")] = os.path.join(d, n)
def data_of(name):
    data = open(where[name], "rb").read()
    return lzma.decompress(data) if where[name].endswith(".xz") else data
builtin = {os.path.basename(l.strip())[:-3].replace("-", "_")
           for l in open(os.path.join(src, "modules.builtin"))}
def depends(name):
    m = re.search(rb"\x00depends=([^\x00]*)\x00", data_of(name))
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
    if rel.endswith(".xz"):
        rel = rel[:-3]
    os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
    data = data_of(name)
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
if [ "$SUITE" = trixie ]; then
    # tlshd and the shared objects it loads (the closure of the ELF NEEDED entries, found in
    # userland/'s multiarch directory), with trixie's dynamic loader; the default paths of
    # Debian's loader include /usr/lib/x86_64-linux-gnu, so no ld.so.cache is needed.
    U="$CACHE/userland" ML=usr/lib/x86_64-linux-gnu
    install -m 755 -D "$U/usr/sbin/tlshd" "$ROOT/usr/sbin/tlshd"
    mkdir -p "$ROOT/$ML"
    todo=("$U/usr/sbin/tlshd") seen=" "
    while [ "${#todo[@]}" -gt 0 ]; do
        elf="${todo[0]}"; todo=("${todo[@]:1}")
        for so in $(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            case "$seen" in *" $so "*) continue ;; esac
            seen="$seen$so "
            [ -e "$U/$ML/$so" ] || die "tlshd needs $so, which no unpacked package has"
            cp -L "$U/$ML/$so" "$ROOT/$ML/$so"
            todo+=("$U/$ML/$so")
        done
    done
    cp -L "$U/$ML/ld-linux-x86-64.so.2" "$ROOT/$ML/"
    ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ROOT/usr/lib64/ld-linux-x86-64.so.2"
    say "tlshd with $(echo $seen | wc -w) shared objects"
fi
# GNU dd, for its throughput line. Installed as gdd: Debian's busybox shell runs its own
# applets before it searches PATH, so a "dd" would always be busybox's. (On trixie this
# machine's dd runs on the newer libc installed above.)
dd_bin="$(command -v dd)"
install -m 755 -D "$(readlink -f "$dd_bin")" "$ROOT/usr/local/bin/gdd"
for lib in $(ldd "$dd_bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    [ -e "$ROOT$lib" ] || install -m 755 -D "$(readlink -f "$lib")" "$ROOT$lib"
done
if [ "${#NSM_DEBS[@]}" -gt 0 ]; then
    # rpcbind, rpc.statd and rpcinfo with the libraries ldd finds for them on this machine
    # (the packages' own release), and the files libtirpc and getaddrinfo read.
    for b in sbin/rpcbind sbin/rpc.statd usr/bin/rpcinfo; do
        rm -f "$ROOT/$b"   # a busybox applet link of that name would be written through
        install -m 755 -D "$CACHE/nsm/$b" "$ROOT/$b"
        ! ldd "$CACHE/nsm/$b" | grep -q 'not found' \
            || die "$b needs libraries this machine lacks: $(ldd "$CACHE/nsm/$b" | grep 'not found')"
        for lib in $(ldd "$CACHE/nsm/$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
            [ -e "$ROOT$lib" ] || install -m 755 -D "$(readlink -f "$lib")" "$ROOT$lib"
        done
    done
    for f in /etc/netconfig /etc/services /etc/protocols; do
        [ -r "$f" ] || die "no $f on this machine (rpcbind and rpc.statd in the guest need it)"
        cp "$f" "$ROOT$f"
    done
    say "rpcbind and rpc.statd"
fi
install -m 755 "$HERE/guest/init" "$ROOT/init"
install -m 644 "$HERE/guest/kc-lib.sh" "$ROOT/etc/kc-lib.sh"
# _rpc: the user rpcbind runs as (Debian's build drops to it); statd: rpc.statd's, unused
# while /var/lib/nfs belongs to root (statd then stays root).
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "_rpc:x:102:65534::/run/rpcbind:/bin/false" \
    "statd:x:103:65534::/var/lib/nfs:/bin/false" > "$ROOT/etc/passwd"
printf '%s\n' "root:x:0:" "nogroup:x:65534:" > "$ROOT/etc/group"
echo "127.0.0.1 localhost" > "$ROOT/etc/hosts"

say "writing initramfs.cpio"
(cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | "$BB" cpio -o -H newc 2>/dev/null) > initramfs.part
mv initramfs.part initramfs.cpio
put initramfs.key "$KEY"
say "done: kernel $KVER, $(du -h initramfs.cpio | cut -f1) initramfs in $CACHE"
