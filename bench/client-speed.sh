#!/usr/bin/env bash
# Issue 17 benchmark: the client at link and disk speed, on loopback, everything side by side in
# one run (ratios only; see bench/README.md).
#
#   reads   a warm file of --size (default 512M) on `sluice serve` (defaults) and on nfs-ganesha
#           (VFS FSAL), each read --reps times, clients interleaved:
#             sluice cat URL > /dev/null      vs  nfs-cat URL > /dev/null   (libnfs, 1 READ in flight)
#             sluice cp URL TMPFS/f           vs  nfs-cp URL TMPFS/f        (/dev/shm, file removed after)
#             sluice bench --workload read --depth 16 --nconnect 2   (the best-rate reference client)
#           Targets: sluice cat >= 1.0x nfs-cat and >= 0.9 of the best client from that server;
#           sluice cp >= 1.0x nfs-cp. Every rate also over iperf3's single-stream rate.
#   upload  `sluice cp LOCAL URL` of --size to `sluice serve` (defaults) vs local
#           `dd bs=1M conv=fdatasync` into the same file system, alternating, medians and spread
#           (min-max over reps: this disk's speed swings several-fold). Target >= 0.6x dd. The
#           source is in /dev/shm, so neither side reads the disk.
#   write   `sluice bench --workload write --depth 16` against a default export vs one started
#           with `--io-write direct`, alternating, with server CPU s per GiB (utime+stime of the
#           server process from /proc/PID/stat). Target: default >= 0.8x direct.
#
# --nfs-version 4.1 (or 4.2, 4: the highest 4.x) runs every sluice client above over NFSv4
# (issue 15); default 3. The best client has two connections either way (over 4.x: one
# session trunked over both). libnfs speaks NFSv3 and NFSv4.0 only, so nfs-cat and
# nfs-cp read over `version=4` (4.0) from ganesha and stay on NFSv3 against `sluice serve`,
# which serves 4.1 and 4.2 but not 4.0; the table says which. Issue 15's target is then
# `sluice cp` over 4.x from ganesha >= 1.5x `nfs-cat version=4` from ganesha.
#
#   bench/client-speed.sh [--size 512M] [--reps 5] [--nfs-version V] [--out FILE]
#
# Env: SLUICE_SERVE_ARGS adds options to both default `sluice serve`s; SLUICE_CLIENT_ARGS adds
# options to the reads' `sluice cat` and `sluice cp` (e.g. "--nconnect 2"); BENCH_KEEP=1,
# BENCH_SKIP_BUILD=1, BENCH_GANESHA_CACHING=0 (see lib.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZE=512M; REPS=5; OUT=""; NFSV=3
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --nfs-version) NFSV="$2"; shift ;;
        *) sed -n '2,30p' "$0" >&2; exit 2 ;;
    esac
    shift
done
for t in nfs-cat nfs-cp dd; do command -v "$t" >/dev/null || { echo "$t not found" >&2; exit 1; }; done

bench_init client-speed
bench_nfs_version "$NFSV"
# the best client's connections, and the version libnfs reads with from each server (see above)
BEST_NCONNECT=2
if [ "$NFSV" = 3 ]; then LIBNFS_SL=3; LIBNFS_GAN=3
else LIBNFS_SL=3; LIBNFS_GAN=4; fi
libnfs_name() { if [ "$1" = 3 ]; then echo "NFSv3"; else echo "NFSv4.0"; fi; }
W="$BENCH_WORK"
BYTES=$(numfmt --from=iec "$SIZE")
MIB=$((BYTES / 1048576))
[ "$MIB" -ge 1 ] || bench_die "--size below 1 MiB"
SHM=$(mktemp -d /dev/shm/sluice-client-speed.XXXXXX)
# bench_cleanup (lib.sh) owns the EXIT trap; /dev/shm is cleaned here first.
trap 'rm -rf "$SHM"; bench_cleanup' EXIT
mkdir -p "$W/sl" "$W/gan" "$W/up" "$W/local" "$W/wd"
dd if=/dev/urandom of="$W/sl/f" bs=1M count="$MIB" status=none conv=fsync
cp "$W/sl/f" "$W/gan/f"
cp "$W/sl/f" "$SHM/src"

