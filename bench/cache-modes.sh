#!/usr/bin/env bash
# Issue 5 benchmark: the server's cache modes (`sluice serve --io buffered|dontcache|direct`) on
# a file 3x larger than the server's memory limit. For each mode, in one run:
#
#   - a fresh cgroup v1 memory cgroup (/sys/fs/cgroup/memory/sluice-bench-MODE-PID) with
#     memory.limit_in_bytes = --limit (default 256M); `sluice serve --io MODE` starts inside it,
#     so its page cache (and its own memory: write-behind buffers, READ chunks) is charged there;
#   - write: page cache dropped, then
#       sluice bench --workload write --size 3xLIMIT --block 1M --depth 16  (then COMMIT)
#   - read: page cache dropped (cold), then
#       sluice bench --workload read --size 3xLIMIT --block 1M --depth 16
#   - during each phase `cache` and `rss` of the cgroup's memory.stat are sampled every 0.1 s
#     (max) and once right after the phase ends, with memory.max_usage_in_bytes (reset before
#     each phase) and memory.failcnt.
# Reported: throughput per mode and its ratio to buffered, cache sizes as ratios to the limit and
# to buffered's. The client (`sluice bench`) is not in the cgroup. Server order is buffered,
# dontcache, direct; --reps N repeats the whole sequence (medians reported).
#
#   bench/cache-modes.sh [--limit 256M] [--reps 1] [--modes buffered,dontcache,direct]
#                        [--nfs-version 3|4|4.1|4.2] [--out FILE]
#   (ratios "/ buffered" need buffered among --modes; --nfs-version 4.1 sends the same load over
#   an NFSv4 session, issue 15; default 3)
#
# If a server dies (OOM kill in the cgroup), its row says so, the file is written on the host for
# the read phase, and the run goes on. Env: SLUICE_SERVE_ARGS adds options to `sluice serve`
# (e.g. --no-write-behind); BENCH_KEEP=1, BENCH_SKIP_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

LIMIT=256M; REPS=1; OUT=""; MODES=(buffered dontcache direct); NFSV=3
while [ $# -gt 0 ]; do
    case "$1" in
        --limit) LIMIT="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --modes) IFS=, read -r -a MODES <<< "$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --nfs-version) NFSV="$2"; shift ;;
        *) sed -n '2,26p' "$0" >&2; exit 2 ;;
    esac
    shift
done

CG_ROOT=/sys/fs/cgroup/memory
[ -w "$CG_ROOT/cgroup.procs" ] || { echo "cache-modes: needs the cgroup v1 memory controller at $CG_ROOT" >&2; exit 1; }
LIMIT_B=$(python3 -c "import sys; v=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(v[:-1])*m[v[-1]] if v[-1] in m else int(v))" "$LIMIT")
FILE_B=$((3 * LIMIT_B))

bench_init cache-modes
bench_nfs_version "$NFSV"
W="$BENCH_WORK"
LOOP_BPS=$(iperf3_rate)

declare -A V   # V[mode.phase.key] = space-separated values over reps
declare -A DIED   # DIED[mode.phase] = why there is no throughput
RAW=""

# sampler CG FILE: appends "cache rss" every 0.1 s until killed
sampler() {
    while :; do
        awk '$1 == "cache" {c = $2} $1 == "rss" {r = $2} END {print c, r}' "$1/memory.stat" >> "$2"
        sleep 0.1
    done
}
stat_of() { awk -v k="$2" '$1 == k {print $2}' "$1/memory.stat"; }

