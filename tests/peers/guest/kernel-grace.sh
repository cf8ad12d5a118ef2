# Guest script (busybox sh, run by ../kclient.sh inside the kclient guest; kc-lib.sh is
# already sourced). The Linux kernel NFS client across a server crash and restart:
#   a process holds an fcntl write lock on one file (kc-lock, a static helper the host built
#   and passed with --file) while a paced write stream goes to another; the host kills the
#   server with -9 during the stream and restarts it on the same port and state directory.
#   The client must reclaim the open files and the lock in the server's grace period and
#   carry on: the stream completes with the source's SHA-256 (read back after drop_caches),
#   the holder's write under its lock after the restart succeeds (a lost lock is EIO), and a
#   second process still finds the lock held.
# Prints one PASS/FAIL line per check and exits non-zero if any failed.
#
# Guest environment (run.sh --env K=V):
#   KG_WORK   work folder name inside the export              [kernel-grace]
#   KG_MIB    size of the stream in MiB                        [48]
#   KG_PACE   pause between MiB of the stream, in seconds      [0.1]
# Markers for the host, in $KC_OUT (a live share): `locked` once the lock is held,
# `streaming` when the stream starts, `stream-done` when it ended. Saved: sums.txt.

MNT="${KG_MNT:-/mnt}"
W="$MNT/${KG_WORK:-kernel-grace}"
MIB="${KG_MIB:-48}"
PACE="${KG_PACE:-0.1}"
LOCK=/kc/kc-lock
NPASS=0
NFAIL=0

pass() { NPASS=$((NPASS + 1)); echo "PASS $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
finish() {
    echo "RESULT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
    [ "$NFAIL" = 0 ]
    exit $?
}

[ -x "$LOCK" ] || { fail "no $LOCK (pass it with --file)"; finish; }
kc_mount "$MNT" || { fail "mount $KC_SERVER:$KC_EXPORT"; finish; }
pass "mount $KC_SERVER:$KC_EXPORT"
rm -rf "$W" 2>/dev/null
mkdir -p "$W" || { fail "mkdir $W"; finish; }

head -c $((MIB * 1048576)) /dev/urandom > /tmp/src
# Write back from the first MiB dirty on: the stream's WRITEs reach the server as they are
# made (instead of all at the final fsync), so the kill falls among them.
echo 1048576 > /proc/sys/vm/dirty_background_bytes
SRC="$(sha /tmp/src)"

# The holder: a write lock on all of $W/locked until told to let go.
"$LOCK" hold "$W/locked" "$KC_OUT/locked" /tmp/release > /tmp/holder.log 2>&1 &
HOLDER=$!
i=0
while [ ! -e "$KC_OUT/locked" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$KC_OUT/locked" ] && pass "fcntl write lock taken" || { fail "no lock: $(cat /tmp/holder.log)"; finish; }
[ "$("$LOCK" probe "$W/locked")" = held ] && pass "a second process finds the lock held" \
    || fail "a second process could take the lock before the restart"

# A read lock on a file opened read-only: the client may hold it under a read delegation and
# keep the lock local; across the restart the delegation is reclaimed with it. The host checks
# from a second client, after the stream, that the server knows the lock (rlock-check /
# rrelease in $KC_OUT).
echo "read-locked" > "$W/rlocked"
"$LOCK" hold-read "$W/rlocked" "$KC_OUT/rlocked" "$KC_OUT/rrelease" > /tmp/rholder.log 2>&1 &
RHOLDER=$!
i=0
while [ ! -e "$KC_OUT/rlocked" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$KC_OUT/rlocked" ] && pass "fcntl read lock taken" || { fail "no read lock: $(cat /tmp/rholder.log)"; finish; }

# The stream: one open file written a MiB at a time, paced so that the host's kill falls
# inside it; conv=fsync makes the end wait for every byte to be on the server's disk.
kc_log "stream of $MIB MiB starts"
: > "$KC_OUT/streaming"
i=0
(while [ $i -lt "$MIB" ]; do
    gdd if=/tmp/src bs=1M skip=$i count=1 status=none
    sleep "$PACE"
    i=$((i + 1))
done) | gdd of="$W/stream.bin" bs=1M iflag=fullblock conv=fsync status=none
rc=$?
kc_log "stream ended (rc $rc)"
: > "$KC_OUT/stream-done"
[ "$rc" = 0 ] && pass "the stream completed across the restart" || fail "the stream failed (rc $rc)"

kc_dropcaches
GOT="$(sha "$W/stream.bin")"
[ "$GOT" = "$SRC" ] && pass "stream sha256 after drop_caches matches the source" \
    || fail "stream sha256 $GOT, source $SRC"
echo "$SRC ${KG_WORK:-kernel-grace}/stream.bin" | kc_save sums.txt

# Both locks, at the server: the host opens each file from its own client in a way that
# recalls a delegation the guest may hold it under (the client then sends its locks) and tests
# for a conflicting lock at the server; then it lets the read-lock holder go.
: > "$KC_OUT/rlock-check"
wait $RHOLDER
rrc=$?
cat /tmp/rholder.log
[ "$rrc" = 0 ] && pass "the read-lock holder kept and released its lock" \
    || fail "the read-lock holder failed (rc $rrc)"

# The lock after the restart: still held for the others, and still the holder's.
[ "$("$LOCK" probe "$W/locked")" = held ] && pass "after the restart a second process still finds the lock held" \
    || fail "after the restart a second process could take the lock"
: > /tmp/release
wait $HOLDER
hrc=$?
cat /tmp/holder.log
[ "$hrc" = 0 ] && pass "the holder wrote under its lock after the restart and released it" \
    || fail "the holder failed after the restart (rc $hrc): the lock was lost"
cat /proc/self/mountstats 2>/dev/null | grep -E '^\s+(OPEN|LOCK|RECLAIM_COMPLETE|WRITE):' | kc_save ops.txt
kc_umount "$MNT" && pass "umount" || fail "umount"
finish
