#!/usr/bin/env bash
# Host side of the kernel-client interop test: places a tree and a 64 MiB file in each export's
# backing dir, runs guest/kernel-interop.sh in one kclient guest (kclient.sh), which mounts
# every export in turn and runs the workload on each, then checks on the host what the guest
# wrote (sha256 of every kept file) and that the guest read the host file correctly.
#
#   kernel-interop.sh NFS_PORT MOUNT_PORT EXPORT BACKING_DIR [EXPORT BACKING_DIR]...
#
# EXPORT is a path the server exports (v3 MOUNT path, v4 path); BACKING_DIR is where the host
# reads and writes that export's files directly: the served local directory (for sluice and
# ganesha usually the same path as EXPORT), or for a Ceph export a ceph-fuse mount of it (so
# the checksums are those an independent Ceph client reads).
# It builds the guest's two static helpers with gcc: guest/kc-lock.c (an fcntl lock held by one
# process, probed by another) and guest/kc-fsx.c (fsx-style random operations against a model).
# Environment: KC_VERS (default 3), KI_BIG_MIB (64), KI_KEEP=1 keeps the files afterwards,
# KI_FSX_SEED (random, printed) and KI_FSX_OPS (1500) for kc-fsx,
# KI_COHERE="N..." (1-based export numbers) adds the coherence check on those exports: the
# host rewrites a file the guest has read (same size, same mtime, new bytes) through
# BACKING_DIR, and the guest's next open must read the new bytes (close-to-open, the mount's
# default attribute cache options); plus everything kclient.sh reads (KC_RUN_DIR, KC_VERBOSE, ...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
die() { echo "kernel-interop: FAIL: $*" >&2; exit 1; }
[ $# -ge 4 ] && [ $(($# % 2)) = 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
PORT="$1" MPORT="$2"
shift 2
EXPORTS=() BACKS=()
while [ $# -gt 0 ]; do
    case "$1" in *[[:space:]]*) die "export path '$1' has white space" ;; esac
    [ -d "$2" ] || die "backing dir $2 does not exist"
    EXPORTS+=("$1") BACKS+=("$(cd "$2" && pwd -P)")
    shift 2
done
N=${#EXPORTS[@]}

TAG="ki-$$"
WORK="$TAG-work" HTREE="$TAG-host-tree" HFILE="$TAG-host.bin" COH="$TAG-coherence.bin"
BIG_MIB="${KI_BIG_MIB:-64}"
COHERE="${KI_COHERE:-}"
# The coherence file's mtime, before and after the host's rewrite: the rewrite keeps size and
# mtime, so only the change attribute (v4) or ctime (v3) tells the client the data changed.
COH_MTIME=1577836800
REPO="$(cd "$HERE/../.." && pwd -P)"
RUN="${KC_RUN_DIR:-$REPO/target/kclient-results/kernel-interop-$(date +%Y%m%d-%H%M%S)-$$}"
export KC_RUN_DIR="$RUN"
SCRATCH="$(mktemp -d)"
FSX_SEED="${KI_FSX_SEED:-$((RANDOM * 32768 + RANDOM))}"
FSX_OPS="${KI_FSX_OPS:-1500}"
echo "kernel-interop: kc-fsx seed $FSX_SEED (+ the export's number; KI_FSX_SEED=$FSX_SEED replays it)"
command -v gcc >/dev/null || die "gcc not found (run scripts/install-deps.sh)"

cleanup() {
    if [ "${KI_KEEP:-0}" != 1 ]; then
        for b in "${BACKS[@]}"; do
            rm -rf "${b:?}/$WORK" "${b:?}/$HTREE" "${b:?}/$HFILE" "${b:?}/$COH"
        done
    fi
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

# ------------------------------------------------------------------ host-placed data
# Made once in a scratch dir and copied into every backing dir (for a Ceph export the copy
# goes through ceph-fuse).
mkdir -p "$SCRATCH/tree/a/b/c"
for i in $(seq 1 20); do head -c $((i * 777)) /dev/urandom > "$SCRATCH/tree/file$i"; done
for i in 1 2 3 4 5; do echo "nested $i" > "$SCRATCH/tree/a/b/c/n$i.txt"; done
: > "$SCRATCH/tree/a/empty"
ln -s a/b/c/n1.txt "$SCRATCH/tree/rel-link"
head -c $((BIG_MIB * 1048576)) /dev/urandom > "$SCRATCH/host.bin"
HSUM="$(sha256sum "$SCRATCH/host.bin" | cut -d' ' -f1)"
head -c 65536 /dev/urandom > "$SCRATCH/coh-1.bin"
head -c 65536 /dev/urandom > "$SCRATCH/coh-2.bin"
COH1="$(sha256sum "$SCRATCH/coh-1.bin" | cut -d' ' -f1)"
COH2="$(sha256sum "$SCRATCH/coh-2.bin" | cut -d' ' -f1)"
for b in "${BACKS[@]}"; do
    cp -a "$SCRATCH/tree" "$b/$HTREE"
    cp "$SCRATCH/host.bin" "$b/$HFILE"
done
for i in $COHERE; do
    [ "$i" -ge 1 ] && [ "$i" -le "$N" ] || die "KI_COHERE names export $i of $N"
    b="${BACKS[$((i - 1))]}"
    cp "$SCRATCH/coh-1.bin" "$b/$COH"
    touch -m -d "@$COH_MTIME" "$b/$COH"
done

# ------------------------------------------------------------------ the guest
# The helpers are built fresh for each run (a second each), beside the run folder's files.
mkdir -p "$RUN/build"
for t in kc-lock kc-fsx; do
    gcc -static -O2 -Wall -o "$RUN/build/$t" "$HERE/guest/$t.c" || die "cannot build $t"
done
set +e
"$HERE/kclient.sh" "$PORT" "$MPORT" "${EXPORTS[0]}" "$HERE/guest/kernel-interop.sh" \
    --file "$RUN/build/kc-lock" --file "$RUN/build/kc-fsx" \
    --env "KI_EXPORTS=${EXPORTS[*]}" --env "KI_FSX_SEED=$FSX_SEED" --env "KI_FSX_OPS=$FSX_OPS" \
    --env "KI_WORK=$WORK" --env "KI_HOST_TREE=$HTREE" --env "KI_HOST_FILE=$HFILE" \
    --env "KI_BIG_MIB=$BIG_MIB" --env "KI_COHERE=$COHERE" --env "KI_COH_FILE=$COH" \
    --env "KI_COH_SUM1=$COH1" --env "KI_COH_SUM2=$COH2" &
GUEST=$!
set -e

# The coherence check's host half: once the guest has read the file of export i (marker
# coh-i-read in the live run folder), rewrite it in place through the backing dir with the
# same size and mtime, and tell the guest (coh-i-changed).
for i in $COHERE; do
    b="${BACKS[$((i - 1))]}"
    t=0
    while [ ! -e "$RUN/out/coh-$i-read" ] && kill -0 "$GUEST" 2>/dev/null && [ $t -lt 6000 ]; do
        sleep 0.1; t=$((t + 1))
    done
    [ -e "$RUN/out/coh-$i-read" ] || break
    dd if="$SCRATCH/coh-2.bin" of="$b/$COH" bs=65536 conv=notrunc,fsync status=none
    touch -m -d "@$COH_MTIME" "$b/$COH"
    [ "$(sha256sum "$b/$COH" | cut -d' ' -f1)" = "$COH2" ] || die "the host's rewrite of $b/$COH did not take"
    : > "$RUN/out/coh-$i-changed"
done
set +e
wait "$GUEST"
rc=$?
set -e
[ "$rc" = 0 ] || die "guest script failed (rc $rc); run folder $RUN"

# ------------------------------------------------------------------ verify on the host
for i in $(seq 1 "$N"); do
    EXPORT="${EXPORTS[$((i - 1))]}" BACK="${BACKS[$((i - 1))]}"
    SUMS="$RUN/out/e$i-sums.txt"
    [ -s "$SUMS" ] || die "guest saved no e$i-sums.txt for $EXPORT ($RUN)"
    n=0
    while read -r sum path; do
        case "$sum" in
            host:*)
                [ "${sum#host:}" = "$HSUM" ] \
                    || die "$EXPORT: guest read host file $path as sha256 ${sum#host:}, host has $HSUM" ;;
            *)
                [ -f "$BACK/$path" ] || die "$EXPORT: guest wrote $path but it is not in $BACK"
                got="$(sha256sum "$BACK/$path" | cut -d' ' -f1)"
                [ "$got" = "$sum" ] || die "$EXPORT: $path: guest wrote sha256 $sum, $BACK has $got"
                n=$((n + 1)) ;;
        esac
    done < "$SUMS"
    grep -q "^host:$HSUM" "$SUMS" || die "$EXPORT: guest did not report the host file's checksum"
    [ "$n" -ge 30 ] || die "$EXPORT: only $n files verified (expected >= 30)"
    [ "$(readlink "$BACK/$WORK/newlink")" = tree-kept/sub/s5.txt ] \
        || die "$EXPORT: symlink made by the guest reads differently on the host"
    [ ! -e "$BACK/$WORK/tree" ] || die "$EXPORT: rm -r in the guest left $WORK/tree on the host"
    [ "$(readlink "$BACK/$WORK/tree-kept/link-to-dir")" = sub/deeper ] \
        || die "$EXPORT: symlink copied by cp -a differs on the host"
    coh=""
    case " $COHERE " in *" $i "*)
        ms="$(cat "$RUN/out/coh-$i-ms" 2>/dev/null)" || die "$EXPORT: the guest saved no coherence time"
        coh="; a host rewrite read at the next open (${ms} ms)" ;;
    esac
    [ -n "${KC_VERBOSE:-}" ] && echo "kernel-interop: PASS ($n files verified on the host, host file sha256 ok$coh; export $EXPORT; run folder $RUN)"
done
exit 0
