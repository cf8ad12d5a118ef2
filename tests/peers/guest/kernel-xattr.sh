# Guest script (busybox sh, run by ../kclient.sh inside the kclient guest; kc-lib.sh is
# already sourced). User extended attributes (RFC 8276) through the Linux kernel client, one
# boot: the export mounted with vers=4.2 on /m42 (GETXATTR, SETXATTR, LISTXATTRS,
# REMOVEXATTR) and vers=4.1 on /m41 (no xattr ops in 4.1: EOPNOTSUPP, as Linux answers). The
# checks are in the static helper xattr-tool (tests/peers/guest/xattr-tool.c), given with
# --file as /kc/xattr-tool; the host made the file and set its user.host attribute first.
# Prints one PASS/FAIL line per check; exits non-zero if any failed.
#
# Guest environment (run.sh --env K=V):
#   KX_WORK      work folder name inside the export, holding the file "f"   [kernel-xattr]

TOOL=/kc/xattr-tool
WORK="${KX_WORK:-kernel-xattr}"
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
    [ $rc = 0 ] || [ "$(echo "$out" | grep -c '^FAIL')" != 0 ] || fail "xattr-tool $1 exited $rc"
}
finish() {
    echo "RESULT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
    [ "$NFAIL" = 0 ]
    exit $?
}

[ -x "$TOOL" ] || { fail "no $TOOL in the guest (run.sh --file)"; finish; }
KC_VERS=4.2 kc_mount /m42 || { fail "mount vers=4.2"; finish; }
KC_VERS=4.1 kc_mount /m41 || { fail "mount vers=4.1"; finish; }
grep -q ' /m41 nfs4 .*vers=4.1' /proc/mounts && grep -q ' /m42 nfs4 .*vers=4.2' /proc/mounts \
    && pass "the mounts negotiated 4.1 and 4.2" || fail "mount versions: $(grep nfs4 /proc/mounts)"
[ -f "/m42/$WORK/f" ] || { fail "no /m42/$WORK/f (the host makes it)"; finish; }

tool v42 "/m42/$WORK/f"
tool v41 "/m41/$WORK/f"

kc_umount /m41
kc_umount /m42
finish
