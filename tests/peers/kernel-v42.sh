#!/usr/bin/env bash
# Host side of the kernel-client locks and NFSv4.2 test: builds guest/v42-tool.c with
# `gcc -static`, runs guest/kernel-v42.sh in the kclient guest (kclient.sh, one boot, the
# export mounted with vers=4.1 and vers=4.2), then checks on the host the SHA-256 of what the
# guest copied and that the sparse file's holes are holes in the backing file.
#
#   kernel-v42.sh NFS_PORT EXPORT BACKING_DIR
#
# EXPORT is the server's v4 path of the export; BACKING_DIR the local directory it serves.
# Environment: KV_COPY_MIB (40), KV_KEEP=1 keeps the files afterwards, plus everything
# kclient.sh reads (KC_RUN_DIR, KC_VERBOSE, KC_TIMEOUT, ...).
# KV_XATTR="PORT EXPORT BACKING_DIR": the same boot then also runs kernel-xattr.sh's guest
# checks against that (other) server, after the v42 checks, with kernel-xattr.sh preparing
# and verifying them (KX_PHASE); their guest output goes to RUN/out/xattr.log and the xattr
# verdict to RUN/xattr-verdict.txt, so this script's own output and status stay the v42
# checks' alone.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
die() { echo "kernel-v42: FAIL: $*" >&2; exit 1; }
[ $# -eq 3 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
PORT="$1" EXPORT="$2" BACK="$3"
[ -d "$BACK" ] || die "backing dir $BACK does not exist"
BACK="$(cd "$BACK" && pwd -P)"
command -v gcc >/dev/null || die "gcc not found (run scripts/install-deps.sh)"

WORK="kv-$$"
COPY_MIB="${KV_COPY_MIB:-40}"
REPO="$(cd "$HERE/../.." && pwd -P)"
RUN="${KC_RUN_DIR:-$REPO/target/kclient-results/kernel-v42-$(date +%Y%m%d-%H%M%S)-$$}"
export KC_RUN_DIR="$RUN"
mkdir -p "$RUN"

XATTR=()
if [ -n "${KV_XATTR:-}" ]; then
    read -r XPORT XEXPORT XBACK <<< "$KV_XATTR"
    XWORK="kx-$$"
fi
cleanup() {
    if [ "${KV_KEEP:-0}" != 1 ]; then
        rm -rf "${BACK:?}/$WORK"
        [ -z "${XWORK:-}" ] || rm -rf "${XBACK:?}/$XWORK"
    fi
}
trap cleanup EXIT
if [ -n "${KV_XATTR:-}" ]; then
    KX_PHASE=prepare KX_WORK="$XWORK" "$HERE/kernel-xattr.sh" "$XPORT" "$XEXPORT" "$XBACK" \
        > "$RUN/xattr-options.txt" || die "kernel-xattr.sh prepare failed"
    mapfile -t XATTR < "$RUN/xattr-options.txt"
fi

# The helper is built fresh for each run (a second on this machine), beside the run folder's
# files (run.sh copies what --file names into the run folder itself).
mkdir -p "$RUN/build"
TOOL="$RUN/build/v42-tool"
gcc -static -O2 -Wall -o "$TOOL" "$HERE/guest/v42-tool.c" || die "cannot build v42-tool"

set +e
KC_VERS=4.2 "$HERE/kclient.sh" "$PORT" "$PORT" "$EXPORT" "$HERE/guest/kernel-v42.sh" \
    --file "$TOOL" --env "KV_WORK=$WORK" --env "KV_COPY_MIB=$COPY_MIB" "${XATTR[@]}"
rc=$?
if [ -n "${KV_XATTR:-}" ]; then
    KX_PHASE=verify KX_WORK="$XWORK" KX_KEEP="${KV_KEEP:-0}" KX_GUEST_RC="$(cat "$RUN/out/xattr.rc" 2>/dev/null || echo none)" \
        "$HERE/kernel-xattr.sh" "$XPORT" "$XEXPORT" "$XBACK" > "$RUN/xattr-verdict.txt" 2>&1
fi
set -e
[ "$rc" = 0 ] || die "guest script failed (rc $rc); run folder $RUN"

# ------------------------------------------------------------------ verify on the host
SUMS="$RUN/out/sums.txt"
[ -s "$SUMS" ] || die "guest saved no sums.txt ($RUN)"
n=0
while read -r sum path; do
    [ -f "$BACK/$path" ] || die "guest wrote $path but it is not in $BACK"
    got="$(sha256sum "$BACK/$path" | cut -d' ' -f1)"
    [ "$got" = "$sum" ] || die "$path: guest read sha256 $sum, backing file has $got"
    n=$((n + 1))
done < "$SUMS"
[ "$n" -ge 3 ] || die "only $n files verified (expected >= 3)"
size="$(stat -c %s "$BACK/$WORK/copy.bin")"
[ "$size" = $((COPY_MIB * 1048576)) ] || die "copy.bin is $size bytes on the host"
# The sparse file: 5 MiB long; the punched [0,64K) and the never-written [64K,1M) are zeros,
# [1M,1M+64K) is the data the guest wrote (not zero).
SP="$BACK/$WORK/sparse"
[ "$(stat -c %s "$SP")" = 5242880 ] || die "sparse is $(stat -c %s "$SP") bytes on the host"
cmp -s -n 1048576 "$SP" /dev/zero || die "sparse: [0,1M) is not all zeros on the host"
! cmp -s -n 65536 <(tail -c +1048577 "$SP") /dev/zero || die "sparse: [1M,1M+64K) lost its data"
[ -n "${KC_VERBOSE:-}" ] && echo "kernel-v42: PASS ($n files verified on the host; run folder $RUN)"
exit 0
