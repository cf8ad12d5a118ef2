#!/usr/bin/env bash
# Interop with a third-party NFS client: libnfs-utils 4.0 (nfs-ls, nfs-cp, nfs-cat) against a
# server on HOST (loopback only).
#
#   libnfs-interop.sh HOST NFS_PORT MOUNT_PORT EXPORT BACKING_DIR
#
# EXPORT is the exported path (v3 MOUNT path); BACKING_DIR is the local directory behind it,
# used to place input files and to check what the client wrote.
# Scenario (NFSv3; every transfer is checked with SHA-256 against the local file):
#   - nfs-ls / nfs-ls -R (names, types, sizes) of a tree placed by the host;
#   - 0 B, 1 B, 1 MiB + 1, 64 MiB: local -> NFS (nfs-cp), NFS -> local (nfs-cp and nfs-cat),
#     and NFS -> NFS (nfs-cp of what was just written);
#   - errors: nfs-cat of a missing file fails, nfs-cp over an existing file fails;
#   - mounts below the export: nfs-ls mounts (MNT) a plain subdirectory and <dir>/link/sub where
#     link is a symlink to a directory inside the export (knfsd's mountd resolves symlinks), and a
#     symlink that climbs out of the export is refused;
#   - directories: libnfs-utils 4.0 ships no nfs-mkdir/nfs-rm/nfs-mv, so mkdir, rename and rm -r
#     are done in BACKING_DIR and the NFS view is checked (listing, content, old name gone).
# Environment: LIBNFS_V4=1 also lists and reads over NFSv4.0 (its writes are broken in this
# libnfs, see PEERS.md); LIBNFS_BIG_MIB (64); LIBNFS_VERBOSE=1 prints each step and timings;
# LIBNFS_TIMEOUT per command in seconds (300).
set -euo pipefail

