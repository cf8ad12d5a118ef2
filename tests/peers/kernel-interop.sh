#!/usr/bin/env bash
# Host side of the kernel-client interop test: places a tree and a 64 MiB file in each export's
# backing dir, runs guest/kernel-interop.sh in one kclient guest (kclient.sh), which for each
# NFS version of KI_VERSIONS (all at once) mounts every export in turn and runs the workload on
# each (one "run" per version and export, numbered from 1, each in its own work folder), then
# checks on the host what the guest wrote in every run (sha256 of every kept file) and that
# the guest read the host file correctly.
#
#   kernel-interop.sh NFS_PORT MOUNT_PORT EXPORT BACKING_DIR [EXPORT BACKING_DIR]...
#
# EXPORT is a path the server exports (v3 MOUNT path, v4 path); BACKING_DIR is where the host
# reads and writes that export's files directly: the served local directory (for sluice and
# ganesha usually the same path as EXPORT), or for a Ceph export a ceph-fuse mount of it (so
# the checksums are those an independent Ceph client reads).
# It builds the guest's two static helpers with gcc: guest/kc-lock.c (an fcntl lock held by one
# process, probed by another) and guest/kc-fsx.c (fsx-style random operations against a model).
# Environment: KI_VERSIONS, NFS versions space separated (default KC_VERS, default 3), each
# VERS or VERS@PORT: that version mounts the server on PORT (NFS and MOUNT; one server per
# version, serving the same EXPORTs) instead of NFS_PORT/MOUNT_PORT;
# KI_BIG_MIB (64), KI_KEEP=1 keeps the files afterwards,
# KI_FSX_SEED (random, printed) and KI_FSX_OPS (1500) for kc-fsx,
# KI_COHERE="N..." (1-based export numbers) adds the coherence check on those exports: the
# host rewrites a file the guest has read (same size, same mtime, new bytes) through
# BACKING_DIR, and the guest's next open must read the new bytes (close-to-open, the mount's
# default attribute cache options), at every version; plus everything kclient.sh reads (KC_RUN_DIR, KC_VERBOSE, ...).
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
VERSIONS="${KI_VERSIONS:-${KC_VERS:-3}}"
for spec in $VERSIONS; do
    case "${spec%%@*}" in 3|4.1|4.2) ;; *) die "KI_VERSIONS: unknown NFS version in $spec" ;; esac
done

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
            rm -rf "${b:?}/$WORK"-* "${b:?}/$HTREE" "${b:?}/$HFILE" "${b:?}/$COH"-*
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
done
# RUNS: one "VERS EXPORT_INDEX" line per run, in the guest's order (run k is line k).
RUNS=()
for spec in $VERSIONS; do
    for i in $(seq 1 "$N"); do RUNS+=("${spec%%@*} $i"); done
done
coherent() { case " $COHERE " in *" $1 "*) return 0 ;; esac; return 1; }
for k in $(seq 1 "${#RUNS[@]}"); do
    read -r v i <<< "${RUNS[$((k - 1))]}"
    coherent "$i" || continue
    b="${BACKS[$((i - 1))]}"
    cp "$SCRATCH/coh-1.bin" "$b/$COH-$k"
    touch -m -d "@$COH_MTIME" "$b/$COH-$k"
done

# ------------------------------------------------------------------ the guest
# The helpers are built fresh for each run (a second each), beside the run folder's files.
mkdir -p "$RUN/build"
for t in kc-lock kc-fsx; do
    gcc -static -O2 -Wall -o "$RUN/build/$t" "$HERE/guest/$t.c" || die "cannot build $t"
