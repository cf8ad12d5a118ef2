# Guest script (busybox sh, run by ../kclient.sh inside the kclient guest; kc-lib.sh is
# already sourced). NFSv3 locks (NLM) of the Linux kernel client, with the guest's own rpcbind
# and rpc.statd (kc_nsm) and two v3 mounts WITHOUT nolock (the second with nosharecache, so
# it is a mount of its own), plus a v4.1 mount of the same export:
#   1. fcntl: a process holds a write lock through mount a; another, through mount b, is
#      refused (F_SETLK) and F_GETLK reports the holder; once released, the lock is free;
#   2. flock: the same with flock(LOCK_EX) (the client sends it as a whole-file NLM lock),
#      which an fcntl lock through the other mount also meets;
#   3. v3 against v4: a v3 lock refuses a v4 F_SETLK, and a v4 lock refuses a v3 one;
#      then the Connectathon-style cases of /kc/kc-tlock, parent on mount a, child on mount b;
#   4. restart: a process holds a v3 write lock; the host kills the server with -9 and starts
#      it again on the same state directory; the server's SM_NOTIFY reaches statd here, the
#      kernel's lockd reclaims the lock, and the host checks from its own client that the
#      lock is the server's; here a second process still finds the lock held and the holder
#      writes under it.
# Prints one PASS/FAIL line per check and exits non-zero if any failed.
#
# Guest environment (run.sh --env K=V): KC_STATD_PORT, KC_NLM_PORT (kc_nsm; the host forwards
# the same ports), KN_WORK (work folder name inside the export) [kernel-nlm].
# Markers in $KC_OUT (a live share) for the host: `locked` once the restart's lock is held,
# `kill-me` when the host may kill the server; from the host: `restarted`, `checked`.

W="${KN_WORK:-kernel-nlm}"
A="/mnt/a/$W" B="/mnt/b/$W" V4="/mnt/v4/$W"
LOCK=/kc/kc-lock
NPASS=0
NFAIL=0

pass() { NPASS=$((NPASS + 1)); echo "PASS $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }
finish() {
    echo "RESULT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
    [ "$NFAIL" = 0 ]
    exit $?
}
# wait_for FILE SECS: until FILE exists; false after SECS
wait_for() {
    local i=0
    while [ ! -e "$1" ] && [ $i -lt $(($2 * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    [ -e "$1" ]
}
# holder MODE FILE TAG: starts `kc-lock MODE FILE /tmp/TAG.ready /tmp/TAG.release` in the
# background, waits until it holds the lock; its pid in HOLDER
holder() {
    rm -f "/tmp/$3.ready" "/tmp/$3.release"
    "$LOCK" "$1" "$2" "/tmp/$3.ready" "/tmp/$3.release" > "/tmp/$3.log" 2>&1 &
    HOLDER=$!
    wait_for "/tmp/$3.ready" 60 && return 0
    cat "/tmp/$3.log"
    return 1
}
# release TAG: lets the holder go and waits for it; its status
release() {
    : > "/tmp/$1.release"
    wait $HOLDER
    local rc=$?
    cat "/tmp/$1.log"
    return $rc
}
expect() {   # expect WANT WHAT COMMAND...: COMMAND's first output line is WANT
    local want="$1" what="$2" got
    shift 2
    got="$("$@" 2>&1 | head -n 1)"
    [ "$got" = "$want" ] && pass "$what" || fail "$what: got '$got', want '$want'"
}

[ -x "$LOCK" ] || { fail "no $LOCK (pass it with --file)"; finish; }
kc_nsm || { fail "rpcbind and rpc.statd in the guest"; finish; }
pass "rpcbind and rpc.statd run (statd port ${KC_STATD_PORT:-any}, lockd port ${KC_NLM_PORT:-any})"
export KC_LOCK=1
kc_mount /mnt/a || { fail "v3 mount a (no nolock)"; finish; }
kc_mount /mnt/b nosharecache || { fail "v3 mount b (no nolock)"; finish; }
grep ' /mnt/[ab] nfs ' /proc/mounts
if grep ' /mnt/[ab] nfs ' /proc/mounts | grep -q nolock; then
    fail "a v3 mount has nolock"
else
    pass "two v3 mounts without nolock"
fi
rm -rf "$A" 2>/dev/null
mkdir -p "$A" || { fail "mkdir $A"; finish; }
for f in fcntl flock v3v4 v4v3 restart; do echo "$f" > "$A/$f"; done

# 1. fcntl
holder hold "$A/fcntl" fcntl && pass "fcntl: a write lock through mount a" \
    || { fail "fcntl: no lock through mount a"; finish; }
expect held "fcntl: another process's F_SETLK through mount b is refused" "$LOCK" probe "$B/fcntl"
got="$("$LOCK" getlk "$B/fcntl")"
echo "F_GETLK through mount b: $got"
case "$got" in
    "write 0 0 pid="*) pass "fcntl: F_GETLK through mount b reports the holder's write lock on all of it" ;;
    *) fail "fcntl: F_GETLK through mount b: '$got'" ;;
esac
release fcntl && pass "fcntl: the holder wrote under its lock and released it" \
    || fail "fcntl: the holder failed"
expect free "fcntl: once released, mount b's F_SETLK succeeds" "$LOCK" probe "$B/fcntl"
expect unlocked "fcntl: once released, F_GETLK finds nothing" "$LOCK" getlk "$B/fcntl"

# 2. flock
holder hold-flock "$A/flock" flock && pass "flock: LOCK_EX through mount a" \
    || { fail "flock: no flock through mount a"; finish; }
expect held "flock: another process's LOCK_EX|LOCK_NB through mount b is refused" \
    "$LOCK" probe-flock "$B/flock"
expect held "flock: an fcntl lock through mount b meets it (a whole-file NLM lock)" \
    "$LOCK" probe "$B/flock"
release flock && pass "flock: released" || fail "flock: the holder failed"
expect free "flock: once released, mount b's LOCK_EX succeeds" "$LOCK" probe-flock "$B/flock"

# 3. v3 against v4.1, both ways
(KC_VERS=4.1; kc_mount /mnt/v4) && pass "v4.1 mount of the same export" \
    || { fail "v4.1 mount"; finish; }
holder hold "$A/v3v4" v3v4 && pass "v3v4: a v3 write lock" || { fail "v3v4: no v3 lock"; finish; }
expect held "v3v4: a v4.1 F_SETLK on the file is refused" "$LOCK" probe "$V4/v3v4"
release v3v4 || fail "v3v4: the holder failed"
expect free "v3v4: once released, the v4.1 F_SETLK succeeds" "$LOCK" probe "$V4/v3v4"
holder hold "$V4/v4v3" v4v3 && pass "v4v3: a v4.1 write lock" || { fail "v4v3: no v4.1 lock"; finish; }
expect held "v4v3: a v3 F_SETLK on the file is refused" "$LOCK" probe "$B/v4v3"
got="$("$LOCK" getlk "$B/v4v3")"
case "$got" in
    "write 0 0 pid="*) pass "v4v3: a v3 F_GETLK reports the v4.1 write lock ($got)" ;;
    *) fail "v4v3: v3 F_GETLK: '$got'" ;;