die() { echo "libnfs-interop: FAIL: $*" >&2; exit 1; }
[ $# -eq 5 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
HOST="$1" PORT="$2" MPORT="$3" EXPORT="$4" BACK="$5"
[[ "$HOST" =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "HOST must be a loopback address (got $HOST)"
[ -d "$BACK" ] || die "backing dir $BACK does not exist"
BACK="$(cd "$BACK" && pwd -P)"
for c in nfs-ls nfs-cp nfs-cat sha256sum timeout; do
    command -v "$c" >/dev/null || die "$c not found (run scripts/install-deps.sh)"
done
EXPORT="/${EXPORT#/}"; EXPORT="${EXPORT%/}"
BIG_MIB="${LIBNFS_BIG_MIB:-64}"
TMO="${LIBNFS_TIMEOUT:-300}"
TAG="li-$$"
WORK="$TAG"               # work dir inside the export
LOCAL="$(mktemp -d "${TMPDIR:-/tmp}/libnfs-interop.XXXXXX")"
cleanup() { rm -rf "$LOCAL" "${BACK:?}/$WORK"; }
trap cleanup EXIT

v3() { echo "nfs://$HOST$EXPORT${1:+/$1}?version=3&nfsport=$PORT&mountport=$MPORT"; }
v4() { echo "nfs://$HOST$EXPORT${1:+/$1}?version=4&nfsport=$PORT"; }
say() { if [ "${LIBNFS_VERBOSE:-0}" = 1 ]; then echo "libnfs-interop: $*"; fi; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
# run CMD with a timeout; on failure die with its output
run() {
    local out
    if ! out="$(timeout -k 5 "$TMO" "$@" 2>&1)"; then
        die "'$*' failed: $(echo "$out" | tail -n 3)"
    fi
    printf '%s' "$out"
}
same() {   # same A B WHAT
    [ -f "$2" ] || die "$3: $2 does not exist"
    local a b; a="$(sha "$1")"; b="$(sha "$2")"
    [ "$a" = "$b" ] || die "$3: sha256 differs ($1 $a, $2 $b; sizes $(stat -c %s "$1") vs $(stat -c %s "$2"))"
}
now() { date +%s.%N; }
secs() { echo "$(now) - $1" | bc; }

# ------------------------------------------------------------------ inputs
mkdir -p "$BACK/$WORK/tree/sub/deeper" "$LOCAL/src"
sizes=(0 1 $((1048576 + 1)) $((BIG_MIB * 1048576)))
for s in "${sizes[@]}"; do
    head -c "$s" /dev/urandom > "$LOCAL/src/f$s"
    cp "$LOCAL/src/f$s" "$BACK/$WORK/tree/h$s"        # host-placed copies, to be read over NFS
done
for i in 1 2 3 4 5; do echo "nested $i" > "$BACK/$WORK/tree/sub/deeper/n$i.txt"; done
echo "sub file" > "$BACK/$WORK/tree/sub/s.txt"
ln -s sub/s.txt "$BACK/$WORK/tree/link"
mkdir -p "$BACK/$WORK/up"

# ------------------------------------------------------------------ listing
say "nfs-ls $(v3)"
run nfs-ls "$(v3)" | grep -qE " $WORK\$" || die "nfs-ls of the export root does not show $WORK"
ls_r="$(run nfs-ls -R "$(v3 "$WORK/tree")")"
for p in h0 h1 "h$((1048576 + 1))" sub sub/s.txt sub/deeper sub/deeper/n5.txt link; do
    echo "$ls_r" | grep -qE " $p\$" || die "nfs-ls -R does not show $p: $ls_r"
done
for s in "${sizes[@]}"; do
    echo "$ls_r" | awk -v n="h$s" -v s="$s" '$NF == n && $5 == s {f=1} END {exit !f}' \
        || die "nfs-ls -R shows a wrong size for h$s (expected $s): $(echo "$ls_r" | grep " h$s\$")"
done
echo "$ls_r" | grep -qE '^l.* link$' || die "nfs-ls -R does not show link as a symlink"
echo "$ls_r" | grep -qE '^d.* sub$' || die "nfs-ls -R does not show sub as a directory"

# ------------------------------------------------------------------ mounts below the export
# nfs-ls sends MNT for the whole path it is given, so each of these is a MOUNT of that directory.
mkdir -p "$BACK/$WORK/m/data/sub"
echo "below a link" > "$BACK/$WORK/m/data/sub/b.txt"
ln -s data "$BACK/$WORK/m/link"
ln -s ../../.. "$BACK/$WORK/m/out"      # $WORK/m -> $WORK -> export -> its parent
run nfs-ls "$(v3 "$WORK/m/data")" | grep -qE ' sub$' || die "MNT of a plain subdirectory: no sub"
run nfs-ls "$(v3 "$WORK/m/link/sub")" | grep -qE ' b\.txt$' \
    || die "MNT of <dir>/link/sub (link -> data) does not list b.txt"
if out="$(timeout -k 5 60 nfs-ls "$(v3 "$WORK/m/out")" 2>&1)"; then
    die "MNT through a symlink that leaves the export succeeded: $out"
fi

# ------------------------------------------------------------------ transfers
for s in "${sizes[@]}"; do
    t=$(now)
    run nfs-cp "$LOCAL/src/f$s" "$(v3 "$WORK/up/f$s")" >/dev/null
    say "nfs-cp local -> NFS $s B: $(secs "$t") s"
    same "$LOCAL/src/f$s" "$BACK/$WORK/up/f$s" "nfs-cp local->NFS $s B (backing file)"

    t=$(now)
    run nfs-cp "$(v3 "$WORK/tree/h$s")" "$LOCAL/cp$s" >/dev/null
    say "nfs-cp NFS -> local $s B: $(secs "$t") s"
    same "$LOCAL/src/f$s" "$LOCAL/cp$s" "nfs-cp NFS->local $s B"

    t=$(now)
    timeout -k 5 "$TMO" nfs-cat "$(v3 "$WORK/tree/h$s")" > "$LOCAL/cat$s" \
        || die "nfs-cat $(v3 "$WORK/tree/h$s") failed"
    say "nfs-cat NFS -> local $s B: $(secs "$t") s"
    same "$LOCAL/src/f$s" "$LOCAL/cat$s" "nfs-cat NFS->local $s B"

    # read back what the client itself wrote, and NFS -> NFS
    timeout -k 5 "$TMO" nfs-cat "$(v3 "$WORK/up/f$s")" > "$LOCAL/back$s" || die "nfs-cat of up/f$s failed"
    same "$LOCAL/src/f$s" "$LOCAL/back$s" "nfs-cp then nfs-cat round trip $s B"
    run nfs-cp "$(v3 "$WORK/up/f$s")" "$(v3 "$WORK/up/g$s")" >/dev/null
    same "$LOCAL/src/f$s" "$BACK/$WORK/up/g$s" "nfs-cp NFS->NFS $s B (backing file)"
    rm -f "$LOCAL/cp$s" "$LOCAL/cat$s" "$LOCAL/back$s"
done
ls_up="$(run nfs-ls "$(v3 "$WORK/up")")"
for s in "${sizes[@]}"; do
    echo "$ls_up" | awk -v n="f$s" -v s="$s" '$NF == n && $5 == s {f=1} END {exit !f}' \
        || die "nfs-ls of up/ shows a wrong size for f$s: $ls_up"
done

# ------------------------------------------------------------------ errors
if timeout -k 5 60 nfs-cat "$(v3 "$WORK/does-not-exist")" >/dev/null 2>&1; then
    die "nfs-cat of a missing file succeeded"
fi
if timeout -k 5 60 nfs-cp "$LOCAL/src/f1" "$(v3 "$WORK/up/f0")" >/dev/null 2>&1; then
    die "nfs-cp over an existing file succeeded (libnfs creates exclusively: the server ignored it)"
fi
[ "$(stat -c %s "$BACK/$WORK/up/f0")" = 0 ] || die "failed nfs-cp over up/f0 changed it"

# ------------------------------------------------------------------ directories (host side)
mkdir "$BACK/$WORK/newdir"
echo "in new dir" > "$BACK/$WORK/newdir/x.txt"
ls_work="$(run nfs-ls "$(v3 "$WORK")")"
echo "$ls_work" | grep -qE '^d.* newdir$' \
    || die "host mkdir not visible over NFS; nfs-ls printed: $(echo "$ls_work" | tail -n 20)"
[ "$(run nfs-cat "$(v3 "$WORK/newdir/x.txt")")" = "in new dir" ] || die "file in a new dir reads wrong"
mv "$BACK/$WORK/newdir" "$BACK/$WORK/renamed"
mv "$BACK/$WORK/up/f1" "$BACK/$WORK/up/f1-renamed"
l="$(run nfs-ls "$(v3 "$WORK")")"
echo "$l" | grep -qE ' renamed$' || die "renamed dir not listed: $l"
echo "$l" | grep -qE ' newdir$' && die "old dir name still listed after rename: $l"
[ "$(run nfs-cat "$(v3 "$WORK/renamed/x.txt")")" = "in new dir" ] || die "file under renamed dir reads wrong"
timeout -k 5 60 nfs-cat "$(v3 "$WORK/newdir/x.txt")" >/dev/null 2>&1 && die "old dir name still resolves"
timeout -k 5 "$TMO" nfs-cat "$(v3 "$WORK/up/f1-renamed")" > "$LOCAL/r1" || die "renamed file unreadable"
same "$LOCAL/src/f1" "$LOCAL/r1" "renamed file"
rm -r "$BACK/$WORK/renamed"
run nfs-ls "$(v3 "$WORK")" | grep -qE ' renamed$' && die "removed dir still listed"
timeout -k 5 60 nfs-ls "$(v3 "$WORK/renamed")" >/dev/null 2>&1 && die "removed dir still lists"

# ------------------------------------------------------------------ optional NFSv4.0 reads
if [ "${LIBNFS_V4:-0}" = 1 ]; then
    run nfs-ls "$(v4 "$WORK/tree")" | grep -qE " h1\$" || die "NFSv4 nfs-ls does not show h1"
    for s in "${sizes[@]}"; do
        t=$(now)
        timeout -k 5 "$TMO" nfs-cat "$(v4 "$WORK/tree/h$s")" > "$LOCAL/v4$s" || die "NFSv4 nfs-cat h$s failed"
        say "NFSv4 nfs-cat $s B: $(secs "$t") s"
        same "$LOCAL/src/f$s" "$LOCAL/v4$s" "NFSv4 nfs-cat $s B"
        rm -f "$LOCAL/v4$s"
    done
fi
say "PASS"
exit 0
