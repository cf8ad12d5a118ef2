#!/usr/bin/env bash
# Host side of the kernel-client extended-attribute test (RFC 8276): makes a file with a
# user.host attribute in the backing directory, builds guest/xattr-tool.c with `gcc -static`,
# runs guest/kernel-xattr.sh in the kclient guest (kclient.sh, one boot, vers=4.2 and vers=4.1
# mounts), then checks on the host what the guest left: user.kernel and user.big set,
# user.tmp removed, nothing set through the 4.1 mount.
#
#   kernel-xattr.sh NFS_PORT EXPORT BACKING_DIR
#
# EXPORT is the server's v4 path of the export; BACKING_DIR the local directory it serves
# (on a file system with user extended attributes). Environment: KX_KEEP=1 keeps the files
# afterwards, plus everything kclient.sh reads (KC_RUN_DIR, KC_VERBOSE, KC_TIMEOUT, ...).
# KX_PHASE lets another driver's boot run these checks too (kernel-v42.sh's KV_XATTR): all
# (default: prepare, boot, verify), prepare (make the file, build the tool, print the run.sh
# options the guest needs, one word a line, and keep the files), verify (check what the
# guest left; KX_GUEST_RC is the guest script's status). Both name the work folder KX_WORK.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
die() { echo "kernel-xattr: FAIL: $*" >&2; exit 1; }
[ $# -eq 3 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
PORT="$1" EXPORT="$2" BACK="$3"
[ -d "$BACK" ] || die "backing dir $BACK does not exist"
BACK="$(cd "$BACK" && pwd -P)"
command -v gcc >/dev/null || die "gcc not found (run scripts/install-deps.sh)"
command -v setfattr >/dev/null && command -v getfattr >/dev/null \
    || die "setfattr/getfattr not found (package attr; run scripts/install-deps.sh)"

WORK="${KX_WORK:-kx-$$}"
PHASE="${KX_PHASE:-all}"
REPO="$(cd "$HERE/../.." && pwd -P)"
RUN="${KC_RUN_DIR:-$REPO/target/kclient-results/kernel-xattr-$(date +%Y%m%d-%H%M%S)-$$}"
export KC_RUN_DIR="$RUN"
mkdir -p "$RUN"

cleanup() { if [ "${KX_KEEP:-0}" != 1 ]; then rm -rf "${BACK:?}/$WORK"; fi; }
[ "$PHASE" = prepare ] || trap cleanup EXIT

F="$BACK/$WORK/f"
TOOL="$RUN/build/xattr-tool"
if [ "$PHASE" != verify ]; then
    mkdir -p "$BACK/$WORK"
    echo data > "$F"
    chmod 666 "$F"
    setfattr -n user.host -v from-host "$F" || die "the backing file system takes no user xattrs"
    mkdir -p "$RUN/build"
    gcc -static -O2 -Wall -o "$TOOL" "$HERE/guest/xattr-tool.c" || die "cannot build xattr-tool"
fi
if [ "$PHASE" = prepare ]; then
    # For a guest script that runs /kc/kernel-xattr.sh against this server (KX_PORT).
    printf '%s\n' --file "$TOOL" --file "$HERE/guest/kernel-xattr.sh" --env "KX_WORK=$WORK" \
        --env "KX_PORT=$PORT" --env "KX_EXPORT=$EXPORT"
    exit 0
fi

if [ "$PHASE" = verify ]; then
    rc="${KX_GUEST_RC:-unknown}"
else
    set +e
    KC_VERS=4.2 "$HERE/kclient.sh" "$PORT" "$PORT" "$EXPORT" "$HERE/guest/kernel-xattr.sh" \
        --file "$TOOL" --env "KX_WORK=$WORK"
    rc=$?
    set -e
fi
[ "$rc" = 0 ] || die "guest script failed (rc $rc); run folder $RUN"

# ------------------------------------------------------------------ verify on the host
val() { getfattr --only-values -n "$1" "$F" 2>/dev/null; }
[ "$(val user.kernel)" = from-guest ] || die "user.kernel on the host: '$(val user.kernel)'"
[ "$(val user.host)" = from-host ] || die "user.host on the host: '$(val user.host)'"
len="$(getfattr --only-values -n user.big "$F" 2>/dev/null | wc -c)"
[ "$len" = 3000 ] || die "user.big on the host is $len bytes"
! getfattr -n user.tmp "$F" >/dev/null 2>&1 || die "user.tmp is still on the host"
! getfattr -n user.v41 "$F" >/dev/null 2>&1 || die "the 4.1 mount set user.v41"
[ "$(cat "$F")" = data ] || die "the file's data changed"
[ -n "${KC_VERBOSE:-}" ] && echo "kernel-xattr: PASS (attributes verified on the host; run folder $RUN)"
exit 0
