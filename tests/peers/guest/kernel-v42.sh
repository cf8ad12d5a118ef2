# Guest script (busybox sh, run by ../kclient.sh inside the kclient guest; kc-lib.sh is
# already sourced). Locks and the NFSv4.2 operations through the Linux kernel client, with one
# export mounted twice in one boot: vers=4.1 on /m41 and vers=4.2 on /m42. The two mounts are
# two NFS clients to the server (the Linux client keeps one client per minor version), so a
# lock taken through one and tested through the other is arbitrated by the server (LOCK,
# LOCKT, LOCKU); two processes on one mount are arbitrated by the guest's kernel first.
#   fcntl locks and flock between two processes: across the two clients and on one mount;
#   fallocate (ALLOCATE), punch hole (DEALLOCATE), SEEK_DATA / SEEK_HOLE (SEEK) on 4.2;
#   copy_file_range (COPY) of a file larger than one COPY moves, and FICLONE (CLONE);
#   fallocate on the 4.1 mount must be EOPNOTSUPP (no 4.2 ops in 4.1);
#   a write delegation to the 4.1 client, another client's stat (CB_GETATTR) and read (recall).
# The checks are in the static helper v42-tool (tests/peers/guest/v42-tool.c), given with
# --file as /kc/v42-tool. Prints one PASS/FAIL line per check; exits non-zero if any failed.
#
# Guest environment (run.sh --env K=V):
#   KV_WORK      work folder name inside the export   [kernel-v42]
#   KV_COPY_MIB  size of the copied file              [40]
#   KX_PORT, KX_EXPORT, KX_WORK: when set (../kernel-v42.sh's KV_XATTR), /kc/kernel-xattr.sh
#                runs at the end against that server, in this boot; its output and status
#                go to out/xattr.log and out/xattr.rc only (not this script's verdict)
# Saved for the host (run folder out/): sums.txt ("sha256  path-relative-to-export" for the
# files the host checks), clone.txt (what FICLONE answered).

TOOL=/kc/v42-tool
WORK="${KV_WORK:-kernel-v42}"
COPY_MIB="${KV_COPY_MIB:-40}"
NFAIL=0
NPASS=0

