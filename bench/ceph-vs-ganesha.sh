#!/usr/bin/env bash
# Issue 26 benchmark: sluice serving CephFS against nfs-ganesha's FSAL_CEPH on the same private
# Ceph cluster, with the same client, side by side in one run; and the small-file limit, the
# cluster driven directly through libcephfs by crates/ceph/examples/smallfiles.rs.
#
# One one-node cluster (tests/peers/ceph.sh: one mon, one memstore OSD, one MDS) holds three
# directories: /sluice (`sluice serve ceph:/sluice --ceph-conf ...`), /ganesha (ganesha 4.3,
# FSAL_CEPH, through tests/peers/ganesha.sh `ceph:/ganesha`) and /limit (the direct program).
# Per gateway and rep, in this order (each rep's files have new names; a gateway's big file is
# removed through it after its phases, so the OSD's memory holds one at a time):
#
#   write      sluice bench --workload write --size 1G --block 1M --depth 16, then COMMIT
#   read       --workload read --size 1G --block 1M --depth 16 (the file just written)
#   randread   --workload randread --block 4k --depth 32 --count 50000 (that 1 GiB file)
#   create     sluice cp -r -q --jobs 64 of a local directory of --files 4 KiB files into a new
#              directory of the gateway (CREATE + WRITE + stable, one file per job)
#   ls-l       sluice ls -l of that directory (output checked: --files entries)
#   remove     sluice rm -r of that directory (one REMOVE at a time: how `sluice rm -r` works)
#
# and the limit per rep: `smallfiles --count FILES --jobs 64 --remove-jobs 1` in /limit
# (create + write 4 KiB + fsync + close from 64 threads on one libcephfs mount, readdirplus of
# the directory, unlink one at a time): the same concurrency as the NFS client's per phase.
#
# Reported: throughput and gateway CPU (utime+stime of the gateway process, all threads, its
# libcephfs included, from /proc/PID/stat) per GiB, as ratios sluice / ganesha; small-file
# rates (files per second per phase, and over all three) as sluice / ganesha and sluice /
# limit, with CPU per 1000 files; the Ceph daemons' CPU (mon + OSD + MDS) per GiB and per
# 1000 files for each, which shows what a gateway makes the cluster do. Issue 26's goals:
# >= 1.5x ganesha's throughput, >= 2x its small-file rate, <= 0.5x its CPU per GiB, and a
# small-file rate >= 0.8 of the limit. Medians of per-rep ratios over reps; gateway order
# alternates between reps (the limit runs last in odd reps, first in even ones). The OSD keeps
# its data in memory (memstore) and the gateways' libcephfs caches are smaller than the file,
# so there is no "cold" or "warm" here: every read goes to the OSD, whose memory is the disk.
#
#   bench/ceph-vs-ganesha.sh [--size 1G] [--count 50000] [--files 10000] [--jobs 64]
#                            [--reps 3] [--warmup 1] [--nfs-version 3|4.1|4.2]
#                            [--nconnect N] [--cc NAME] [--out FILE]
#
# Env: BENCH_GANESHA_CACHING=1 runs ganesha with its own attribute and dirent caching (default
# here: off, as Ceph's documentation configures FSAL_CEPH); CEPH_MEMSTORE_BYTES (the OSD's
# capacity; default 3x --size + 1 GiB, used only as written); SLUICE_SERVE_ARGS adds options
# to `sluice serve`; SLUICE_BIN / SMALLFILES_BIN use those binaries; BENCH_KEEP=1,
# BENCH_SKIP_BUILD=1 (skip building sluice and the smallfiles example).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZE=1G; COUNT=50000; FILES=10000; JOBS=64; REPS=3; WARMUP=1; OUT=""; CC=""; NCONNECT=1; NFSV=3
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift ;;
        --count) COUNT="$2"; shift ;;
        --files) FILES="$2"; shift ;;
        --jobs) JOBS="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --warmup) WARMUP="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --cc) CC="$2"; shift ;;
        --nconnect) NCONNECT="$2"; shift ;;
        --nfs-version) NFSV="$2"; shift ;;
        *) sed -n '2,43p' "$0" >&2; exit 2 ;;
    esac
    shift
