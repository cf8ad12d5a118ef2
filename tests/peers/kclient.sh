#!/usr/bin/env bash
# The real Linux kernel NFS client against a server on 127.0.0.1, via the harness in kclient/.
#
#   kclient.sh build                                      build the guest once (cached)
#   kclient.sh NFS_PORT MOUNT_PORT EXPORT GUEST_SCRIPT [RUN.SH OPTIONS...]
#       boot the guest, mount 127.0.0.1:EXPORT (the guest sees the server as 10.0.2.2),
#       run GUEST_SCRIPT there (busybox sh, kc-lib.sh helpers sourced), exit with its status
#       (124 timeout, 125 set-up error). Extra options go to run.sh (e.g. --file PATH, --env K=V,
#       -o MOUNTOPTS, --fwd HOSTPORT[:GUESTPORT]). The guest script mounts by itself (kc_mount;
#       v3 with locking: kc_nsm and KC_LOCK=1, see kclient/guest/kc-lib.sh).
#
# Environment:
#   KC_VERS             3 | 4.1 ...                  [3]
#   KC_TIMEOUT          guest timeout in seconds     [600]
#   KC_RUN_DIR          run folder (console.log, out/guest.log, out/* saved by kc_save)
#                       [REPO/target/kclient-results/NAME-DATE-PID]
#   KC_VERBOSE=1        echo the guest's output even on success
#   KC_SUITE=trixie     the Debian 13 guest (kernel 6.12, tlshd: RPC-with-TLS mounts) in
#                       target/kclient-cache-trixie instead of the default Debian 12 one
# Cache and results stay in the repo's ignored target/: target/kclient-cache (~550 MB, the
# kernel + initramfs, built once, about a minute) and target/kclient-results.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
KDIR="$HERE/kclient"
case "${KC_SUITE:-host}" in
    trixie) export KC_CACHE="${KC_CACHE:-$REPO/target/kclient-cache-trixie}" ;;
    *) export KC_CACHE="${KC_CACHE:-$REPO/target/kclient-cache}" ;;
esac
export KC_RESULTS="${KC_RESULTS:-$REPO/target/kclient-results}"

die() { echo "kclient.sh: ERROR: $*" >&2; exit 125; }
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 125; }

[ -x "$KDIR/run.sh" ] && [ -x "$KDIR/build.sh" ] \
    || die "no kclient harness (build.sh, run.sh) at $KDIR"
[ "$(id -u)" = 0 ] || die "must run as root (qemu 9p export of the run folder)"
KDIR="$(cd "$KDIR" && pwd -P)"

build() {
    mkdir -p "$KC_CACHE"
    # one build at a time (parallel test jobs); build.sh itself is a no-op when up to date
    exec 9>"$KC_CACHE/.sluice-build.lock"
    timeout 900 flock 9 || die "timed out waiting for another kclient build"
    if ! timeout -k 10 900 "$KDIR/build.sh" >"$KC_CACHE/.sluice-build.log" 2>&1; then
        # a machine whose packages were preinstalled may have no apt lists: build.sh needs them
        if grep -qE 'apt-get update|cannot resolve' "$KC_CACHE/.sluice-build.log"; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            timeout -k 10 900 "$KDIR/build.sh" >"$KC_CACHE/.sluice-build.log" 2>&1 \
                || { cat "$KC_CACHE/.sluice-build.log" >&2; die "kclient build.sh failed"; }
        else
            cat "$KC_CACHE/.sluice-build.log" >&2; die "kclient build.sh failed"
        fi
    fi
    exec 9>&-
}

[ $# -ge 1 ] || usage
if [ "$1" = build ]; then build; exit 0; fi
[ $# -ge 4 ] || usage
PORT="$1" MPORT="$2" EXPORT="$3" SCRIPT="$4"; shift 4
[[ "$PORT" =~ ^[0-9]+$ && "$MPORT" =~ ^[0-9]+$ ]] || die "ports must be numbers ($PORT, $MPORT)"
[ -f "$SCRIPT" ] || die "no guest script $SCRIPT"
for c in qemu-system-x86_64 timeout flock bc; do
    command -v "$c" >/dev/null || die "$c not found (run scripts/install-deps.sh)"
done

build

name="$(basename "$SCRIPT" .sh)"
RUN="${KC_RUN_DIR:-$KC_RESULTS/$name-$(date +%Y%m%d-%H%M%S)-$$}"
mkdir -p "$RUN"
TIMEOUT="${KC_TIMEOUT:-600}"

set +e
# run.sh has its own guest timeout; the outer one only guards against a hung run.sh
timeout -k 10 $((TIMEOUT + 60)) "$KDIR/run.sh" -q -p "$PORT" -m "$MPORT" -e "$EXPORT" \
    -v "${KC_VERS:-3}" -t "$TIMEOUT" -O "$RUN" "$@" "$SCRIPT" 2>"$RUN/run.sh.log"
rc=$?
set -e
[ "$rc" = 124 ] || [ "$rc" = 137 ] && rc=124

if [ "$rc" != 0 ]; then
    {
        echo "kclient.sh: FAIL: guest script $SCRIPT exited $rc (server 127.0.0.1:$PORT mount $MPORT export $EXPORT)"
        echo "---- run.sh"; cat "$RUN/run.sh.log"
        if [ -s "$RUN/out/guest.log" ]; then echo "---- guest.log"; cat "$RUN/out/guest.log"
        else echo "---- console.log (tail)"; tail -n 40 "$RUN/console.log" 2>/dev/null; fi
        echo "---- dmesg (NFS/RPC lines)"
        grep -iE 'nfs|rpc|server' "$RUN/out/dmesg.txt" 2>/dev/null | tail -n 20
        echo "---- run folder: $RUN"
    } >&2
    exit "$rc"
fi
if [ "${KC_VERBOSE:-0}" = 1 ]; then
    cat "$RUN/out/guest.log"
    echo "kclient.sh: ok, $(tr '\n' ' ' < "$RUN/summary.txt")run folder $RUN" >&2
fi
exit 0