pass() { NPASS=$((NPASS + 1)); echo "PASS $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }
# tool ARGS...: run the helper, count its PASS/FAIL lines
tool() {
    local out
    out="$("$TOOL" "$@" 2>&1)"
    local rc=$?
    echo "$out"
    NPASS=$((NPASS + $(echo "$out" | grep -c '^PASS')))
    NFAIL=$((NFAIL + $(echo "$out" | grep -c '^FAIL')))
    [ $rc = 0 ] || [ "$(echo "$out" | grep -c '^FAIL')" != 0 ] || fail "v42-tool $1 exited $rc"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
finish() {
    xattr
    echo "RESULT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
    [ "$NFAIL" = 0 ]
    exit $?
}

# xattr: the user extended attribute checks of kernel-xattr.sh against the KX_PORT server,
# when asked for (their own mounts and verdict; see above)
xattr() {
    [ -n "${KX_PORT:-}" ] || return 0
    kc_log "== kernel-xattr.sh against port $KX_PORT"
    ( cd /; KC_PORT="$KX_PORT" KC_EXPORT="$KX_EXPORT"; . /kc/kernel-xattr.sh ) > /tmp/xattr.log 2>&1
    echo $? | kc_save xattr.rc
    kc_save xattr.log < /tmp/xattr.log
}

[ -x "$TOOL" ] || { fail "no $TOOL in the guest (run.sh --file)"; finish; }
KC_VERS=4.1 kc_mount /m41 || { fail "mount vers=4.1"; finish; }
KC_VERS=4.2 kc_mount /m42 || { fail "mount vers=4.2"; finish; }
pass "mounted $KC_SERVER:$KC_EXPORT with vers=4.1 on /m41 and vers=4.2 on /m42"
grep -q ' /m41 nfs4 .*vers=4.1' /proc/mounts && grep -q ' /m42 nfs4 .*vers=4.2' /proc/mounts \
    && pass "the mounts negotiated 4.1 and 4.2" || fail "mount versions: $(grep nfs4 /proc/mounts)"

A=/m41/$WORK
B=/m42/$WORK
rm -rf "$B" 2>/dev/null
mkdir "$B" || { fail "mkdir $B"; finish; }
: > /tmp/sums.txt

# ------------------------------------------------------------------ locks
: > "$B/fcntl-2c"; : > "$B/fcntl-1c"; : > "$B/fcntl-41"; : > "$B/flock-2c"; : > "$B/flock-1c"
tool fcntl "$A/fcntl-2c" "$B/fcntl-2c" "fcntl 4.1 holder, 4.2 tester: "
tool fcntl "$B/fcntl-2c" "$A/fcntl-2c" "fcntl 4.2 holder, 4.1 tester: "
tool fcntl "$B/fcntl-1c" "$B/fcntl-1c" "fcntl one 4.2 mount: "
tool fcntl "$A/fcntl-41" "$A/fcntl-41" "fcntl one 4.1 mount: "
tool flock "$A/flock-2c" "$B/flock-2c" "flock 4.1 holder, 4.2 tester: "
tool flock "$B/flock-1c" "$B/flock-1c" "flock one 4.2 mount: "

# ------------------------------------------------------------------ 4.2 data ops
tool sparse "$B/sparse"
tool noalloc "$A/noalloc"
gdd if=/dev/urandom of="$B/src.bin" bs=1M count="$COPY_MIB" conv=fsync status=none \
    && pass "write ${COPY_MIB} MiB source" || fail "write the source file"
SRC_SUM=$(sha "$B/src.bin")
tool copy "$B/src.bin" "$B/copy.bin"
kc_dropcaches
[ "$(sha "$B/copy.bin")" = "$SRC_SUM" ] && pass "the copy reads back with the source's sha256" \
    || fail "copy sha256 $(sha "$B/copy.bin"), source $SRC_SUM"
"$TOOL" clone "$B/src.bin" "$B/clone.bin" > /tmp/clone.txt 2>&1
cat /tmp/clone.txt
if grep -q '^clone ok' /tmp/clone.txt; then
    kc_dropcaches
    [ "$(sha "$B/clone.bin")" = "$SRC_SUM" ] && pass "the clone reads back with the source's sha256" \
        || fail "clone sha256 differs"
    echo "$SRC_SUM  $WORK/clone.bin" >> /tmp/sums.txt
elif grep -qE '^clone errno (95|18) ' /tmp/clone.txt; then
    pass "FICLONE refused as unsupported by the server's file system"
else
    fail "FICLONE: $(cat /tmp/clone.txt)"
fi
kc_save clone.txt < /tmp/clone.txt
echo "$SRC_SUM  $WORK/src.bin" >> /tmp/sums.txt
echo "$SRC_SUM  $WORK/copy.bin" >> /tmp/sums.txt
echo "$(sha "$B/sparse")  $WORK/sparse" >> /tmp/sums.txt

# ------------------------------------------------------------------ write delegations
# The 4.1 client opens a file for reading and writing as its only opener: the server grants
# it a write delegation, and it writes into its cache. The 4.2 client (another NFS client)
# stats the file, which the server answers from the holder's CB_GETATTR (its size, with
# the data not yet written back), then reads it, which recalls the delegation: the holder
# writes its data back and returns it, and the reader sees that data. The host checks the
# server's counters (a write delegation granted, CB_GETATTR sent and answered, a recall).
WD_TEXT="written under a write delegation"
printf 'base' > "$A/wdeleg" && pass "create wdeleg through 4.1" || fail "create wdeleg"
exec 3<>"$A/wdeleg"
printf '%s' "$WD_TEXT" >&3
WD_SIZE=$(stat -c %s "$B/wdeleg")
[ "$WD_SIZE" = "${#WD_TEXT}" ] && pass "the other client's stat sees the holder's size $WD_SIZE" \
    || fail "the other client's stat sees size $WD_SIZE, the holder wrote ${#WD_TEXT}"
[ "$(cat "$B/wdeleg")" = "$WD_TEXT" ] && pass "the other client reads the holder's data" \
    || fail "the other client reads '$(cat "$B/wdeleg")'"
printf '!' >&3
exec 3>&-
[ "$(cat "$A/wdeleg")" = "$WD_TEXT!" ] && pass "the holder reads its own data back" \
    || fail "the holder reads '$(cat "$A/wdeleg")'"
kc_dropcaches
[ "$(cat "$B/wdeleg")" = "$WD_TEXT!" ] && pass "the other client reads the holder's last write" \
    || fail "the other client reads '$(cat "$B/wdeleg")' after the holder's close"
echo "$(sha "$B/wdeleg")  $WORK/wdeleg" >> /tmp/sums.txt

kc_save sums.txt < /tmp/sums.txt
cd /
kc_umount /m41 && kc_umount /m42 && pass "umount both" || fail "umount"
finish
