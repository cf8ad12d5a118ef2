# Guest script (busybox sh, run by ../kclient.sh inside the kclient guest; kc-lib.sh is
# already sourced). The Linux kernel NFS client against the server under test: for each NFS
# version of KI_VERSIONS (all versions at once, each against its own server when KI_VERSIONS
# gives ports), on each export of KI_EXPORTS in turn (each such run, numbered N from 1 in
# version then export order, mounted on its own mount point /mnt/eN with its own work folder
# and its own /tmp/runN, the workload run on it, then unmounted):
#   cp -a of a tree (nested dirs, symlinks, 0 B .. 1 MiB+1 files) both from the guest's tmpfs
#   and from a tree the host placed in the export; ls -lR; dd of 64 MiB both ways with sha256;
#   sha256 of a host-placed file; rename (file, dir, over an existing file); symlink + readlink;
#   a file renamed and removed while another process holds it open; an fcntl lock held by one
#   process and found held by another (/kc/kc-lock); fsx-style random operations checked
#   against a model (/kc/kc-fsx, seed KI_FSX_SEED + N, KI_FSX_OPS ops); rm -r. Reads are done
#   after dropping the page cache so the data comes from the server. On the exports named in
#   KI_COHERE, a file the host rewrites (same size and mtime) after the guest cached it must be
#   read with its new bytes at the next open.
# Prints one PASS/FAIL line per check and exits non-zero if any failed.
#
# Guest environment (run.sh --env K=V):
#   KI_VERSIONS   NFS versions (3, 4.1, 4.2), each VERS or VERS@PORT (that version's
#                 server's port, NFS and MOUNT), space separated  [$KC_VERS]
#   KI_EXPORTS    export paths, space separated                [$KC_EXPORT]
#   KI_WORK       work folder name inside each export, run N's is WORK-N  [kernel-interop]
#   KI_HOST_TREE  tree placed by the host (relative to export) [host-tree]; skipped if absent
#   KI_HOST_FILE  file placed by the host (relative to export) [host-64m.bin]; skipped if absent
#   KI_BIG_MIB    size of the dd test file                     [64]
#   KI_FSX_SEED, KI_FSX_OPS  kc-fsx's seed (plus the export's number) and op count  [1, 1500]
#   KI_COHERE     1-based numbers (in KI_EXPORTS) of the exports to check coherence on, at
#                 every version  [none]
#   KI_COH_FILE, KI_COH_SUM1, KI_COH_SUM2: the file the host rewrites (run N's is
#                 KI_COH_FILE-N), its sha256 before and after
# Prints one PASS/FAIL line per check, each version's together (vers-V.log, saved as it goes,
# printed once all versions are done).
# Files saved for the host (run folder out/), per run number N: eN-sums.txt ("sha256
# path-relative-to-export" for every file the guest wrote and kept, plus "host:" lines for what
# it read), eN-ls-lR.txt; for the coherence check coh-N-read (the guest has read the file:
# the host may rewrite it, then creates coh-N-changed) and coh-N-ms (how long the guest's first
# open and read after coh-N-changed appeared took; it read the new bytes).

WORK="${KI_WORK:-kernel-interop}"
HOST_TREE="${KI_HOST_TREE:-host-tree}"
HOST_FILE="${KI_HOST_FILE:-host-64m.bin}"
BIG_MIB="${KI_BIG_MIB:-64}"
NPASS=0
NFAIL=0

pass() { NPASS=$((NPASS + 1)); echo "PASS $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL $*"; }
# check NAME CMD...: run CMD, PASS/FAIL by its status (output shown only on failure)
check() {
    local name="$1" out
    shift
    if out="$("$@" 2>&1)"; then pass "$name"; else fail "$name: $(echo "$out" | tail -n 5)"; fi
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
# manifest DIR: one line per entry, sorted: type, path, size/target, sha256 (files)
manifest() {
    (cd "$1" && find . | LC_ALL=C sort | while read -r p; do
        if [ -L "$p" ]; then echo "l $p -> $(readlink "$p")"
        elif [ -d "$p" ]; then echo "d $p"
        else echo "f $p $(stat -c %s "$p") $(sha "$p")"; fi
    done)
}
# finish: the verdict of one export's run (in its subshell)
finish() {
    echo "RESULT vers $KC_VERS $KC_EXPORT: $NPASS passed, $NFAIL failed"
    [ "$NFAIL" = 0 ] && echo "RESULT vers $KC_VERS $KC_EXPORT: PASS" || echo "RESULT vers $KC_VERS $KC_EXPORT: FAIL"
    [ "$NFAIL" = 0 ]
    exit $?
}
# now_ms: the guest's uptime in milliseconds
now_ms() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }

