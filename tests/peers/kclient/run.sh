#!/usr/bin/env bash
# Boots the kernel-client guest (../build.sh makes it), which mounts an NFS server running on
# this machine's 127.0.0.1, runs GUEST_SCRIPT, copies its results back and powers off.
#
#   run.sh [options] GUEST_SCRIPT
#
#   -p PORT        NFS port                                      [2049]
#   -m PORT        MOUNT port                                    [= -p]
#   -e PATH        export path (v3 MOUNT path, v4 path)          [/]
#   -v VERS        3 | 4 | 4.0 | 4.1 | 4.2                       [3]
#   -o OPTS        extra NFS mount options, comma separated
#   -c N / -M MiB  guest CPUs / memory                           [2 / 2048]
#   --env K=V      a variable for the guest script (repeatable)
#   --file PATH    copied into the run folder, /kc/NAME in the guest (repeatable)
#   --fwd H[:G]    forward this machine's 127.0.0.1:H (TCP and UDP) to the guest's port G
#                  [= H] (repeatable): how a server reaches the guest's rpcbind, statd, lockd
#   -O DIR         run folder: env, script.sh, console.log, out/ [REPO/target/kclient-results/run-*]
#   -t SEC         power the guest off after SEC seconds         [600]
#   -q             do not echo the serial console
#
# Networking is qemu's user mode only: the guest reaches this machine's 127.0.0.1 as 10.0.2.2,
# so the server listens on 127.0.0.1 and no traffic leaves loopback. The guest script runs
# under busybox sh with guest/kc-lib.sh sourced (kc_mount, kc_umount, kc_save, ...); what it
# writes to $KC_OUT comes back in DIR/out/. Exit status: the script's; 124 on timeout, 125 when
# the guest could not be set up. Needs root (qemu exports the run folder over 9p).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../../.." && pwd -P)"
# KC_SUITE=trixie: the Debian 13 guest (kernel 6.12 with tlshd, RPC-with-TLS; see build.sh)
case "${KC_SUITE:-host}" in
    trixie) CACHE="${KC_CACHE:-$REPO/target/kclient-cache-trixie}" ;;
    *) CACHE="${KC_CACHE:-$REPO/target/kclient-cache}" ;;
esac

PORT=2049 MOUNTPORT="" EXPORT=/ VERS=3 OPTS="" CPUS=2 MEM=2048 OUT="" TIMEOUT=600 QUIET=0
ENVS=() FILES=() NETDEV=user,id=n0
die() { echo "kclient run: ERROR: $*" >&2; exit 125; }
say() { echo "kclient run: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 125; }

while [ $# -gt 0 ]; do
    case "$1" in
        -p) PORT="$2"; shift 2 ;;
        -m) MOUNTPORT="$2"; shift 2 ;;
        -e) EXPORT="$2"; shift 2 ;;
        -v) VERS="$2"; shift 2 ;;
        -o) OPTS="$2"; shift 2 ;;
        -c) CPUS="$2"; shift 2 ;;
        -M) MEM="$2"; shift 2 ;;
        --env) ENVS+=("$2"); shift 2 ;;
        --file) FILES+=("$2"); shift 2 ;;
        --fwd)
            [[ "$2" =~ ^([0-9]+)(:([0-9]+))?$ ]] || die "bad --fwd $2 (HOSTPORT[:GUESTPORT])"
            h="${BASH_REMATCH[1]}" g="${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}"
            NETDEV="$NETDEV,hostfwd=tcp:127.0.0.1:$h-:$g,hostfwd=udp:127.0.0.1:$h-:$g"
            shift 2 ;;
        -O) OUT="$2"; shift 2 ;;
        -t) TIMEOUT="$2"; shift 2 ;;
        -q) QUIET=1; shift ;;
        -h|--help) usage ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || usage
