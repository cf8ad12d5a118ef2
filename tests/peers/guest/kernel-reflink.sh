# Guest script (busybox sh, run by ../kclient.sh; kc-lib.sh is already sourced): the NFSv4.2
# data ops that need a file system with reflinks, and the reads READ_PLUS is for, through
# one fresh vers=4.2 mount of a `sluice serve` export on XFS (reflink=1):
#   1. right after the mount, copy_file_range of a host-placed file larger than one COPY
#      chunk (the host checks the server made it asynchronous: CB_OFFLOAD counters);
#   2. FICLONE of the same file (CLONE), which must succeed on this file system;
#   3. reads of a sparse and a dense host-placed file after drop_caches, with the client's
#      READ and READ_PLUS counts from its mountstats.
# The static helper v42-tool (--file) does copy_file_range and FICLONE. Saves sums.txt
# ("sha256  path" of what the guest read, for the host to compare) and counts.txt; prints
# PASS/FAIL lines.
#
# Guest environment: KR_DIR folder in the export holding src.bin, sparse, dense [reflink]

TOOL=/kc/v42-tool
DIR="${KR_DIR:-reflink}"
NFAIL=0
pass() { echo "PASS $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

KC_VERS=4.2 kc_mount /m || { echo "FAIL mount vers=4.2"; exit 1; }
D=/m/$DIR
# 1. At once, before anything else can let the back channel's probe finish.
"$TOOL" copy "$D/src.bin" "$D/copy.bin" || fail "copy_file_range"
# 2.
"$TOOL" clone "$D/src.bin" "$D/clone.bin" > /tmp/clone.txt 2>&1
cat /tmp/clone.txt
grep -q '^clone ok' /tmp/clone.txt && pass "FICLONE" || fail "FICLONE: $(cat /tmp/clone.txt)"
# 3.
counts() {
    kc_mountstats /m | awk '$1 == "READ:" { r = $2 } $1 == "READ_PLUS:" { p = $2 }
        END { printf "%d %d\n", r, p }'
}
set -- $(counts); r0=$1 p0=$2
kc_dropcaches
: > /tmp/sums.txt
for f in copy.bin clone.bin sparse dense; do
    echo "$(sha "$D/$f")  $DIR/$f" >> /tmp/sums.txt
done
set -- $(counts)
echo "read=$(($1 - r0)) read_plus=$(($2 - p0))" | tee /tmp/counts.txt
kc_save sums.txt < /tmp/sums.txt
kc_save counts.txt < /tmp/counts.txt
kc_umount /m && pass "umount" || fail "umount"
echo "RESULT: $NFAIL failed"
[ "$NFAIL" = 0 ]
