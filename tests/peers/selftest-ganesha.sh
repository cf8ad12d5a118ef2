#!/usr/bin/env bash
# Proves the peer scripts themselves against nfs-ganesha (a server nobody here wrote):
# ganesha.sh start, libnfs-interop.sh under a tshark-check.sh capture, kernel-interop.sh
# (the Linux kernel client in the kclient guest), ganesha.sh stop. If this fails, the test
# tooling or the machine is broken, not sluice.
#
#   selftest-ganesha.sh            (as root)
# Environment: SELFTEST_PORT (NFS port; MOUNT = +1) [first free pair from 20490],
#   SELFTEST_SKIP_KCLIENT=1 skips the kernel client part, SELFTEST_DIR [target/peers-selftest].
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
die() { echo "selftest-ganesha: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"

D="${SELFTEST_DIR:-$REPO/target/peers-selftest}"
EXP="$D/export" ST="$D/ganesha-state" CAP="$D/libnfs.pcapng"
PORT="${SELFTEST_PORT:-}"
if [ -z "$PORT" ]; then
    for p in $(seq 20490 2 20590); do
        if [ -z "$(ss -Htln "( sport = :$p or sport = :$((p + 1)) )")" ]; then PORT=$p; break; fi
    done
    [ -n "$PORT" ] || die "no free port pair in 20490..20591"
fi
MPORT=$((PORT + 1))

cleanup() {
    "$HERE/tshark-check.sh" stop "$CAP" >/dev/null 2>&1 || true
    "$HERE/ganesha.sh" stop "$ST" || true
}
trap cleanup EXIT

"$HERE/ganesha.sh" stop "$ST"
rm -rf "$EXP"; mkdir -p "$EXP"
t0=$(date +%s.%N)
"$HERE/ganesha.sh" start "$EXP" "$PORT" "$ST"
t1=$(date +%s.%N)
echo "selftest-ganesha: ganesha up on 127.0.0.1:$PORT (mount $MPORT) in $(echo "$t1 - $t0" | bc) s"

"$HERE/tshark-check.sh" start "$PORT,$MPORT" "$CAP"
LIBNFS_V4=1 "$HERE/libnfs-interop.sh" 127.0.0.1 "$PORT" "$MPORT" "$EXP" "$EXP"
t2=$(date +%s.%N)
"$HERE/tshark-check.sh" stop "$CAP"
echo "selftest-ganesha: libnfs-interop PASS in $(echo "$t2 - $t1" | bc) s"
"$HERE/tshark-check.sh" check "$CAP" "$PORT,$MPORT" MOUNT3.MNT NFS3.LOOKUP NFS3.READDIRPLUS \
    NFS3.CREATE NFS3.WRITE NFS3.COMMIT NFS3.READ NFS4.op.READ > "$D/libnfs.procs"
echo "selftest-ganesha: tshark-check PASS ($(tail -n 1 "$D/libnfs.procs"))"
rm -f "$CAP"   # ~500 MB

if [ "${SELFTEST_SKIP_KCLIENT:-0}" != 1 ]; then
    t3=$(date +%s.%N)
    "$HERE/kernel-interop.sh" "$PORT" "$MPORT" "$EXP" "$EXP"
    echo "selftest-ganesha: kernel-interop PASS in $(echo "$(date +%s.%N) - $t3" | bc) s"
fi
echo "selftest-ganesha: PASS"