LOOP_BPS=$(iperf3_rate)
# shellcheck disable=SC2086
start_sluice sl "$W/sl" ${SLUICE_SERVE_ARGS:-}; SL_RD_PORT=$SL_PORT; SL_RD_PID=$SL_PID
# shellcheck disable=SC2086
start_sluice up "$W/up" ${SLUICE_SERVE_ARGS:-}; UP_PORT=$SL_PORT; UP_PID=$SL_PID
start_sluice wd "$W/wd" --io-write direct; WD_PORT=$SL_PORT; WD_PID=$SL_PID
start_ganesha gan "$W/gan"
echo "servers: sluice :$SL_RD_PORT, upload :$UP_PORT, --io-write direct :$WD_PORT, ganesha :$GA_PORT" >&2

declare -A RATE
RAW=""
# timed LABEL CMD...: runs CMD (stdout to /dev/null unless redirected inside), appends BYTES/secs
# to RATE[LABEL]
timed() {
    local label="$1" t0 t1 r; shift
    t0=$(date +%s.%N)
    "$@" || bench_die "$label failed: $*"
    t1=$(date +%s.%N)
    r=$(py "$BYTES / ($t1 - $t0)")
    RATE[$label]+="$r "
    RAW+="| $label | $(py "f'{$t1 - $t0:.3f}'") | $(py "f'{$r/1e6:.0f}'") |"$'\n'
}
# shellcheck disable=SC2086
sl_cat() { "$BIN" cat ${SLUICE_CLIENT_ARGS:-} "$1" > /dev/null; }
nfs_cat() { nfs-cat "$1" > /dev/null; }
# shellcheck disable=SC2086
sl_cp() { "$BIN" cp -q ${SLUICE_CLIENT_ARGS:-} "$1" "$SHM/f"; rm -f "$SHM/f"; }
nfs_cp() { nfs-cp "$1" "$SHM/f" > /dev/null; rm -f "$SHM/f"; }
# The best-rate reference client, timed like every other client above: the whole command by
# the wall clock (its own report leaves out its start-up, connect and MOUNT, about 10 ms, which
# the others pay; that rate is kept in the raw table as "own").
sl_bench() {
    "$BIN" bench --workload read --size "$SIZE" --block 1M --depth 16 \
        --nconnect "$BEST_NCONNECT" "$1" > "$W/best.out"
}
best() {
    local server="$1" url="$2" line
    timed "$server.bench" sl_bench "$url"
    line=$(tail -1 "$W/best.out")
    RATE[$server.bench-own]+="$(py "$BYTES / $(kv secs "$line")") "
    RAW+="| $server.bench (own timing) | $(kv secs "$line") | $(kv rate_mb_s "$line" | cut -d. -f1) |"$'\n'
}

# --- reads: warm (each server reads its file once first) ---
SL_URL=$(nfs_url "$W/sl/f" "$SL_RD_PORT" "$SL_RD_PORT" "$NFSV")
GA_URL=$(nfs_url "$W/gan/f" "$GA_PORT" "$((GA_PORT + 1))" "$NFSV")
# the same files for libnfs (nfs-cat, nfs-cp)
SL_LURL=$(nfs_url "$W/sl/f" "$SL_RD_PORT" "$SL_RD_PORT" "$LIBNFS_SL")
GA_LURL=$(nfs_url "$W/gan/f" "$GA_PORT" "$((GA_PORT + 1))" "$LIBNFS_GAN")
sl_cat "$SL_URL"; sl_cat "$GA_URL"
for rep in $(seq 1 "$REPS"); do
    echo "reads rep $rep" >&2
    for s in sl gan; do
        if [ "$s" = sl ]; then url=$SL_URL; lurl=$SL_LURL
        else url=$GA_URL; lurl=$GA_LURL; fi
        # the clients' order rotates per rep, so no client always runs right after another
        if [ $((rep % 2)) = 1 ]; then
            timed "$s.sluice-cat" sl_cat "$url"; timed "$s.nfs-cat" nfs_cat "$lurl"
            timed "$s.sluice-cp" sl_cp "$url"; timed "$s.nfs-cp" nfs_cp "$lurl"
        else
            timed "$s.nfs-cat" nfs_cat "$lurl"; timed "$s.sluice-cat" sl_cat "$url"
            timed "$s.nfs-cp" nfs_cp "$lurl"; timed "$s.sluice-cp" sl_cp "$url"
        fi
        best "$s" "$url"
    done