SCRIPT="$1"
[ -f "$SCRIPT" ] || die "no guest script $SCRIPT"
[ "$(id -u)" = 0 ] || die "must run as root (9p export of the run folder)"
MOUNTPORT="${MOUNTPORT:-$PORT}"
case "$VERS" in 2|3|4|4.0|4.1|4.2) ;; *) die "bad -v $VERS" ;; esac
for c in qemu-system-x86_64 timeout bc; do
    command -v "$c" >/dev/null || die "$c not found (run scripts/install-deps.sh)"
done

# qemu's user-mode network: the guest is 10.0.2.15, the host's loopback answers as 10.0.2.2.
GUEST_SERVER=10.0.2.2 GUEST_IP=10.0.2.15/24

KERNEL="$CACHE/vmlinux" INITRD="$CACHE/initramfs.cpio"
mkdir -p "$CACHE"
"$HERE/build.sh" >/dev/null 2>"$CACHE/.build.log" || { cat "$CACHE/.build.log" >&2; die "build.sh failed"; }

[ -n "$OUT" ] || OUT="${KC_RESULTS:-$REPO/target/kclient-results}/run-$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
rm -rf "$OUT/out" && mkdir -p "$OUT/out"
cp "$SCRIPT" "$OUT/script.sh"
for f in "${FILES[@]}"; do cp -r "$f" "$OUT/"; done
q() { printf '%q' "$1"; }
{
    echo "export KC_SERVER=$(q "$GUEST_SERVER") KC_PORT=$(q "$PORT") KC_MOUNTPORT=$(q "$MOUNTPORT")"
    echo "export KC_EXPORT=$(q "$EXPORT") KC_VERS=$(q "$VERS") KC_OPTS=$(q "$OPTS")"
    for kv in "${ENVS[@]}"; do echo "export $(q "${kv%%=*}")=$(q "${kv#*=}")"; done
} > "$OUT/env"

# TCG: this machine's /dev/kvm cannot boot a stock kernel. qemu64 (no AVX2) runs 2-3x faster
# under TCG than -cpu max.
QEMU=(qemu-system-x86_64 -accel tcg,thread=multi -cpu qemu64 -smp "$CPUS" -m "$MEM"
      -kernel "$KERNEL" -initrd "$INITRD"
      -append "console=ttyS0 panic=-1 loglevel=4 edd=off kc.ip=$GUEST_IP kc.share=kc kc.host=kc-$(date +%H%M%S)-$$"
      -no-reboot -nodefaults -no-user-config -display none -serial stdio
      -netdev "$NETDEV" -device virtio-net-pci,netdev=n0,romfile=
      -virtfs "local,path=$OUT,mount_tag=kc,security_model=none,id=kc")
printf '%q ' "${QEMU[@]}" > "$OUT/qemu.cmd"

say "server 127.0.0.1:$PORT (MOUNT $MOUNTPORT, guest sees $GUEST_SERVER) export $EXPORT vers $VERS; run folder $OUT"
T0="$(date +%s.%N)"
set +e
if [ "$QUIET" = 1 ]; then
    timeout -k 5 "$TIMEOUT" "${QEMU[@]}" < /dev/null > "$OUT/console.log" 2>&1
    QRC=$?
else
    timeout -k 5 "$TIMEOUT" "${QEMU[@]}" < /dev/null 2>&1 | tee "$OUT/console.log"
    QRC=${PIPESTATUS[0]}
fi
set -e
WALL="$(echo "$(date +%s.%N) - $T0" | bc)"
sed -i 's/\r$//' "$OUT/console.log" 2>/dev/null || true

RC="$(cat "$OUT/out/rc" 2>/dev/null || true)"
if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
    say "timed out after ${TIMEOUT}s"; RC=124
elif [ -z "$RC" ]; then
    say "the guest wrote no rc (qemu exit $QRC); see $OUT/console.log"; RC=125
fi
printf 'wall_s=%s\nrc=%s qemu_rc=%s\n' "$WALL" "$RC" "$QRC" > "$OUT/summary.txt"
say "rc=$RC after ${WALL}s; output in $OUT/out/"
exit "$RC"