done

CEPH_SH="$BENCH_ROOT/tests/peers/ceph.sh"
SMALLFILES="${SMALLFILES_BIN:-$BENCH_ROOT/target/release/examples/smallfiles}"
if [ -n "${SLUICE_BIN:-}" ]; then BIN="$SLUICE_BIN"; fi
if [ -n "${SLUICE_BIN:-}${SMALLFILES_BIN:-}" ]; then export BENCH_SKIP_BUILD=1; fi
bench_init ceph-vs-ganesha
bench_nfs_version "$NFSV" "$NCONNECT"
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p sluice-ceph --example smallfiles
fi
[ -x "$SMALLFILES" ] || bench_die "$SMALLFILES missing (cargo build --release -p sluice-ceph --example smallfiles)"
ls /usr/lib/*/ganesha/libfsalceph.so >/dev/null 2>&1 \
    || bench_die "ganesha's FSAL_CEPH is missing (Debian nfs-ganesha-ceph: bash scripts/install-deps.sh)"
W="$BENCH_WORK"
SIZE_BYTES=$(numfmt --from=iec "$SIZE")
# ganesha's caching off unless asked: the configuration Ceph documents for FSAL_CEPH.
export BENCH_GANESHA_CACHING="${BENCH_GANESHA_CACHING:-0}"

# The cluster is stopped after the gateways (their libcephfs clients would otherwise wait for
# it while being stopped), then lib.sh's cleanup does the rest.
CEPH_DIR=""
on_exit() {
    local rc=$? p st i
    set +e
    for st in "${BENCH_GANESHA[@]}"; do "$GANESHA_SH" stop "$st" 2>/dev/null; done
    for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${BENCH_PIDS[@]}"; do
        for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    if [ -n "$CEPH_DIR" ]; then "$CEPH_SH" stop "$CEPH_DIR" 2>/dev/null; fi
    (exit "$rc")
    bench_cleanup
}
trap on_exit EXIT
if [ -n "$CC" ]; then bench_tcp_cc "$CC"; fi

# memstore holds what is written until the MDS has purged removed files (asynchronously): room
# for three big files at once plus metadata and the small files.
export CEPH_MEMSTORE_BYTES="${CEPH_MEMSTORE_BYTES:-$(( 3 * SIZE_BYTES + (1 << 30) ))}"
CEPH_DIR="$W/ceph"
CONF=$("$CEPH_SH" start "$CEPH_DIR") || bench_die "the Ceph cluster did not start"
FS=cephfs
for d in /sluice /ganesha /limit; do
    timeout -k 5 60 "$SMALLFILES" --conf "$CONF" --fs "$FS" --dir "$d" --setup >/dev/null \
        || bench_die "cannot create $d in the Ceph file system"
done

# cluster_ticks: utime+stime of every daemon of the cluster (mon, OSD, MDS), in clock ticks
cluster_ticks() {
    local f p sum=0
    for f in "$CEPH_DIR"/run/*.pid; do
        p=$(cat "$f" 2>/dev/null) || continue
        [ -n "$p" ] && [ -r "/proc/$p/stat" ] || continue
        sum=$(( sum + $(cpu_ticks "$p") ))
    done
    echo "$sum"
}

LOOP_BPS=$(iperf3_rate)
# shellcheck disable=SC2086
start_sluice sl "ceph:/sluice" --ceph-conf "$CONF" --ceph-fs "$FS" ${SLUICE_SERVE_ARGS:-}
export GANESHA_CEPH_CONF="$CONF" GANESHA_CEPH_FS="$FS"   # read by tests/peers/ganesha.sh
start_ganesha gan "ceph:/ganesha"
echo "cluster: $CONF; gateways: sluice :$SL_PORT (pid $SL_PID), ganesha :$GA_PORT (pid $GA_PID)" >&2

# The small-file source: FILES files of 4 KiB of pseudo-random bytes in one local directory.
python3 - "$W/src" "$FILES" <<'PY'
import os, random, sys
root, files = sys.argv[1], int(sys.argv[2])
rnd = random.Random(26)
os.makedirs(root)
for i in range(files):
    with open(os.path.join(root, f"f{i:07d}"), "wb") as f:
        f.write(rnd.randbytes(4096))
PY

gw_pid() { if [ "$1" = sl ]; then echo "$SL_PID"; else echo "$GA_PID"; fi; }
gw_url() {   # sl|gan NAME: the URL of NAME in the gateway's directory
    if [ "$1" = sl ]; then nfs_url "/sluice/$2" "$SL_PORT" "$SL_PORT" "$NFSV"
    else nfs_url "/ganesha/$2" "$GA_PORT" "$((GA_PORT + 1))" "$NFSV"; fi
}

# client_run VAR PID CMD...: runs one client command (bounded by BENCH_TIMEOUT, default 600 s)
# with its output in $W/client.out; sets VAR_secs (wall clock of the whole command), VAR_cpu
# (CPU seconds of gateway PID) and VAR_ccpu (the cluster's CPU seconds).
client_run() {
    local var="$1" pid="$2"; shift 2
    local c0 k0 t0 t1 rc=0
    c0=$(cpu_ticks "$pid"); k0=$(cluster_ticks); t0=$(date +%s.%N)
    timeout -k 5 "${BENCH_TIMEOUT:-600}" "$@" > "$W/client.out" 2> "$W/client.err" || rc=$?
    t1=$(date +%s.%N)
    alive "$pid" || bench_die "the gateway (pid $pid) died during: $*"
    [ "$rc" = 0 ] || bench_die "$* failed ($rc): $(tail -3 "$W/client.err")"
    printf -v "${var}_secs" '%s' "$(py "$t1 - $t0")"
    printf -v "${var}_cpu" '%s' "$(py "($(cpu_ticks "$pid") - $c0) / $CLK_TCK")"
    printf -v "${var}_ccpu" '%s' "$(py "($(cluster_ticks) - $k0) / $CLK_TCK")"
}

BIG=(write read randread)
SMALL=(create ls-l remove all)
declare -A RATE CPU CCPU
RAW=""
add() {   # KEY RATE CPU CLUSTER_CPU: one rep's values of a phase
    RATE[$1]+="$2 "; CPU[$1]+="$3 "; CCPU[$1]+="$4 "
}

one_gateway() {   # sl|gan REP
    local s=$1 rep=$2 pid url ph k0 gib secs cpu ccpu
    pid=$(gw_pid "$s"); url=$(gw_url "$s" "f.$rep")
    for ph in "${BIG[@]}"; do
        k0=$(cluster_ticks)
        case $ph in
            write) bench_run r "$pid" "$url" --workload write --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT" ;;
            read) bench_run r "$pid" "$url" --workload read --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT" ;;
            randread) bench_run r "$pid" "$url" --workload randread --block 4k --depth 32 --count "$COUNT" --seed "$rep" --nconnect "$NCONNECT" ;;
        esac
        ccpu=$(py "($(cluster_ticks) - $k0) / $CLK_TCK")
        gib=$(py "$r_bytes / 2**30")
        add "$s.$ph" "$r_rate" "$(py "$r_cpu / $gib")" "$(py "$ccpu / $gib")"
        RAW+="| $rep | $s | $ph | $r_line | $r_cpu | $ccpu |"$'\n'
    done
    client_run rm_ "$pid" "$BIN" rm "$url"

    url=$(gw_url "$s" "sf.$rep")
    client_run c "$pid" "$BIN" cp -r -q --jobs "$JOBS" "$W/src" "$url"
    client_run l "$pid" "$BIN" ls -l "$url"
    local listed
    listed=$(grep -cE ' f[0-9]{7}$' "$W/client.out" || true)
    [ "$listed" = "$FILES" ] || bench_die "$s: ls -l listed $listed of $FILES files"
    client_run d "$pid" "$BIN" rm -r "$url"
    small_row "$s" "$rep" "sluice cp -r -q --jobs $JOBS" "sluice ls -l" "sluice rm -r" \
        "$c_secs" "$c_cpu" "$c_ccpu" "$l_secs" "$l_cpu" "$l_ccpu" "$d_secs" "$d_cpu" "$d_ccpu"
}

# small_row WHO REP CMD_CREATE CMD_LS CMD_RM then secs, CPU, cluster CPU of create, ls-l,
# remove: records the rates (files/s) and CPU per 1000 files of each phase and of all three
small_row() {
    local s=$1 rep=$2 cmds=("$3" "$4" "$5") i=0 ph secs cpu ccpu
    shift 5
    local args=("$@") ts=0 tc=0 tk=0
    for ph in create ls-l remove; do
        secs=${args[$((3 * i))]}; cpu=${args[$((3 * i + 1))]}; ccpu=${args[$((3 * i + 2))]}
        add "$s.$ph" "$(py "$FILES / $secs")" "$(py "$cpu * 1000 / $FILES")" "$(py "$ccpu * 1000 / $FILES")"
        RAW+="| $rep | $s | $ph | \`${cmds[$i]}\`: $FILES files in $(py "f'{$secs:.3f}'") s | $cpu | $ccpu |"$'\n'
        ts=$(py "$ts + $secs"); tc=$(py "$tc + $cpu"); tk=$(py "$tk + $ccpu")
        i=$((i + 1))
    done
    add "$s.all" "$(py "$FILES / $ts")" "$(py "$tc * 1000 / $FILES")" "$(py "$tk * 1000 / $FILES")"
}

one_limit() {   # REP
    local rep=$1 k0 out ccpu
    k0=$(cluster_ticks)
    out=$(timeout -k 5 "${BENCH_TIMEOUT:-600}" "$SMALLFILES" --conf "$CONF" --fs "$FS" \
        --dir "/limit/sf.$rep" --count "$FILES" --jobs "$JOBS" --remove-jobs 1) \
        || bench_die "smallfiles failed"
    ccpu=$(py "($(cluster_ticks) - $k0) / $CLK_TCK")
    echo "  limit: $out (cluster cpu $ccpu s)" >&2
    RAW+="| $rep | limit | all | $out | (its own: in the line) | $ccpu |"$'\n'
    # the cluster's CPU of the whole run, split over the phases by their share of the time
    local tsum
    tsum=$(py "$(kv create_secs "$out") + $(kv list_secs "$out") + $(kv remove_secs "$out")")
    small_row_limit "$out" "$ccpu" "$tsum"
}
small_row_limit() {   # OUT CLUSTER_CPU TOTAL_SECS
    local out=$1 ccpu=$2 tsum=$3 ph key secs
    for ph in create ls-l remove; do
        case $ph in create) key=create ;; ls-l) key=list ;; remove) key=remove ;; esac
        secs=$(kv "${key}_secs" "$out")
        add "lim.$ph" "$(kv "${key}_files_s" "$out")" "$(py "$(kv "${key}_cpu_s" "$out") * 1000 / $FILES")" \
            "$(py "$ccpu * $secs / $tsum * 1000 / $FILES")"
    done
    add "lim.all" "$(py "$FILES / $tsum")" \
        "$(py "($(kv create_cpu_s "$out") + $(kv list_cpu_s "$out") + $(kv remove_cpu_s "$out")) * 1000 / $FILES")" \
        "$(py "$ccpu * 1000 / $FILES")"
}

for w in $(seq 1 "$WARMUP"); do
    echo "warm-up $w" >&2
    for s in sl gan; do
        url=$(gw_url "$s" "f.warm$w")
        bench_run r "$(gw_pid "$s")" "$url" --workload write --size "$SIZE" --block 1M --depth 16 --nconnect "$NCONNECT"
        client_run rm_ "$(gw_pid "$s")" "$BIN" rm "$url"
    done
done
for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then order="sl gan lim"; else order="lim gan sl"; fi
    echo "rep $rep: $order" >&2
    for s in $order; do
        if [ "$s" = lim ]; then one_limit "$rep"; else one_gateway "$s" "$rep"; fi
    done
done
LOOP_BPS2=$(iperf3_rate)
LOOP=$(py "($LOOP_BPS + $LOOP_BPS2) / 2")

arr() { echo "[${1// /,}]"; }
med() { py "f'{st.median($(arr "$1")):$2}'"; }   # "V V V" FORMAT: the median, formatted
ratio() {   # "A A A" "B B B": the median of the per-rep ratios A/B (inf: B was 0; nan: both)
    py "st.median([a/b if b else float('inf' if a else 'nan') for a, b in zip($(arr "$1"), $(arr "$2"))])"
}
fmt2() { py "f'{float(\"$1\"):.2f}'"; }   # a ratio with two decimals
verdict() {   # RATIO OP LIMIT: met, **missed**, or n/a when the ratio is undefined (nothing measured)
    py "'n/a' if float('$1') != float('$1') else 'met' if float('$1') $2 $3 else '**missed**'"
}
ceph_version=$(ceph --version 2>/dev/null | awk '{print $3}')
{
echo "# sluice over CephFS vs nfs-ganesha FSAL_CEPH: sequential 1 MiB write/read, 4 KiB random reads, small files (issue 26$( [ "$NFSV" = 3 ] || echo ", over NFSv$NFSV"))"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "Cluster: one private one-node Ceph $ceph_version cluster (tests/peers/ceph.sh: one mon, one OSD on memstore with $(mib "$CEPH_MEMSTORE_BYTES"), one MDS, no auth, pools of size 1) shared by both gateways and the limit, each in its own directory of the one file system; the OSD keeps its data in memory, so no phase reads or writes a disk."
echo "Client for both gateways: \`sluice bench\` over NFS version $NFSV, $NCONNECT TCP connection(s) (\`--nconnect $NCONNECT\`): $SIZE written in 1 MiB calls, 16 in flight (then COMMIT), read back the same way, then $COUNT x 4 KiB READs at random aligned offsets of it, 32 in flight; then small files through the \`sluice\` client commands: \`cp -r -q --jobs $JOBS\` of a local directory of $FILES files of 4 KiB into a new directory (create), \`ls -l\` of it, \`rm -r\` of it (one REMOVE at a time); each command timed whole (start-up and mount included)."
echo "Limit: \`crates/ceph/examples/smallfiles.rs\` on its own libcephfs mount: create + write 4 KiB + fsync + close from $JOBS threads, readdirplus of the directory, unlink from 1 thread (the client's concurrency per phase)."
echo "$REPS reps after $WARMUP untimed warm-up write(s) per gateway, gateway order alternating; medians over reps of the per-rep ratios."
echo "sluice: \`sluice serve ceph:/sluice --ceph-conf CONF --ceph-fs $FS --no-root-squash ${SLUICE_SERVE_ARGS:-}\`."
echo "ganesha 4.3: FSAL_CEPH, caching $( [ "$BENCH_GANESHA_CACHING" = 1 ] && echo "at ganesha's defaults (BENCH_GANESHA_CACHING=1)" || echo "off (\`MDCACHE { Dir_Chunk = 0; }\`, \`Attr_Expiration_Time = 0\`: the configuration Ceph's documentation gives for FSAL_CEPH)")."
echo "Loopback single-stream limit (iperf3 -J, before/after): $(py "f'{$LOOP_BPS/1e6:.0f}'") / $(py "f'{$LOOP_BPS2/1e6:.0f}'") MB/s."
echo "Gateway CPU: utime+stime of the gateway process (its libcephfs threads included) per GiB moved (randread: per GiB of 4 KiB payload) or per 1000 files; cluster CPU: the same of the mon, OSD and MDS together."
echo
echo "| phase | sluice / ganesha throughput | target >= 1.5 | sluice / loopback | ganesha / loopback | sluice / ganesha CPU per GiB | target <= 0.5 | sluice CPU s/GiB | ganesha CPU s/GiB | cluster CPU s/GiB: sluice / ganesha |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for ph in "${BIG[@]}"; do
    tr=$(ratio "${RATE[sl.$ph]}" "${RATE[gan.$ph]}"); cr=$(ratio "${CPU[sl.$ph]}" "${CPU[gan.$ph]}")
    echo "| $ph | $(fmt2 "$tr") | $(verdict "$tr" '>=' 1.5) | $(py "f'{st.median($(arr "${RATE[sl.$ph]}"))/$LOOP:.3f}'") | $(py "f'{st.median($(arr "${RATE[gan.$ph]}"))/$LOOP:.3f}'") | $(fmt2 "$cr") | $(verdict "$cr" '<=' 0.5) | $(med "${CPU[sl.$ph]}" .2f) | $(med "${CPU[gan.$ph]}" .2f) | $(med "${CCPU[sl.$ph]}" .2f) / $(med "${CCPU[gan.$ph]}" .2f) |"
done
echo
echo "Small files ($FILES x 4 KiB; \`all\`: $FILES over the three phases' summed time):"
echo
echo "| phase | sluice / ganesha rate | target >= 2 | sluice / limit | target >= 0.8 | files/s: sluice / ganesha / limit | sluice / ganesha CPU per file | CPU s per 1000 files: sluice / ganesha / limit | cluster CPU s per 1000 files: sluice / ganesha / limit |"
echo "|---|---|---|---|---|---|---|---|---|"
for ph in "${SMALL[@]}"; do
    tr=$(ratio "${RATE[sl.$ph]}" "${RATE[gan.$ph]}"); lr=$(ratio "${RATE[sl.$ph]}" "${RATE[lim.$ph]}")
    cr=$(ratio "${CPU[sl.$ph]}" "${CPU[gan.$ph]}")
    echo "| $ph | $(fmt2 "$tr") | $(verdict "$tr" '>=' 2) | $(fmt2 "$lr") | $(verdict "$lr" '>=' 0.8) | $(med "${RATE[sl.$ph]}" .0f) / $(med "${RATE[gan.$ph]}" .0f) / $(med "${RATE[lim.$ph]}" .0f) | $(fmt2 "$cr") | $(med "${CPU[sl.$ph]}" .3f) / $(med "${CPU[gan.$ph]}" .3f) / $(med "${CPU[lim.$ph]}" .3f) | $(med "${CCPU[sl.$ph]}" .3f) / $(med "${CCPU[gan.$ph]}" .3f) / $(med "${CCPU[lim.$ph]}" .3f) |"
done
echo
echo "The limit's cluster CPU per phase is its whole run's split by the phases' share of the time (the program is one process)."
echo
echo "## Raw"
echo
echo "| rep | who | phase | output | gateway CPU s | cluster CPU s |"
echo "|---|---|---|---|---|---|"
printf '%s' "$RAW"
echo
echo "sluice stats at the end:"
echo '```'
"$BIN" stats 127.0.0.1:"$SL_METRICS"
echo '```'
} > "$W/table.md"
cat "$W/table.md"
if [ -n "$OUT" ]; then mkdir -p "$(dirname "$OUT")"; cp "$W/table.md" "$OUT"; echo "wrote $OUT" >&2; fi