done

# --- upload: sluice cp to `sluice serve` vs local dd, alternating ---
UP_URL=$(nfs_url "$W/up/u" "$UP_PORT" "$UP_PORT" "$NFSV")
sl_up() { "$BIN" cp -q "$SHM/src" "$UP_URL"; }
dd_up() { dd if="$SHM/src" of="$W/local/u" bs=1M conv=fdatasync status=none; }
for rep in $(seq 1 "$REPS"); do
    echo "upload rep $rep" >&2
    rm -f "$W/up/u" "$W/local/u"; sync
    if [ $((rep % 2)) = 1 ]; then timed up.sluice-cp sl_up; timed up.dd dd_up
    else timed up.dd dd_up; timed up.sluice-cp sl_up; fi
done
cmp -s "$SHM/src" "$W/up/u" || bench_die "the uploaded file differs from its source"

# --- write: bench --workload write, default export vs --io-write direct ---
declare -A WCPU
for rep in $(seq 1 "$REPS"); do
    echo "write rep $rep" >&2
    if [ $((rep % 2)) = 1 ]; then order="up wd"; else order="wd up"; fi
    for s in $order; do
        if [ "$s" = up ]; then port=$UP_PORT; pid=$UP_PID; d="$W/up"; else port=$WD_PORT; pid=$WD_PID; d="$W/wd"; fi
        rm -f "$d/w"
        bench_run r "$pid" "$(nfs_url "$d/w" "$port" "$port" "$NFSV")" --workload write --size "$SIZE" --block 1M --depth 16
        RATE[write.$s]+="$r_rate "
        WCPU[$s]+="$(py "$r_cpu / ($r_bytes / 2**30)") "
        RAW+="| write.$s | $(kv secs "$r_line") | $(py "f'{$r_rate/1e6:.0f}'") (server cpu $r_cpu s) |"$'\n'
    done
done
LOOP_BPS2=$(iperf3_rate)
LOOP=$(py "($LOOP_BPS + $LOOP_BPS2) / 2")

arr() { echo "[${1// /,}]"; }
med() { py "st.median($(arr "${RATE[$1]}"))"; }
ratio() {   # A B TARGET: median of per-rep ratios A/B (the two ran back to back), and met/missed
    local a b r
    a=$(arr "${RATE[$1]}"); b=$(arr "${RATE[$2]}")
    r=$(py "st.median([x/y for x, y in zip($a, $b)])")
    echo "$(py "f'{$r:.2f}'") | $(py "'met' if $r >= $3 else '**missed**'")"
}
CLIENT_NOTE=""
if [ -n "${SLUICE_CLIENT_ARGS:-}" ]; then
    CLIENT_NOTE=" The reads' sluice cat and cp ran with \`$SLUICE_CLIENT_ARGS\`."
