#!/usr/bin/env bash
# Issue 5 benchmark: write-behind clustering. 16 x 1 MiB UNSTABLE WRITEs in flight, each group
# of 16 sent in a random order (what a client's parallel writeback looks like), then one COMMIT:
#
#   sluice bench --workload write --depth 16 --shuffle --size 1G --block 1M URL
#
# against three servers running side by side in one run, each exporting its own directory on
# the same disk file system:
#   - sluice serve (default: write-behind with clustering)
#   - sluice serve --no-clustering (write-behind, but every WRITE reaches the disk alone)
#   - nfs-ganesha 4.3, VFS FSAL (ganesha's default caching, see tests/peers/ganesha.sh)
# For sluice it reads the size histogram of the writes that reach the backing file system
# (sluice_backend_write_bytes, from the --metrics endpoint). Issue 5's target: median backend
# write >= 4 MiB with clustering (vs 1 MiB without).
#
# Throughput is bytes / (first WRITE .. COMMIT reply), so it includes getting the data to the
# disk. Every rep drops the page cache first and removes the previous file (cold start, same
# state for every server). The order of the servers rotates each rep. Reported: medians over
# reps, and ratios, never bare absolute numbers as a verdict (2 noisy cores).
#
# Before the reps, each server takes one untimed warm-up write of the same size (--warmup N
# changes the count): a server's first run also pays for faulting in its own buffers, which no
# later run does.
#
# --nfs-version 4.1 (or 4.2, 4: the highest 4.x) sends the same WRITEs and COMMIT over an NFSv4
# session, each WRITE one COMPOUND (issue 15); default 3.
#
#   bench/write-cluster.sh [--size 1G] [--reps 3] [--warmup 1] [--nfs-version V] [--out FILE]
#
# Env: BENCH_GANESHA_CACHING=0 runs ganesha with the test config (no attribute caching);
# BENCH_KEEP=1 keeps the work dir; BENCH_SKIP_BUILD=1 skips cargo build.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZE=1G; REPS=3; WARMUP=1; OUT=""; NFSV=3
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --warmup) WARMUP="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --nfs-version) NFSV="$2"; shift ;;
        *) sed -n '2,32p' "$0" >&2; exit 2 ;;
    esac
    shift
done

bench_init write-cluster
bench_nfs_version "$NFSV"
W="$BENCH_WORK"
mkdir -p "$W/clu" "$W/noclu" "$W/gan"

LOOP_BPS=$(iperf3_rate)
start_sluice clu "$W/clu";   CLU_PID=$SL_PID; CLU_PORT=$SL_PORT; CLU_MET=$SL_METRICS
start_sluice noclu "$W/noclu" --no-clustering; NOC_PID=$SL_PID; NOC_PORT=$SL_PORT; NOC_MET=$SL_METRICS
start_ganesha gan "$W/gan"
echo "servers: sluice :$CLU_PORT, sluice --no-clustering :$NOC_PORT, ganesha :$GA_PORT (pid $GA_PID)" >&2

declare -A RATES CPUS
RAW=""
SERVERS=(clu noclu gan)
for rep in $(seq $((1 - WARMUP)) "$REPS"); do
    # rep <= 0: warm-up, not recorded
    # rotate the order so no server always runs first (or right after a given other one)
    n=${#SERVERS[@]}; order=()
    for i in $(seq 0 $((n - 1))); do order+=("${SERVERS[$(( (i + rep - 1 + n * WARMUP) % n ))]}"); done
    echo "rep $rep: ${order[*]}" >&2
    for s in "${order[@]}"; do
        case $s in
            clu)   pid=$CLU_PID; url=$(nfs_url "$W/clu/f.$rep" "$CLU_PORT" "$CLU_PORT" "$NFSV") ;;
            noclu) pid=$NOC_PID; url=$(nfs_url "$W/noclu/f.$rep" "$NOC_PORT" "$NOC_PORT" "$NFSV") ;;
            gan)   pid=$GA_PID;  url=$(nfs_url "$W/gan/f.$rep" "$GA_PORT" "$((GA_PORT + 1))" "$NFSV") ;;
        esac
        # a new name per rep: ganesha's attribute cache would hand out the stale handle of a
        # file removed on the host under the same name
        rm -f "$W/$s"/f.*
        drop_caches
        bench_run r "$pid" "$url" --workload write --depth 16 --shuffle --size "$SIZE" --block 1M --seed "$((rep > 0 ? rep : 1000 - rep))"
        [ "$rep" -le 0 ] && continue
        RATES[$s]+="$r_rate "; CPUS[$s]+="$(py "$r_cpu / ($r_bytes / 2**30)") "
        RAW+="| $rep | $s | $r_line | $r_cpu |"$'\n'
    done