# coherence: the host rewrites $KI_COH_FILE in place (same size, same mtime, new bytes) through
# its own path to the export (ceph-fuse for a Ceph export) after this guest has read and cached
# it. The mount has the default attribute cache options (acregmin 3 s .. acregmax 60 s) and
# close-to-open coherence: the first open after the rewrite revalidates the attributes, and
# since size and mtime are the same, only the change attribute (v4) or the ctime (v3) can tell
# the client that its cached pages are stale. That first open must read the new bytes; when it
# does not, the guest keeps reading for acregmax to say whether the change shows up later.
coherence() {
    local f="$MNT/$KI_COH_FILE-$N" before after t0 t ms i
    check "coherence file reads as the host placed it" sh -c "[ \"\$(sha256sum '$f' | cut -d' ' -f1)\" = $KI_COH_SUM1 ]"
    before="$(stat -c '%s %Y %Z' "$f")"
    : > "$KC_OUT/coh-$N-read"
    i=0
    while [ ! -e "$KC_OUT/coh-$N-changed" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
    [ -e "$KC_OUT/coh-$N-changed" ] || { fail "the host did not rewrite the coherence file within 120 s"; return; }
    t0=$(now_ms)
    if [ "$(sha "$f")" = "$KI_COH_SUM2" ]; then
        ms=$(($(now_ms) - t0))
        after="$(stat -c '%s %Y %Z' "$f")"
        pass "the first open after the host's rewrite (same size and mtime) reads the new bytes ($ms ms)"
        echo "$ms" > "$KC_OUT/coh-$N-ms"
    else
        while :; do
            t=$(now_ms)
            [ "$(sha "$f")" = "$KI_COH_SUM2" ] && break
            [ $((t - t0)) -gt 60000 ] && break
            sleep 0.2
        done
        after="$(stat -c '%s %Y %Z' "$f")"
        if [ "$(sha "$f")" = "$KI_COH_SUM2" ]; then
            fail "the first open after the host's rewrite read the old bytes; the new ones after $((t - t0)) ms (size mtime ctime before: $before, now: $after)"
        else
            fail "the host's rewrite not seen in 60 s, acregmax (size mtime ctime before: $before, now: $after)"
        fi
    fi
    check "size and mtime kept by the rewrite, ctime moved ($before -> $after)" sh -c \
        "[ '${before% *}' = '${after% *}' ] && [ '${before##* }' != '${after##* }' ]"
}

# run_one N E: run N, the workload over NFS $KC_VERS on export number E ($KC_EXPORT), mounted
# on /mnt/eN, in the work folder WORK-N (in a subshell: WORK and N stay its own)
run_one() {
    N="$1"
    WORK="$WORK-$N"
    MNT="/mnt/e$N"
    TMPD="/tmp/run$N"
    rm -rf "$TMPD"; mkdir -p "$TMPD"
    W="$MNT/$WORK"
    kc_mount "$MNT" || { fail "mount $KC_SERVER:$KC_EXPORT"; finish; }
    pass "mount vers $KC_VERS $KC_SERVER:$KC_EXPORT ($(awk -v m="$MNT" '$2 == m {print $4}' /proc/mounts | cut -c1-80)...)"

    rm -rf "$W" 2>/dev/null
    check "mkdir $WORK" mkdir "$W"
    : > $TMPD/sums.txt

    # ------------------------------------------------------------------ a tree made in the guest
    T=$TMPD/tree
    rm -rf "$T"; mkdir -p "$T/sub/deeper" "$T/empty-dir"
    i=0
    for size in 0 1 2 511 512 513 4095 4096 4097 65535 65536 65537 131072 1048575 1048576 1048577; do
        head -c "$size" /dev/urandom > "$T/f$i-$size.bin"; i=$((i + 1))
    done
    for n in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "small file $n in sub" > "$T/sub/s$n.txt"; done
    for n in 1 2 3 4 5 6 7 8; do head -c $((n * 3000)) /dev/urandom > "$T/sub/deeper/d$n.bin"; done
    echo "a file with spaces" > "$T/sub/name with spaces.txt"
    ln -s sub/s1.txt "$T/link-to-file"
    ln -s sub/deeper "$T/link-to-dir"
    ln -s does-not-exist "$T/dangling-link"
    chmod 600 "$T/sub/s2.txt"; chmod 755 "$T/sub/s3.txt"
    NENT=$(find "$T" | wc -l)
    manifest "$T" > $TMPD/tree.manifest

    check "cp -a guest tree ($NENT entries) into the export" cp -a "$T" "$W/tree"
    kc_dropcaches
    manifest "$W/tree" > $TMPD/tree-nfs.manifest
    check "tree read back after drop_caches: names, sizes, sha256, symlink targets" \
        diff $TMPD/tree.manifest $TMPD/tree-nfs.manifest
    check "modes preserved (600, 755)" sh -c \
        "[ \"\$(stat -c %a '$W/tree/sub/s2.txt')\" = 600 ] && [ \"\$(stat -c %a '$W/tree/sub/s3.txt')\" = 755 ]"
    check "cat through a symlink to a dir" sh -c "[ \"\$(cat '$W/tree/link-to-dir/d1.bin' | wc -c)\" = 3000 ]"
    ls -lR "$W/tree" > $TMPD/ls-lR.txt 2>&1
    check "ls -lR" sh -c "grep -q 'link-to-file -> sub/s1.txt' $TMPD/ls-lR.txt && grep -q 'deeper' $TMPD/ls-lR.txt \
        && [ \$(grep -c '^-' $TMPD/ls-lR.txt) -ge 30 ]"
    kc_save "e$N-ls-lR.txt" < $TMPD/ls-lR.txt
    # keep one copy for the host to verify, the original is used for rename/rm tests
    check "cp -a tree -> tree-kept (server to server through the client)" cp -a "$W/tree" "$W/tree-kept"
    (cd "$W/tree-kept" && find . -type f | LC_ALL=C sort | while read -r p; do
        echo "$(sha "$p")  $WORK/tree-kept/${p#./}"; done) >> $TMPD/sums.txt

    # ------------------------------------------------------------------ a tree placed by the host
    if [ -d "$MNT/$HOST_TREE" ]; then
        manifest "$MNT/$HOST_TREE" > $TMPD/host-tree.manifest
        rm -rf $TMPD/host-tree-copy
        check "cp -a host tree out of the export" cp -a "$MNT/$HOST_TREE" $TMPD/host-tree-copy
        manifest $TMPD/host-tree-copy > $TMPD/host-tree-copy.manifest
        check "host tree copy identical" diff $TMPD/host-tree.manifest $TMPD/host-tree-copy.manifest
        check "cp -a host tree back into the export" cp -a $TMPD/host-tree-copy "$W/host-tree-copy"
        kc_save "e$N-host-tree.manifest" < $TMPD/host-tree.manifest
    else
        echo "SKIP host tree: no $HOST_TREE in the export"
    fi

    # ------------------------------------------------------------------ dd, 64 MiB both ways
    gdd if=/dev/urandom of=$TMPD/big.src bs=1M count="$BIG_MIB" status=none
    SRC_SUM=$(sha $TMPD/big.src)
    out=$(gdd if=$TMPD/big.src of="$W/big.bin" bs=1M conv=fsync 2>&1) \
        && pass "dd write ${BIG_MIB} MiB: $(echo "$out" | tail -n 1)" || fail "dd write: $out"
    rm -f $TMPD/big.src
    kc_dropcaches
    out=$(gdd if="$W/big.bin" of=$TMPD/big.back bs=1M 2>&1) \
        && pass "dd read ${BIG_MIB} MiB: $(echo "$out" | tail -n 1)" || fail "dd read: $out"
    BACK_SUM=$(sha $TMPD/big.back)
    [ "$SRC_SUM" = "$BACK_SUM" ] && pass "dd round trip sha256 $SRC_SUM" \
        || fail "dd round trip: wrote $SRC_SUM read $BACK_SUM"
    check "size $((BIG_MIB * 1048576))" sh -c "[ \$(stat -c %s '$W/big.bin') = $((BIG_MIB * 1048576)) ]"
    rm -f $TMPD/big.back
    echo "$SRC_SUM  $WORK/big-renamed.bin" >> $TMPD/sums.txt

    if [ -f "$MNT/$HOST_FILE" ]; then
        out=$(gdd if="$MNT/$HOST_FILE" of=$TMPD/host.bin bs=1M 2>&1) \
            && pass "dd read host file $HOST_FILE: $(echo "$out" | tail -n 1)" || fail "dd read host file: $out"
        HSUM=$(sha $TMPD/host.bin)
        echo "host-file sha256 $HSUM $HOST_FILE"
        echo "host:$HSUM  $HOST_FILE" >> $TMPD/sums.txt
        rm -f $TMPD/host.bin
    else
        echo "SKIP host file: no $HOST_FILE in the export"
    fi

    # ------------------------------------------------------------------ rename
    check "rename file" mv "$W/big.bin" "$W/big-renamed.bin"
    check "old name gone, new name has the data" sh -c \
        "[ ! -e '$W/big.bin' ] && [ \$(stat -c %s '$W/big-renamed.bin') = $((BIG_MIB * 1048576)) ]"
    check "rename dir" mv "$W/tree/sub" "$W/tree/sub-renamed"
    check "files reachable under the renamed dir" sh -c \
        "[ ! -e '$W/tree/sub' ] && grep -q 'small file 4 in sub' '$W/tree/sub-renamed/s4.txt'"
    echo "replacement" > "$W/repl-src"; echo "victim" > "$W/repl-dst"
    check "rename over an existing file" mv -f "$W/repl-src" "$W/repl-dst"
    check "replaced content" sh -c "[ \"\$(cat '$W/repl-dst')\" = replacement ] && [ ! -e '$W/repl-src' ]"
    check "rename across dirs" mv "$W/tree/f1-1.bin" "$W/tree/sub-renamed/deeper/moved.bin"

    # ------------------------------------------------------------------ symlink + readlink
    check "symlink create" ln -s "tree-kept/sub/s5.txt" "$W/newlink"
    check "readlink" sh -c "[ \"\$(readlink '$W/newlink')\" = tree-kept/sub/s5.txt ]"
    check "read through the new symlink" grep -q 'small file 5 in sub' "$W/newlink"
    long=$(head -c 200 /dev/zero | tr '\0' 'x')
    check "symlink with a 200-byte target" ln -s "$long" "$W/longlink"
    check "readlink of the long target" sh -c "[ \"\$(readlink '$W/longlink')\" = '$long' ]"
    kc_dropcaches
    check "readlink after drop_caches" sh -c "[ \"\$(readlink '$W/newlink')\" = tree-kept/sub/s5.txt ]"
    check "hard link" ln "$W/repl-dst" "$W/repl-hard"
    check "link count 2" sh -c "[ \$(stat -c %h '$W/repl-dst') = 2 ]"

    # ------------------------------------------------------------------ renamed and removed while open
    # A process holds the file open (one fd to read from the start, one to append); another
    # renames it and removes the new name. The holder must still read what it had and what it
    # appends after the removal (through the server: the page cache is dropped in between), and
    # the name must be gone. The Linux client turns the remove of a name still open into a
    # rename to .nfsXXXX (v3 and v4.x alike) and removes that when the holder closes; the server
    # must keep serving the file through the rename, and no .nfs file may be left behind.
    HOLD=$TMPD/holder
    rm -rf "$HOLD"; mkdir -p "$HOLD"
    printf 'held open across rename and remove\n' > "$W/held.txt"
    (
        exec 3< "$W/held.txt" 4>> "$W/held.txt" || exit 1
        : > "$HOLD/ready"
        i=0
        while [ ! -e "$HOLD/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
        printf 'appended by the holder after the remove\n' >&4
        sync
        : > "$HOLD/written"
        i=0
        while [ ! -e "$HOLD/read" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
        cat <&3 > "$HOLD/seen"
        : > "$HOLD/done"
    ) &
    HOLDER=$!
    i=0
    while [ ! -e "$HOLD/ready" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    check "open held by another process" test -e "$HOLD/ready"
    check "rename while open" mv "$W/held.txt" "$W/held-moved.txt"
    check "remove while open" rm "$W/held-moved.txt"
    check "the removed name is gone" sh -c "[ ! -e '$W/held-moved.txt' ] && [ ! -e '$W/held.txt' ] \
        && ! ls '$W' | grep -q '^held'"
    : > "$HOLD/go"
    i=0
    while [ ! -e "$HOLD/written" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kc_dropcaches
    : > "$HOLD/read"
    wait "$HOLDER"
    printf 'held open across rename and remove\nappended by the holder after the remove\n' > $TMPD/held.expect
    check "the holder reads its data and its append after the remove" cmp $TMPD/held.expect "$HOLD/seen"
    # The client removes its .nfsXXXX name once the last holder closed (asynchronously).
    i=0
    while ls -a "$W" | grep -q '^\.nfs' && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    check "no .nfs file left once the holder closed" sh -c "! ls -a '$W' | grep '^\.nfs'"

    # ------------------------------------------------------------------ locks between two processes
    # kc-lock (--file): one process holds an fcntl write lock on all of a file and writes under
    # it; a second process finds it held, then free once the first let go. Over v3 the harness
    # mounts with nolock (it runs no NLM), so there these are the client's own locks; over 4.x
    # they go to the server (LOCK, LOCKT) unless the client holds a write delegation on the file.
    rm -f $TMPD/lk-ready $TMPD/lk-release
    /kc/kc-lock hold "$W/locked" $TMPD/lk-ready $TMPD/lk-release > $TMPD/lk.log 2>&1 &
    LK=$!
    i=0
    while [ ! -e $TMPD/lk-ready ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    check "fcntl write lock taken by one process" test -e $TMPD/lk-ready
    check "a second process finds it held" sh -c "[ \"\$(/kc/kc-lock probe '$W/locked')\" = held ]"
    : > $TMPD/lk-release
    wait "$LK" && pass "the holder wrote under its lock and let go" || fail "lock holder: $(cat $TMPD/lk.log)"
    check "free once let go" sh -c "[ \"\$(/kc/kc-lock probe '$W/locked')\" = free ]"
    printf 'locked\nstill held after\n' > $TMPD/locked.expect
    check "what the holder wrote under the lock" cmp $TMPD/locked.expect "$W/locked"
    echo "$(sha $TMPD/locked.expect)  $WORK/locked" >> $TMPD/sums.txt

    # ------------------------------------------------------------------ fsx-style random operations
    # kc-fsx (--file): random writes, truncates, reads checked against a model, fsync with the
    # pages dropped, close and reopen; then the file after drop_caches must be the model, and
    # the host checks its sha256 through its own path.
    seed=$((${KI_FSX_SEED:-1} + N))
    out=$(/kc/kc-fsx "$W/fsx.bin" "$seed" "${KI_FSX_OPS:-1500}" $TMPD/fsx.model 2>&1) \
        && pass "kc-fsx seed $seed: $(echo "$out" | tail -n 1)" || fail "kc-fsx: $(echo "$out" | tail -n 24)"
    kc_dropcaches
    check "the kc-fsx file read after drop_caches is the model" cmp $TMPD/fsx.model "$W/fsx.bin"
    echo "$(sha $TMPD/fsx.model)  $WORK/fsx.bin" >> $TMPD/sums.txt
    rm -f $TMPD/fsx.model

    # ------------------------------------------------------------------ rm -r
    check "rm -r tree" rm -r "$W/tree"
    check "tree gone" sh -c "[ ! -e '$W/tree' ]"
    [ -d "$W/host-tree-copy" ] && check "rm -r host tree copy" rm -r "$W/host-tree-copy"
    check "rm files" rm "$W/repl-dst" "$W/repl-hard" "$W/longlink"
    check "rmdir of a non-empty dir fails" sh -c "! rmdir '$W/tree-kept' 2>/dev/null"
    check "ls of the work dir" sh -c "ls -la '$W' >/dev/null"

    kc_save "e$N-sums.txt" < $TMPD/sums.txt
    case " ${KI_COHERE:-} " in *" $2 "*) coherence ;; esac
    cd /
    check "umount" kc_umount "$MNT"
    finish
}

# vers_runs V FIRST: version V's runs, one per export in turn, numbered from FIRST; the status
# is 0 when all passed
vers_runs() {
    local v="$1" n="$2" e_i=0 e rc=0
    for e in ${KI_EXPORTS:-$KC_EXPORT}; do
        e_i=$((e_i + 1))
        ( KC_VERS="$v" KC_EXPORT="$e"; run_one "$n" "$e_i" ) || rc=1
        kc_log "done with run $n (vers $v, export $e)"
        n=$((n + 1))
    done
    return $rc
}

RC=0
N=1
NEXP=$(echo ${KI_EXPORTS:-$KC_EXPORT} | wc -w)
JOBS=""
for spec in ${KI_VERSIONS:-$KC_VERS}; do
    v="${spec%%@*}"
    (
        case "$spec" in *@*) KC_PORT="${spec#*@}" KC_MOUNTPORT="${spec#*@}" ;; esac
        vers_runs "$v" "$N"
    ) > "$KC_OUT/vers-$v.log" 2>&1 &
    JOBS="$JOBS $v:$!"
    N=$((N + NEXP))
done
for j in $JOBS; do
    wait "${j#*:}" || RC=1
done
for j in $JOBS; do
    echo "== vers ${j%%:*}"
    cat "$KC_OUT/vers-${j%%:*}.log"
done
[ "$RC" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
exit "$RC"
