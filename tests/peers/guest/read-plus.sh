# Guest script (busybox sh, run by ../kclient.sh; kc-lib.sh is already sourced): reads files
# through a vers=4.2 mount and reports, per read, the time and what went over the wire, from
# the client's own per-op counters (/proc/self/mountstats: READ and READ_PLUS calls and bytes
# received). Used by bench/read-plus.sh against `sluice serve` with and without
# --no-read-plus, and by the kernel READ_PLUS test.
#
# Guest environment (run.sh --env K=V):
#   RP_DIR    folder inside the export holding the files   [read-plus]
#   RP_FILES  the files to read, space separated           [sparse dense]
#   RP_RUNS   reads of each file (caches dropped before each) [3]
#   RP_RA_KB  the mount's read_ahead_kb                    [15360: ~1 MiB READs, several at once]
# Prints "RP file=F run=N secs=S read=OPS read_plus=OPS recv_bytes=B" per read, and
# "RPSUM F SHA256" per file (read once more after the timed runs); saves mountstats.txt.

DIR="${RP_DIR:-read-plus}"
FILES="${RP_FILES:-sparse dense}"
RUNS="${RP_RUNS:-3}"
RA_KB="${RP_RA_KB:-15360}"
NFAIL=0

fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }

KC_VERS=4.2 kc_mount /m || { echo "FAIL mount vers=4.2"; exit 1; }
grep -q ' /m nfs4 .*vers=4.2' /proc/mounts || fail "not 4.2: $(grep ' /m ' /proc/mounts)"
# The mount's bdi is MAJOR:MINOR of its anonymous device (busybox has no mountpoint -d).
d="$(stat -c %d /m)"
bdi="$(( (d >> 8) & 0xfff )):$(( (d & 0xff) | ((d >> 12) & 0xfff00) ))"
echo "$RA_KB" > "/sys/class/bdi/$bdi/read_ahead_kb" || fail "read_ahead_kb of bdi $bdi"

# ops and bytes received of READ and READ_PLUS so far: "READ_OPS PLUS_OPS RECV_BYTES"
counts() {
    kc_mountstats /m | awk '
        $1 == "READ:" { r = $2; b += $6 }
        $1 == "READ_PLUS:" { p = $2; b += $6 }
        END { printf "%d %d %d\n", r, p, b }'
}

for f in $FILES; do
    [ -f "/m/$DIR/$f" ] || { fail "no /m/$DIR/$f"; continue; }
    i=1
    while [ "$i" -le "$RUNS" ]; do
        kc_dropcaches
        set -- $(counts)
        r0=$1 p0=$2 b0=$3
        t0="$(cut -d' ' -f1 /proc/uptime)"
        gdd if="/m/$DIR/$f" of=/dev/null bs=1M 2>/dev/null || fail "read $f run $i"
        t1="$(cut -d' ' -f1 /proc/uptime)"
        set -- $(counts)
        echo "RP file=$f run=$i secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
            "read=$(($1 - r0)) read_plus=$(($2 - p0)) recv_bytes=$(($3 - b0))"
        i=$((i + 1))
    done
    kc_dropcaches
    echo "RPSUM $f $(sha256sum "/m/$DIR/$f" | cut -d' ' -f1)"
done
kc_mountstats /m | kc_save mountstats.txt
kc_umount /m
echo "RESULT: $NFAIL failed"
[ "$NFAIL" = 0 ]
