#!/usr/bin/env bash
# Issue 5 benchmark: sluice's server against nfs-ganesha 4.3 (VFS FSAL) with the same client
# (`sluice bench`), side by side in one run, each exporting its own directory on the same disk
# file system. Per server and rep, in this order:
#
#   write        cold  new file (old one removed, page cache dropped):
#                      sluice bench --workload write --size 1G --block 1M --depth 16, then COMMIT
#   read-cold    cold  page cache dropped: --workload read --size 1G --block 1M --depth 16
#   read-warm    warm  the same again (the file is now in the server's page cache)
#   randread-warm warm --workload randread --block 4k --depth 32 --count 50000 (1 GiB file)
#   randread-cold cold page cache dropped, the same randread
#
# Reported per phase: throughput and server CPU seconds (utime+stime of the server process, all
# threads, from /proc/PID/stat) per GiB moved, as ratios sluice / ganesha, and throughput over
# the loopback single-stream limit (iperf3, measured in the same run, before and after).
# Issue 5's targets: sluice >= 1.2x ganesha's throughput and <= 0.5x its CPU per GiB.
# The server order alternates between reps; medians over reps are reported, with each rep's
# values in the raw table. Figures are ratios: absolute rates on 2 noisy cores mean little.
#
# Before the reps each server takes one untimed warm-up write of the same size (--warmup 0 skips
# it): a server's first run also pays for faulting in its own buffers, which no later run does.
#
# --cc NAME runs everything under that TCP congestion control (the host's is restored after):
# see bench_tcp_cc in lib.sh for why `--cc cubic` is reported next to the host default (bbr).
# --nconnect N gives the client N TCP connections (both servers alike): with one, a fast
# sequential read is bound by the one client thread that copies replies out of the socket.
# The disk's sequential read limit (4 parallel O_DIRECT readers of a file of --size, before and
# after the reps) is printed next to the loopback limit: read-cold cannot go faster than it.
# --nfs-version 4.1 (or 4.2, 4: the highest 4.x) puts the same load on both servers over an
# NFSv4 session, one COMPOUND per call (issue 15); default 3. Over 4.x --nconnect N trunks the
# one session over N connections.
#
#   bench/server-vs-ganesha.sh [--size 1G] [--count 50000] [--reps 3] [--warmup 1] [--cc NAME]
#                              [--nconnect N] [--nfs-version 3|4|4.1|4.2] [--out FILE]
#
# Env: BENCH_GANESHA_CACHING=0 runs ganesha with the test config (no attribute caching);
# SLUICE_SERVE_ARGS adds options to `sluice serve`; BENCH_KEEP=1, BENCH_SKIP_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZE=1G; COUNT=50000; REPS=3; WARMUP=1; OUT=""; CC=""; NCONNECT=1; NFSV=3
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift ;;
        --count) COUNT="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --warmup) WARMUP="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --cc) CC="$2"; shift ;;
        --nconnect) NCONNECT="$2"; shift ;;
        --nfs-version) NFSV="$2"; shift ;;
        *) sed -n '2,36p' "$0" >&2; exit 2 ;;
    esac
    shift
done

bench_init server-vs-ganesha
bench_nfs_version "$NFSV" "$NCONNECT"
W="$BENCH_WORK"
mkdir -p "$W/sl" "$W/gan"
if [ -n "$CC" ]; then bench_tcp_cc "$CC"; fi

LOOP_BPS=$(iperf3_rate)
DISK_BPS=$(disk_read_rate "$W/disk.probe" "$SIZE")
# shellcheck disable=SC2086
start_sluice sl "$W/sl" ${SLUICE_SERVE_ARGS:-}
start_ganesha gan "$W/gan"
echo "servers: sluice :$SL_PORT (pid $SL_PID), ganesha :$GA_PORT (pid $GA_PID)" >&2

PHASES=(write read-cold read-warm randread-warm randread-cold)
declare -A RATE CPU
RAW=""
one_server() {   # sl|gan REP
    local s=$1 rep=$2 pid url ph
    # a new file name per rep: the previous rep's file is removed on the host, and ganesha's
    # attribute cache would still hand out its (now stale) handle for the old name
    rm -f "$W/$s"/f.*
    if [ "$s" = sl ]; then pid=$SL_PID; url=$(nfs_url "$W/sl/f.$rep" "$SL_PORT" "$SL_PORT" "$NFSV")
    else pid=$GA_PID; url=$(nfs_url "$W/gan/f.$rep" "$GA_PORT" "$((GA_PORT + 1))" "$NFSV"); fi
    for ph in "${PHASES[@]}"; do
        case $ph in
            write) drop_caches
                   bench_run r "$pid" "$url" --workload write --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT" ;;
            read-cold) drop_caches
                   bench_run r "$pid" "$url" --workload read --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT" ;;
            read-warm)
                   bench_run r "$pid" "$url" --workload read --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT" ;;
            randread-warm)
                   bench_run r "$pid" "$url" --workload randread --block 4k --depth 32 --count "$COUNT" --seed "$rep" --nconnect "$NCONNECT" ;;
            randread-cold) drop_caches
                   bench_run r "$pid" "$url" --workload randread --block 4k --depth 32 --count "$COUNT" --seed "$((rep + 100))" --nconnect "$NCONNECT" ;;
        esac
        RATE[$s.$ph]+="$r_rate "
        CPU[$s.$ph]+="$(py "$r_cpu / ($r_bytes / 2**30)") "
        RAW+="| $rep | $s | $ph | $r_line | $r_cpu |"$'\n'
    done
}
for w in $(seq 1 "$WARMUP"); do
    echo "warm-up $w" >&2
    for s in sl gan; do
        rm -f "$W/$s"/f.*
        if [ "$s" = sl ]; then pid=$SL_PID; url=$(nfs_url "$W/sl/f.warm" "$SL_PORT" "$SL_PORT" "$NFSV")
        else pid=$GA_PID; url=$(nfs_url "$W/gan/f.warm$w" "$GA_PORT" "$((GA_PORT + 1))" "$NFSV"); fi
        drop_caches
        bench_run r "$pid" "$url" --workload write --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT"
    done
