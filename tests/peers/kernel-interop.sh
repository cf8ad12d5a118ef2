#!/usr/bin/env bash
# Host side of the kernel-client interop test: places a tree and a 64 MiB file in the export's
# backing dir, runs guest/kernel-interop.sh in the kclient guest (kclient.sh), then checks on
# the host what the guest wrote (sha256 of every kept file) and that the guest read the host
# file correctly.
#
#   kernel-interop.sh NFS_PORT MOUNT_PORT EXPORT BACKING_DIR
#
# EXPORT is the path the server exports (v3 MOUNT path); BACKING_DIR is the local directory
# the server serves it from (for sluice and ganesha usually the same path).
# Environment: KC_VERS (default 3), KI_BIG_MIB (64), KI_KEEP=1 keeps the files afterwards,
# plus everything kclient.sh reads (KC_RUN_DIR, KC_VERBOSE, ...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
die() { echo "kernel-interop: FAIL: $*" >&2; exit 1; }
[ $# -eq 4 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
PORT="$1" MPORT="$2" EXPORT="$3" BACK="$4"
[ -d "$BACK" ] || die "backing dir $BACK does not exist"
BACK="$(cd "$BACK" && pwd -P)"

TAG="ki-$$"
WORK="$TAG-work" HTREE="$TAG-host-tree" HFILE="$TAG-host.bin"
BIG_MIB="${KI_BIG_MIB:-64}"
REPO="$(cd "$HERE/../.." && pwd -P)"
RUN="${KC_RUN_DIR:-$REPO/target/kclient-results/kernel-interop-$(date +%Y%m%d-%H%M%S)-$$}"
export KC_RUN_DIR="$RUN"

cleanup() {
    if [ "${KI_KEEP:-0}" != 1 ]; then rm -rf "${BACK:?}/$WORK" "${BACK:?}/$HTREE" "${BACK:?}/$HFILE"; fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ host-placed data
mkdir -p "$BACK/$HTREE/a/b/c"
for i in $(seq 1 20); do head -c $((i * 777)) /dev/urandom > "$BACK/$HTREE/file$i"; done
for i in 1 2 3 4 5; do echo "nested $i" > "$BACK/$HTREE/a/b/c/n$i.txt"; done
: > "$BACK/$HTREE/a/empty"
ln -s a/b/c/n1.txt "$BACK/$HTREE/rel-link"
head -c $((BIG_MIB * 1048576)) /dev/urandom > "$BACK/$HFILE"
HSUM="$(sha256sum "$BACK/$HFILE" | cut -d' ' -f1)"

# ------------------------------------------------------------------ the guest
set +e
"$HERE/kclient.sh" "$PORT" "$MPORT" "$EXPORT" "$HERE/guest/kernel-interop.sh" \
    --env "KI_WORK=$WORK" --env "KI_HOST_TREE=$HTREE" --env "KI_HOST_FILE=$HFILE" \
    --env "KI_BIG_MIB=$BIG_MIB"
rc=$?
set -e
[ "$rc" = 0 ] || die "guest script failed (rc $rc); run folder $RUN"

# ------------------------------------------------------------------ verify on the host
SUMS="$RUN/out/sums.txt"
[ -s "$SUMS" ] || die "guest saved no sums.txt ($RUN)"
n=0
while read -r sum path; do
    case "$sum" in
        host:*)
            [ "${sum#host:}" = "$HSUM" ] \
                || die "guest read host file $path as sha256 ${sum#host:}, host has $HSUM" ;;
        *)
            [ -f "$BACK/$path" ] || die "guest wrote $path but it is not in $BACK"
            got="$(sha256sum "$BACK/$path" | cut -d' ' -f1)"
            [ "$got" = "$sum" ] || die "$path: guest wrote sha256 $sum, backing file has $got"
            n=$((n + 1)) ;;
    esac
done < "$SUMS"
grep -q "^host:$HSUM" "$SUMS" || die "guest did not report the host file's checksum"
[ "$n" -ge 30 ] || die "only $n files verified (expected >= 30)"
[ "$(readlink "$BACK/$WORK/newlink")" = tree-kept/sub/s5.txt ] || die "symlink made by the guest reads differently on the host"
[ ! -e "$BACK/$WORK/tree" ] || die "rm -r in the guest left $WORK/tree on the host"
[ "$(readlink "$BACK/$WORK/tree-kept/link-to-dir")" = sub/deeper ] || die "symlink copied by cp -a differs on the host"
[ -n "${KC_VERBOSE:-}" ] && echo "kernel-interop: PASS ($n files verified on the host, host file sha256 ok; run folder $RUN)"
exit 0