fi
spread() { py "f'{min($(arr "${RATE[$1]}"))/1e6:.0f}-{max($(arr "${RATE[$1]}"))/1e6:.0f} MB/s'"; }
{
echo "# The client at link and disk speed (issue 17$( [ "$NFSV" = 3 ] || echo ", over NFSv$NFSV: issue 15")): reads, uploads, writes on loopback"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "File: $SIZE of random data. $REPS reps, clients' order alternating per rep; medians of per-rep ratios."
echo "Reads are warm (the file in the server's page cache). sluice: \`sluice serve --no-root-squash ${SLUICE_SERVE_ARGS:-}\`;"
echo "ganesha 4.3, VFS FSAL. Every sluice client over NFS version $NFSV. \`nfs-cat\` / \`nfs-cp\`: libnfs, one 1 MiB READ in flight, over $(libnfs_name "$LIBNFS_SL") from sluice serve and $(libnfs_name "$LIBNFS_GAN") from ganesha. Best client: \`sluice bench --workload read --depth 16 --nconnect $BEST_NCONNECT\`, timed like the others (the whole command by the wall clock; its own figure, which leaves out its start-up, is in the raw table as \`bench (own timing)\`).$CLIENT_NOTE"
echo "Loopback single-stream limit (iperf3, before/after): $(py "f'{$LOOP_BPS/1e6:.0f}'") / $(py "f'{$LOOP_BPS2/1e6:.0f}'") MB/s."
echo
echo "| server | sluice cat / nfs-cat (>= 1.0) | | sluice cat / best client (>= 0.9) | | sluice cp / nfs-cp (>= 1.0) | | sluice cat / loopback | nfs-cat / loopback | sluice cp / loopback | nfs-cp / loopback | best / loopback |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for s in sl gan; do
    name=$([ "$s" = sl ] && echo "sluice serve" || echo "nfs-ganesha")
    echo "| $name | $(ratio "$s.sluice-cat" "$s.nfs-cat" 1.0) | $(ratio "$s.sluice-cat" "$s.bench" 0.9) | $(ratio "$s.sluice-cp" "$s.nfs-cp" 1.0) | $(py "f'{$(med "$s.sluice-cat")/$LOOP:.3f}'") | $(py "f'{$(med "$s.nfs-cat")/$LOOP:.3f}'") | $(py "f'{$(med "$s.sluice-cp")/$LOOP:.3f}'") | $(py "f'{$(med "$s.nfs-cp")/$LOOP:.3f}'") | $(py "f'{$(med "$s.bench")/$LOOP:.3f}'") |"
done
echo
if [ "$NFSV" != 3 ]; then
    echo "Issue 15: \`sluice cp\` over NFSv$NFSV from ganesha / \`nfs-cat\` over NFSv4.0 (\`version=4\`) from ganesha: $(ratio gan.sluice-cp gan.nfs-cat 1.5) (target >= 1.5)."
    echo
fi
own() { local r; r=$(ratio "$1.sluice-cat" "$1.bench-own" 0.9); echo "${r%% |*}"; }
echo "Against the best client's own timing (its start-up left out, a stricter comparison than the table's): sluice cat / best $(own sl) from sluice serve, $(own gan) from ganesha."
echo
echo "Upload of $SIZE (source in /dev/shm): \`sluice cp\` to \`sluice serve\` (defaults) / local \`dd bs=1M conv=fdatasync\` into the same file system: $(ratio up.sluice-cp up.dd 0.6) (target >= 0.6). Spread: sluice cp $(spread up.sluice-cp), dd $(spread up.dd)."
echo
wu=$(arr "${WCPU[up]}"); wd=$(arr "${WCPU[wd]}")
echo "\`sluice bench --workload write --depth 16\`, default export / \`--io-write direct\`: $(ratio write.up write.wd 0.8) (target >= 0.8). Server CPU per GiB: default $(py "f'{st.median($wu):.2f}'") s, direct $(py "f'{st.median($wd):.2f}'") s. Spread: default $(spread write.up), direct $(spread write.wd)."
echo
echo "## Raw"
echo
echo "| what | seconds | MB/s |"
echo "|---|---|---|"
printf '%s' "$RAW"
} > "$W/table.md"
cat "$W/table.md"
if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; cp "$W/table.md" "$OUT"; echo "wrote $OUT" >&2; fi