esac
release v4v3 || fail "v4v3: the holder failed"
expect free "v4v3: once released, the v3 F_SETLK succeeds" "$LOCK" probe "$B/v4v3"
kc_umount /mnt/v4 || fail "umount /mnt/v4"

# 3b. the Connectathon-style lock cases (kc-tlock: its own PASS/FAIL line per case), parent
# through mount a, child through mount b: two NLM clients of one host
mkdir -p "$A/tlock"
if /kc/kc-tlock "$A/tlock" "$B/tlock"; then pass "tlock: every case"; else fail "tlock: a case failed"; fi

# 4. restart: the host kills the server while the lock is held
holder hold "$A/restart" restart && pass "restart: a v3 write lock before the kill" \
    || { fail "restart: no lock"; finish; }
: > "$KC_OUT/locked"
expect held "restart: before the kill, mount b's F_SETLK is refused" "$LOCK" probe "$B/restart"
: > "$KC_OUT/kill-me"
kc_log "waiting for the host to kill and restart the server"
wait_for "$KC_OUT/restarted" 300 || { fail "restart: the host never restarted the server"; finish; }
kc_log "server restarted; waiting for the host's check of the reclaim"
wait_for "$KC_OUT/checked" 300 || { fail "restart: the host never checked the reclaim"; finish; }
grep -i 'notify' "$KC_OUT/statd.log" | tail -n 5
# Refused again after the restart (in grace a non-reclaim lock waits for its end: the client
# re-sends while the server answers DENIED_GRACE_PERIOD, then hears DENIED).
expect held "restart: after the restart, mount b's F_SETLK is refused" "$LOCK" probe "$B/restart"
release restart && pass "restart: the holder wrote under its lock after the restart and released it" \
    || fail "restart: the holder failed after the restart"
expect free "restart: once released, mount b's F_SETLK succeeds" "$LOCK" probe "$B/restart"
kc_umount /mnt/b && kc_umount /mnt/a && pass "umount" || fail "umount"
finish
