#!/usr/bin/env bash
# Issue 17 benchmark: `sluice cp -r` of a tree of small files through `sluice link`, one file at
# a time (`--jobs 1`) vs the default (many files at once, see crates/cli/src/cmd/cp.rs "Trees").
# The issue's target: 10,000 files of 4 KiB through a 1 ms link, >= 5x faster than one file at
# a time, contents verified.
#
#   bench/tree-copy.sh [--files 10000] [--bytes 4096] [--reps 3] [--rtt 1ms] [--rate 300MB/s]
#                      [--no-link] [--out FILE]
#
# Both directions: local -> NFS (CREATE + one FILE_SYNC WRITE per file) and NFS -> local
# (READDIRPLUS + READ per file). Each rep runs both modes, order alternating; reported are the
# medians of the wall times and the ratio jobs1 / default per direction. After every copy the
# destination tree is checked against the source: the same relative paths, and the SHA-256 of
# every file (a mismatch stops the run). The tree is 100 files per directory, as a source tree
# of small files tends to be. --no-link talks to the server directly (for trying the script).
#
# Env: BENCH_KEEP=1 keeps the work dir; BENCH_SKIP_BUILD=1 skips cargo build; SLUICE_BIN=PATH
# uses that binary instead of target/release/sluice.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

FILES=10000; BYTES=4096; REPS=3; RTT=1ms; RATE=300MB/s; LINK=1
OUT="$BENCH_ROOT/bench/results/tree-copy-$(date -u +%Y-%m-%d).md"
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES="$2"; shift ;;
        --bytes) BYTES="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --rtt) RTT="$2"; shift ;;
        --rate) RATE="$2"; shift ;;
        --no-link) LINK=0 ;;
        --out) OUT="$2"; shift ;;
        *) sed -n '2,19p' "$0" >&2; exit 2 ;;
    esac
    shift
done

if [ -n "${SLUICE_BIN:-}" ]; then BIN="$SLUICE_BIN"; export BENCH_SKIP_BUILD=1; fi
bench_init tree-copy
W="$BENCH_WORK"
mkdir -p "$W/export" "$W/down"

# The source tree: FILES files of BYTES pseudo-random bytes, 100 per directory.
python3 - "$W/src" "$FILES" "$BYTES" <<'PY'
import os, random, sys
root, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(17)
for i in range(files):
    d = os.path.join(root, f"d{i // 100:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i % 100:02d}"), "wb") as f:
        f.write(rnd.randbytes(size))
PY

# tree_digest DIR: one SHA-256 over every relative path and its contents' SHA-256, and the
# number of files ("DIGEST COUNT").
tree_digest() {
    python3 - "$1" <<'PY'
import hashlib, os, sys
root = sys.argv[1]
out, n = hashlib.sha256(), 0
for d, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(files):
        p = os.path.join(d, name)
        with open(p, "rb") as f:
            h = hashlib.sha256(f.read()).hexdigest()
        out.update(f"{os.path.relpath(p, root)} {h}\n".encode())
        n += 1
print(out.hexdigest(), n)
PY
}
WANT=$(tree_digest "$W/src")
[ "${WANT#* }" = "$FILES" ] || bench_die "the source tree has ${WANT#* } files, not $FILES"

start_sluice srv "$W/export"
PORT=$SL_PORT
if [ "$LINK" = 1 ]; then
    PORT=$(free_port)
    "$BIN" link --listen 127.0.0.1:"$PORT" --to 127.0.0.1:"$SL_PORT" --rtt "$RTT" --rate "$RATE" \
        >"$W/link.log" 2>&1 &
    BENCH_PIDS+=("$!")
    wait_port "$PORT"
    PATH_DESC="sluice link --rtt $RTT --rate $RATE"
else
    PATH_DESC="loopback, no link"
fi
url() { echo "nfs://127.0.0.1$W/export/$1?version=3&nfsport=$PORT&mountport=$PORT"; }

# copy_timed SECS_VAR ARGS...: runs sluice cp -q -r ARGS (bounded by BENCH_TIMEOUT, default 600
# s), sets SECS_VAR to its wall time.
copy_timed() {
    local var="$1" t0 t1; shift
    t0=$(date +%s.%N)
    timeout "${BENCH_TIMEOUT:-600}" "$BIN" cp -q -r "$@" 2>>"$W/cp.err" \
        || bench_die "sluice cp -r $* failed: $(tail -3 "$W/cp.err")"
    t1=$(date +%s.%N)
    printf -v "$var" '%s' "$(py "$t1 - $t0")"
}

check() {   # DIR WHAT: DIR holds the source tree exactly
    local got
    got=$(tree_digest "$1")
    [ "$got" = "$WANT" ] || bench_die "$2: contents differ from the source ($got vs $WANT)"
}

declare -A T
RAW=""
for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then order=(jobs1 default); else order=(default jobs1); fi
    for mode in "${order[@]}"; do
        jobs=(); [ "$mode" = jobs1 ] && jobs=(--jobs 1)
        name="up-$rep-$mode"
        copy_timed up "${jobs[@]}" "$W/src" "$(url "$name")"
        check "$W/export/$name" "local -> NFS ($mode, rep $rep)"
        copy_timed down "${jobs[@]}" "$(url "$name")" "$W/down/$name"
        check "$W/down/$name" "NFS -> local ($mode, rep $rep)"
        rm -rf "${W:?}/export/$name" "${W:?}/down/$name"
        T[$mode.up]+="$up, "; T[$mode.down]+="$down, "
        RAW+="| $rep | $mode | $(py "f'{$up:.2f}'") | $(py "f'{$down:.2f}'") |"$'\n'
        echo "rep $rep $mode: up ${up}s down ${down}s" >&2
    done
done

med() { py "st.median([${T[$1]}])"; }
row() {   # DIRECTION LABEL
    local one many
    one=$(med "jobs1.$1"); many=$(med "default.$1")
    echo "| $2 | $(py "f'{$one:.2f}'") | $(py "f'{$many:.2f}'") | $(py "f'{$one / $many:.1f}x'") | $(py "'met' if $one / $many >= 5 else '**missed**'") |"
}

{
echo "# sluice cp -r: $FILES files of $BYTES bytes, one at a time vs many at once"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo "Path: $PATH_DESC, to \`sluice serve\` (defaults) on the same host. Tree: $FILES files, 100 per directory."
echo "Each copy is \`sluice cp -q -r\` with \`--jobs 1\` or the default jobs; every destination tree was checked"
echo "against the source (relative paths and SHA-256 of every file). Times are wall seconds, medians of $REPS reps"
echo "(modes alternating in order). Target (issue 17): the default >= 5x faster than one file at a time."
echo
echo "| direction | --jobs 1 (s) | default (s) | speed-up | target |"
echo "|---|---|---|---|---|"
row up "local -> NFS"
row down "NFS -> local"
echo
echo "Every run:"
echo
echo "| rep | mode | local -> NFS (s) | NFS -> local (s) |"
echo "|---|---|---|---|"
printf '%s' "$RAW"
} | tee "$W/table.md"

mkdir -p "$(dirname "$OUT")"
cp "$W/table.md" "$OUT"
echo "wrote $OUT" >&2