for rep in $(seq 1 "$REPS"); do
    for mode in "${MODES[@]}"; do
        cg="$CG_ROOT/sluice-bench-$mode-$$"
        mkdir "$cg"
        BENCH_CGROUPS+=("$cg")
        echo "$LIMIT_B" > "$cg/memory.limit_in_bytes"
        mkdir -p "$W/$mode"
        drop_caches
        # shellcheck disable=SC2086
        start_sluice_in_cgroup "$cg" "$mode" "$W/$mode" --io "$mode" ${SLUICE_SERVE_ARGS:-}
        url=$(nfs_url "$W/$mode/f" "$SL_PORT" "$SL_PORT" "$NFSV")
        for phase in write read; do
            if ! alive "$SL_PID"; then
                # the write killed the server: write the file on the host (outside the cgroup)
                # so the read phase still measures this mode, and restart the server
                dd if=/dev/zero of="$W/$mode/f" bs=1M count=$((FILE_B >> 20)) conv=fsync status=none
                RAW+="| $rep | $mode | read | file written on the host with dd after the server died; server restarted | | | | | | |"$'\n'
                # shellcheck disable=SC2086
                start_sluice_in_cgroup "$cg" "$mode" "$W/$mode" --io "$mode" ${SLUICE_SERVE_ARGS:-}
                url=$(nfs_url "$W/$mode/f" "$SL_PORT" "$SL_PORT" "$NFSV")
            fi
            drop_caches
            echo 0 > "$cg/memory.max_usage_in_bytes"
            oom0=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
            : > "$W/samples"
            sampler "$cg" "$W/samples" &
            spid=$!
            BENCH_PIDS+=("$spid")
            rc=0
            BENCH_SERVER_DEATH_OK=1 bench_run r "$SL_PID" "$url" --workload "$phase" --size "$FILE_B" --block 1M --depth 16 || rc=$?
            [ "$rc" = 0 ] || [ "$rc" = 3 ] || bench_die "bench_run failed ($rc)"
            end_cache=$(stat_of "$cg" cache); end_rss=$(stat_of "$cg" rss)
            stop_sluice "$spid"
            max_cache=$(awk 'BEGIN {m = 0} $1 > m {m = $1} END {print m}' "$W/samples")
            max_rss=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$W/samples")
            max_usage=$(cat "$cg/memory.max_usage_in_bytes")
            ooms=$(( $(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control") - oom0 ))
            if [ "$rc" = 3 ]; then
                DIED[$mode.$phase]="${DIED[$mode.$phase]:-}rep $rep: server OOM-killed ($ooms kill(s) in the cgroup); "
                r_rate=0; r_cpu=0; r_line="SERVER DIED: $(dmesg 2>/dev/null | grep 'Killed process' | tail -1 | sed 's/^\[[^]]*\] //')"
            fi
            for kv_ in "rate=$r_rate" "cpu=$r_cpu" "end_cache=$end_cache" "max_cache=$max_cache" \
                       "max_rss=$max_rss" "max_usage=$max_usage"; do
                V[$mode.$phase.${kv_%%=*}]+="${kv_#*=} "
            done
            RAW+="| $rep | $mode | $phase | $r_line | $r_cpu | $end_cache | $max_cache | $max_rss | $max_usage | $(cat "$cg/memory.failcnt") |"$'\n'
        done
        fallback=$(grep -iE "buffered from now|falling back|refused|warn" "$W/$mode.log" | head -3 || true)
        [ -n "$fallback" ] && RAW+="| $rep | $mode | server log | ${fallback//$'\n'/ / } | | | | | | |"$'\n'
        stop_sluice "$SL_PID"
        rm -f "$W/$mode/f"
        rmdir "$cg"
    done
done

m() { py "st.median([${V[$1]// /,}])"; }
MiB() { py "f'{$1/1048576:.0f}'"; }
{
echo "# Server cache modes on a file 3x the server's memory limit (issue 5)"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "The server runs in a cgroup v1 memory cgroup limited to $(MiB "$LIMIT_B") MiB (memory.limit_in_bytes; its own"
echo "memory and the page cache it brings in are charged there). File: $(MiB "$FILE_B") MiB. Client: \`sluice bench\` over NFS version $NFSV, outside the"
echo "cgroup, 1 MiB calls, 16 in flight; write = new file + COMMIT (**cold**: page cache dropped first); read = sequential"
echo "(**cold**: page cache dropped first). One fresh cgroup and server per mode, modes run one after another"
echo "in this one run ($REPS rep(s); medians). cache/rss: memory.stat of the cgroup, sampled every 0.1 s (max) and right"
echo "after the phase (end). Server: \`sluice serve --no-root-squash --io MODE ${SLUICE_SERVE_ARGS:-}\`. Loopback single-stream limit (iperf3): $(py "f'{$LOOP_BPS/1e6:.0f}'") MB/s."
echo
echo "| mode | phase | throughput / buffered | throughput / loopback | cache at end (MiB) | max cache (MiB) | max cache / limit | max cache / buffered's | max rss (MiB) | max usage (MiB) | server CPU s/GiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for phase in write read; do
    for mode in "${MODES[@]}"; do
        k="$mode.$phase"; b="buffered.$phase"
        if [ -n "${DIED[$k]:-}" ]; then tput="**${DIED[$k]% }** (medians over all reps, 0 for a dead one)"; tloop="-"; else
            tput=$(py "f'{$(m "$k.rate")/max(1, $(m "$b.rate")):.2f}'"); tloop=$(py "f'{$(m "$k.rate")/$LOOP_BPS:.3f}'"); fi
        echo "| $mode | $phase | $tput | $tloop | $(MiB "$(m "$k.end_cache")") | $(MiB "$(m "$k.max_cache")") | $(py "f'{$(m "$k.max_cache")/$LIMIT_B:.2f}'") | $(py "f'{$(m "$k.max_cache")/max(1,$(m "$b.max_cache")):.2f}'") | $(MiB "$(m "$k.max_rss")") | $(MiB "$(m "$k.max_usage")") | $(py "f'{$(m "$k.cpu")/($FILE_B/2**30):.2f}'") |"
    done
done
echo
echo "## Raw"
echo
echo "| rep | mode | phase | sluice bench output | server CPU s | cache end (B) | cache max (B) | rss max (B) | max_usage (B) | failcnt |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s' "$RAW"
} > "$W/table.md"
cat "$W/table.md"
if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; cp "$W/table.md" "$OUT"; echo "wrote $OUT" >&2; fi