done
for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then order="sl gan"; else order="gan sl"; fi
    echo "rep $rep: $order" >&2
    for s in $order; do one_server "$s" "$rep"; done
done
LOOP_BPS2=$(iperf3_rate)
LOOP=$(py "($LOOP_BPS + $LOOP_BPS2) / 2")
DISK_BPS2=$(disk_read_rate "$W/disk.probe" "$SIZE")
DISK=$(py "($DISK_BPS + $DISK_BPS2) / 2")

arr() { echo "[${1// /,}]"; }
{
echo "# sluice server vs nfs-ganesha: sequential 1 MiB write/read, 4 KiB random reads (issue 5$( [ "$NFSV" = 3 ] || echo ", over NFSv$NFSV: issue 15"))"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "Client for both servers: \`sluice bench\` over NFS version $NFSV ($( [ "$NFSV" = 3 ] && echo "one RPC per call" || echo "one SEQUENCE+PUTFH+READ/WRITE COMPOUND per call on one session")), $NCONNECT TCP connection(s) (\`--nconnect $NCONNECT\`)."
echo "Sequential: $SIZE, 1 MiB calls, 16 in flight"
echo "(write ends with one COMMIT, included in its time). Random: $COUNT x 4 KiB READs at random aligned offsets of the"
echo "$SIZE file, 32 in flight. Phases per server: write (**cold**: new file, old one removed, page cache dropped) -> read-cold (page cache"
echo "dropped) -> read-warm (file in the page cache) -> randread-warm -> randread-cold (page cache dropped)."
echo "$REPS reps after $WARMUP untimed warm-up write(s) per server, server order alternating; medians over reps. Servers ran side by side in this one run."
echo "sluice: \`sluice serve --no-root-squash ${SLUICE_SERVE_ARGS:-}\` (defaults: --io buffered, write-behind with clustering)."
echo "ganesha 4.3: VFS FSAL, caching $( [ "${BENCH_GANESHA_CACHING:-1}" = 1 ] && echo "at ganesha's defaults (GANESHA_CACHING=1)" || echo "off (the test config)")."
echo "Loopback single-stream limit (iperf3 -J, before/after): $(py "f'{$LOOP_BPS/1e6:.0f}'") / $(py "f'{$LOOP_BPS2/1e6:.0f}'") MB/s."
echo "Disk sequential read limit (4 parallel O_DIRECT 1 MiB readers of a $SIZE file, before/after): $(py "f'{$DISK_BPS/1e6:.0f}'") / $(py "f'{$DISK_BPS2/1e6:.0f}'") MB/s; read-cold medians: sluice $(py "f'{st.median($(arr "${RATE[sl.read-cold]}"))/$DISK:.2f}'"), ganesha $(py "f'{st.median($(arr "${RATE[gan.read-cold]}"))/$DISK:.2f}'") of it."
echo "Server CPU: utime+stime of the server process per GiB moved (for randread: per GiB of 4 KiB payload)."
echo
echo "| phase | sluice / ganesha throughput | target >= 1.2 | sluice / loopback | ganesha / loopback | sluice / ganesha CPU per GiB | target <= 0.5 | sluice CPU s/GiB | ganesha CPU s/GiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for ph in "${PHASES[@]}"; do
    rs=$(arr "${RATE[sl.$ph]}"); rg=$(arr "${RATE[gan.$ph]}")
    cs=$(arr "${CPU[sl.$ph]}"); cg=$(arr "${CPU[gan.$ph]}")
    # per-rep ratios (the two servers of a rep ran back to back), then their median
    tr=$(py "st.median([a/b for a, b in zip($rs, $rg)])")
    cr=$(py "st.median([a/b if b else float('inf') for a, b in zip($cs, $cg)])")
    echo "| $ph | $(py "f'{$tr:.2f}'") | $(py "'met' if $tr >= 1.2 else '**missed**'") | $(py "f'{st.median($rs)/$LOOP:.3f}'") | $(py "f'{st.median($rg)/$LOOP:.3f}'") | $(py "f'{$cr:.2f}'") | $(py "'met' if $cr <= 0.5 else '**missed**'") | $(py "f'{st.median($cs):.2f}'") | $(py "f'{st.median($cg):.2f}'") |"
done
echo
echo "## Raw"
echo
echo "| rep | server | phase | sluice bench output | server CPU s |"
echo "|---|---|---|---|---|"
printf '%s' "$RAW"
echo
echo "sluice stats at the end:"
echo '```'
"$BIN" stats 127.0.0.1:"$SL_METRICS"
echo '```'
} > "$W/table.md"
cat "$W/table.md"
if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; cp "$W/table.md" "$OUT"; echo "wrote $OUT" >&2; fi