done
set +e
KC_VERS="$(echo "${VERSIONS%% *}" | cut -d@ -f1)" "$HERE/kclient.sh" "$PORT" "$MPORT" "${EXPORTS[0]}" "$HERE/guest/kernel-interop.sh" \
    --file "$RUN/build/kc-lock" --file "$RUN/build/kc-fsx" \
    --env "KI_VERSIONS=$VERSIONS" \
    --env "KI_EXPORTS=${EXPORTS[*]}" --env "KI_FSX_SEED=$FSX_SEED" --env "KI_FSX_OPS=$FSX_OPS" \
    --env "KI_WORK=$WORK" --env "KI_HOST_TREE=$HTREE" --env "KI_HOST_FILE=$HFILE" \
    --env "KI_BIG_MIB=$BIG_MIB" --env "KI_COHERE=$COHERE" --env "KI_COH_FILE=$COH" \
    --env "KI_COH_SUM1=$COH1" --env "KI_COH_SUM2=$COH2" &
GUEST=$!
set -e

# The coherence check's host half, for each run on an export of KI_COHERE, in whatever order
# the versions get there: once the guest has read run k's file (marker coh-k-read in the live
# run folder), rewrite it in place through the backing dir with the same size and mtime, and
# tell the guest (coh-k-changed). Until every such run is served or the guest is gone.
PENDING=()
for k in $(seq 1 "${#RUNS[@]}"); do
    read -r v i <<< "${RUNS[$((k - 1))]}"
    coherent "$i" && PENDING+=("$k")
done
while [ ${#PENDING[@]} -gt 0 ] && kill -0 "$GUEST" 2>/dev/null; do
    LEFT=()
    for k in "${PENDING[@]}"; do
        if [ ! -e "$RUN/out/coh-$k-read" ]; then LEFT+=("$k"); continue; fi
        read -r v i <<< "${RUNS[$((k - 1))]}"
        b="${BACKS[$((i - 1))]}"
        dd if="$SCRATCH/coh-2.bin" of="$b/$COH-$k" bs=65536 conv=notrunc,fsync status=none
        touch -m -d "@$COH_MTIME" "$b/$COH-$k"
        [ "$(sha256sum "$b/$COH-$k" | cut -d' ' -f1)" = "$COH2" ] \
            || die "the host's rewrite of $b/$COH-$k did not take"
        : > "$RUN/out/coh-$k-changed"
    done
    PENDING=("${LEFT[@]}")
    sleep 0.1
done
set +e
wait "$GUEST"
rc=$?
set -e
[ "$rc" = 0 ] || die "guest script failed (rc $rc); run folder $RUN"

# ------------------------------------------------------------------ verify on the host
for k in $(seq 1 "${#RUNS[@]}"); do
    read -r v i <<< "${RUNS[$((k - 1))]}"
    # The verdicts name the version and the export ("vers 4.1 export /vol").
    EXPORT="vers $v export ${EXPORTS[$((i - 1))]}" BACK="${BACKS[$((i - 1))]}" W="$WORK-$k"
    SUMS="$RUN/out/e$k-sums.txt"
    [ -s "$SUMS" ] || die "guest saved no e$k-sums.txt for $EXPORT ($RUN)"
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
    [ "$(readlink "$BACK/$W/newlink")" = tree-kept/sub/s5.txt ] \
        || die "$EXPORT: symlink made by the guest reads differently on the host"
    [ ! -e "$BACK/$W/tree" ] || die "$EXPORT: rm -r in the guest left $W/tree on the host"
    [ "$(readlink "$BACK/$W/tree-kept/link-to-dir")" = sub/deeper ] \
        || die "$EXPORT: symlink copied by cp -a differs on the host"
    coh=""
    if coherent "$i"; then
        ms="$(cat "$RUN/out/coh-$k-ms" 2>/dev/null)" || die "$EXPORT: the guest saved no coherence time"
        coh="; a host rewrite read at the next open (${ms} ms)"
    fi
    [ -n "${KC_VERBOSE:-}" ] && echo "kernel-interop: PASS ($n files verified on the host, host file sha256 ok$coh; $EXPORT; run folder $RUN)"
done
exit 0