done
LOOP_BPS2=$(iperf3_rate)

read -r CLU_MED CLU_AVG CLU_N CLU_B < <(backend_writes 127.0.0.1:"$CLU_MET")
read -r NOC_MED NOC_AVG NOC_N NOC_B < <(backend_writes 127.0.0.1:"$NOC_MET")
med() { py "st.median([${1// /,}])"; }
list() { py "', '.join(f'{x/1e6:.0f}' for x in [${1// /,}])"; }
for s in "${SERVERS[@]}"; do
    declare "RATE_$s=$(med "${RATES[$s]}")" "CPU_$s=$(med "${CPUS[$s]}")"
done
LOOP=$(py "($LOOP_BPS + $LOOP_BPS2) / 2")
verdict() { if py "int($1)" | grep -q 1; then echo "met"; else echo "**missed**"; fi; }

{
echo "# Write-behind clustering: 16 x 1 MiB UNSTABLE WRITEs in flight, shuffled (issue 5)"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "Load (same client for every server): \`sluice bench --workload write --depth 16 --shuffle --size $SIZE --block 1M\` over NFS version $NFSV, then one COMMIT;"
echo "throughput = bytes / (first WRITE to COMMIT reply). $REPS reps after $WARMUP untimed warm-up rep(s) per server; each rep removes the old file and drops the page cache"
echo "first (**cold**: new file, empty cache), then runs the three servers one after another in a rotating order."
echo "All servers ran side by side in this one run, exporting directories on the same file system."
echo "ganesha: VFS FSAL, caching $( [ "${BENCH_GANESHA_CACHING:-1}" = 1 ] && echo "at ganesha's defaults (GANESHA_CACHING=1)" || echo "off (the test config)")."
echo "Loopback single-stream limit (iperf3, before/after): $(py "f'{$LOOP_BPS/1e6:.0f}'") / $(py "f'{$LOOP_BPS2/1e6:.0f}'") MB/s."
echo
echo "## Backend write sizes (sluice's server statistics, all reps and warm-ups)"
echo
echo "| server | backend writes | median backend write | mean backend write |"
echo "|---|---|---|---|"
echo "| sluice (clustering) | $CLU_N | <= $(mib "$CLU_MED") | $(py "f'{$CLU_AVG/1048576:.2f} MiB'") |"
echo "| sluice --no-clustering | $NOC_N | <= $(mib "$NOC_MED") | $(py "f'{$NOC_AVG/1048576:.2f} MiB'") |"
echo
echo "Median is the upper bound of the power-of-two histogram bucket holding it. Target: >= 4 MiB with clustering: $(verdict "$CLU_MED >= 4 << 20")."
echo "Ratio of medians clustering / no-clustering: $(py "f'{$CLU_MED/$NOC_MED:.1f}'")x."
echo
echo "## Throughput and server CPU (medians over reps)"
echo
echo "| server | per-rep MB/s | / loopback | / sluice no-clustering | / ganesha | server CPU s per GiB |"
echo "|---|---|---|---|---|---|"
for s in "${SERVERS[@]}"; do
    r="RATE_$s"; c="CPU_$s"
    case $s in clu) label="sluice (clustering)";; noclu) label="sluice --no-clustering";; gan) label="nfs-ganesha";; esac
    echo "| $label | $(list "${RATES[$s]}") | $(py "f'{${!r}/$LOOP:.2f}'") | $(py "f'{${!r}/$RATE_noclu:.2f}'") | $(py "f'{${!r}/$RATE_gan:.2f}'") | $(py "f'{${!c}:.2f}'") |"
done
echo
echo "## Raw"
echo
echo "| rep | server | sluice bench output | server CPU s |"
echo "|---|---|---|---|"
printf '%s' "$RAW"
echo
echo "sluice (clustering) stats at the end:"
echo '```'
"$BIN" stats 127.0.0.1:"$CLU_MET"
echo '```'
echo "sluice --no-clustering stats at the end:"
echo '```'
"$BIN" stats 127.0.0.1:"$NOC_MET"
echo '```'
} > "$W/table.md"
cat "$W/table.md"
if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; cp "$W/table.md" "$OUT"; echo "wrote $OUT" >&2; fi
