# Shared helpers for the server benchmarks (bench/write-cluster.sh, server-vs-ganesha.sh,
# cache-modes.sh). Sourced, not run. Everything stays on 127.0.0.1.
#
# The caller sets `set -euo pipefail`, then `source bench/lib.sh`, then `bench_init NAME`:
# that builds the release binary, makes a work dir under /tmp (on the same disk file system for
# every server, never tmpfs) and installs an EXIT trap that stops every server, ganesha instance,
# iperf3 and cgroup this file started, even when the benchmark fails half-way.
# SLUICE_BIN=PATH runs that sluice binary instead (no build): an A/B of two binaries runs the
# same script with each in turn.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${SLUICE_BIN:-$BENCH_ROOT/target/release/sluice}"
GANESHA_SH="$BENCH_ROOT/tests/peers/ganesha.sh"
CLK_TCK=$(getconf CLK_TCK)
BENCH_PIDS=()         # sluice servers and helpers we started (killed by pid)
BENCH_GANESHA=()      # ganesha state dirs we started
BENCH_CGROUPS=()      # cgroup v1 memory cgroups we created
BENCH_WORK=""
BENCH_CC_ORIG=""      # the host's TCP congestion control, when bench_tcp_cc changed it

bench_die() { echo "$BENCH_NAME: ERROR: $*" >&2; exit 1; }

bench_init() {   # NAME
    BENCH_NAME="$1"
    [ "$(id -u)" = 0 ] || bench_die "run as root (drop_caches, cgroups, ganesha)"
    cd "$BENCH_ROOT"
    if [ "${BENCH_SKIP_BUILD:-0}" != 1 ] && [ -z "${SLUICE_BIN:-}" ]; then
        cargo build --release -q -p sluice
    fi
    [ -x "$BIN" ] || bench_die "$BIN missing"
    for t in iperf3 python3 ganesha.nfsd nfs-ls ss; do
        command -v "$t" >/dev/null || bench_die "$t not found (bash scripts/install-deps.sh)"
    done
    BENCH_WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/sluice-$BENCH_NAME.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local rc=$? p st cg i
    set +e
    for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${BENCH_PIDS[@]}"; do
        for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    for st in "${BENCH_GANESHA[@]}"; do "$GANESHA_SH" stop "$st" 2>/dev/null; done
    if [ -n "$BENCH_CC_ORIG" ]; then sysctl -q -w net.ipv4.tcp_congestion_control="$BENCH_CC_ORIG"; fi
    for cg in "${BENCH_CGROUPS[@]}"; do
        # move anything left back to the root cgroup, then remove ours
        if [ -d "$cg" ]; then
            while read -r p; do echo "$p" > /sys/fs/cgroup/memory/cgroup.procs 2>/dev/null; done < "$cg/cgroup.procs"
            rmdir "$cg" 2>/dev/null
        fi
    done
    if [ -n "$BENCH_WORK" ] && [ "${BENCH_KEEP:-0}" != 1 ]; then rm -rf "$BENCH_WORK"; fi
    exit "$rc"
}

# bench_tcp_cc NAME: the host's TCP congestion control for this run (restored on exit), set
# before any server starts (a listening socket hands its algorithm to the connections it
# accepts). Both servers and the client run under the same one. Why it matters here: with BBR
# and no fq qdisc (this host: bbr, lo on noqueue), TCP paces in the kernel with one hrtimer per
# 64 KiB TSO segment; in this VM each costs a timer reprogramming exit, which the sending
# process pays (a warm 1 GiB sequential read: sluice 0.35-0.47 s of CPU with bbr, 0.07 s
# with cubic; ganesha 0.48-0.51 s and 0.35 s). That cost is the same for any server and hides
# what the servers themselves spend.
bench_tcp_cc() {
    local cur
    cur=$(sysctl -n net.ipv4.tcp_congestion_control)
    [ "$1" = "$cur" ] && return 0
    grep -qw "$1" /proc/sys/net/ipv4/tcp_available_congestion_control \
        || modprobe "tcp_$1" 2>/dev/null \
        || bench_die "TCP congestion control $1 is not available (have: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control))"
    [ -n "$BENCH_CC_ORIG" ] || BENCH_CC_ORIG="$cur"
    sysctl -q -w net.ipv4.tcp_congestion_control="$1"
}

free_port() {   # a free TCP port on 127.0.0.1 (and, for ganesha, port+1 free too)
    python3 - <<'EOF'
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1))
    except OSError:
        a.close(); continue
    a.close(); b.close(); print(p); break
EOF
}

wait_port() {   # PORT: bounded wait (10 s) for a listener
    local i
    for i in $(seq 1 200); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.05
    done
    bench_die "port $1 never opened"
}

wait_listen() {   # PORT: bounded wait (10 s) until something listens, without connecting
    local i
    for i in $(seq 1 200); do
        [ -n "$(ss -Htln "( sport = :$1 )" 2>/dev/null)" ] && return 0
        sleep 0.05
    done
    bench_die "nothing listens on port $1"
}

# start_sluice NAME DIR [serve options...]: starts a sluice server exporting DIR; sets
# SL_PORT, SL_METRICS, SL_PID. Its stderr goes to $BENCH_WORK/NAME.log.
start_sluice() {
    local name="$1" dir="$2"; shift 2
    SL_PORT=$(free_port); SL_METRICS=$(free_port)
    mkdir -p "$BENCH_WORK/$name.state"
    "$BIN" serve "$dir" --listen 127.0.0.1:"$SL_PORT" --state-dir "$BENCH_WORK/$name.state" \
        --no-root-squash --metrics 127.0.0.1:"$SL_METRICS" "$@" \
        >"$BENCH_WORK/$name.log" 2>&1 &
    SL_PID=$!
    BENCH_PIDS+=("$SL_PID")
    wait_port "$SL_PORT"
    wait_port "$SL_METRICS"
}

# run a command as a child of a process already in cgroup CG: start_sluice_in_cgroup CG NAME DIR
# [opts]. The server starts in the cgroup (a wrapper shell enters it, then execs), so even its
# first allocations are charged there.
start_sluice_in_cgroup() {
    local cg="$1" name="$2" dir="$3"; shift 3
    SL_PORT=$(free_port); SL_METRICS=$(free_port)
    mkdir -p "$BENCH_WORK/$name.state"
    bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" \
        "$BIN" serve "$dir" --listen 127.0.0.1:"$SL_PORT" --state-dir "$BENCH_WORK/$name.state" \
        --no-root-squash --metrics 127.0.0.1:"$SL_METRICS" "$@" \
        >"$BENCH_WORK/$name.log" 2>&1 &
    SL_PID=$!
    BENCH_PIDS+=("$SL_PID")
    wait_port "$SL_PORT"
    wait_port "$SL_METRICS"
}

stop_sluice() {   # PID: stop a server started above and forget its pid
    local i p keep=()
    kill "$1" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for p in "${BENCH_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
}

# start_ganesha NAME DIR: nfs-ganesha (VFS FSAL) exporting DIR; sets GA_PORT (MOUNT is
# GA_PORT+1) and GA_PID (host pid of ganesha.nfsd, for CPU accounting). Uses ganesha's own
# caching defaults (GANESHA_CACHING=1) unless BENCH_GANESHA_CACHING=0: the test default turns
# attribute caching off, which costs ganesha work per call that sluice does not do.
start_ganesha() {
    local name="$1" dir="$2" st p
    st="$BENCH_WORK/$name.ganesha"
    mkdir -p "$st"
    GA_PORT=$(free_port)
    BENCH_GANESHA+=("$st")
    GANESHA_CACHING="${BENCH_GANESHA_CACHING:-1}" "$GANESHA_SH" start "$dir" "$GA_PORT" "$st" \
        || bench_die "ganesha did not start"
    st="$(cd "$st" && pwd -P)"
    GA_PID=""
    # ganesha.pid holds the pid inside ganesha's pid namespace: find the host pid by its
    # command line (its config path is unique to this state dir).
    for p in /proc/[0-9]*; do
        [ "$(cat "$p/comm" 2>/dev/null)" = ganesha.nfsd ] || continue
        if tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qF "$st/ganesha.conf"; then
            GA_PID="${p#/proc/}"; break
        fi
    done
    [ -n "$GA_PID" ] || bench_die "no ganesha.nfsd process for $st"
}

cpu_ticks() {   # PID: utime+stime of the whole process (all threads), in clock ticks
    local line
    read -r line < "/proc/$1/stat"
    line="${line##*) }"           # fields from 3 on; comm may contain spaces
    set -- $line
    echo $(( ${12} + ${13} ))     # fields 14 and 15
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# iperf3_rate: bytes/s of one TCP stream over loopback (3 s), the limit every rate is compared to.
# Its congestion control is the one sluice's own loopback connections run (crates/tcp: a host
# default of BBR becomes cubic within the host), so the limit is measured on the same path.
iperf3_rate() {
    local port pid out cc
    cc=$(sysctl -n net.ipv4.tcp_congestion_control)
    case "$cc" in bbr*) cc=cubic ;; esac
    port=$(free_port)
    iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
    pid=$!
    BENCH_PIDS+=("$pid")
    wait_listen "$port"   # not wait_port: a probe connection would be the one client `-1` serves
    out=$(timeout 30 iperf3 -c 127.0.0.1 -p "$port" -t 3 -C "$cc" -J) || bench_die "iperf3 failed: $out"
    echo "$out" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8))' \
        || bench_die "iperf3 output without a rate"
    wait "$pid" 2>/dev/null || true
}

# disk_read_rate FILE SIZE: bytes/s of the disk under FILE read sequentially with the page cache
# out of the way: FILE (SIZE, e.g. 1G; written once with random data) is read by 4 parallel
# `dd iflag=direct bs=1M` readers, a quarter each, after the page cache is dropped. The limit a
# cold sequential read through any server is compared to.
disk_read_rate() {
    local f="$1" size="$2" mib q t0 t1 pids=()
    mib=$(numfmt --from=iec "$size" | awk '{printf "%d", $1 / 1048576}')
    [ "$mib" -ge 4 ] || bench_die "disk_read_rate: size $size is below 4 MiB"
    if [ "$(stat -c %s "$f" 2>/dev/null || echo 0)" != "$((mib * 1048576))" ]; then
        dd if=/dev/urandom of="$f" bs=1M count="$mib" status=none conv=fsync
    fi
    drop_caches
    t0=$(date +%s.%N)
    for q in 0 1 2 3; do
        dd if="$f" of=/dev/null bs=1M iflag=direct skip=$((q * mib / 4)) count=$((mib / 4)) status=none &
        pids+=("$!")
    done
    for q in "${pids[@]}"; do wait "$q" || bench_die "disk_read_rate: dd failed on $f"; done
    t1=$(date +%s.%N)
    py "int($((mib / 4 * 4)) * 1048576 / ($t1 - $t0))"
}

# nfs URL for FILE (an absolute path inside an export) on a server at NFS port P, MOUNT port M,
# over NFS version V (default 3). Over 4.x the path is the same: sluice's pseudo root lists
# exports by their absolute path, and tests/peers/ganesha.sh sets Pseudo = the export's path;
# v4 needs no MOUNT port. `4` means the highest 4.x for the sluice client, 4.0 for libnfs.
nfs_url() {
    case "${4:-3}" in
        3) echo "nfs://127.0.0.1$1?version=3&nfsport=$2&mountport=$3" ;;
        *) echo "nfs://127.0.0.1$1?version=$4&nfsport=$2" ;;
    esac
}

# bench_nfs_version V: dies unless V is an NFS version `sluice bench` speaks (3, 4, 4.1, 4.2).
# Over 4.x, --nconnect N is session trunking (N connections bound to one session).
bench_nfs_version() {
    case "$1" in
        3|4|4.1|4.2) ;;
        *) bench_die "--nfs-version must be 3, 4, 4.1 or 4.2 (got '$1')" ;;
    esac
}

# bench_run OUTVAR PID URL ARGS...: runs `sluice bench` (bounded by BENCH_TIMEOUT, default 600 s)
# and records the server PID's CPU ticks around it. If the server dies meanwhile: exit, or with
# BENCH_SERVER_DEATH_OK=1 return 3 (the caller reports it). Sets ${OUTVAR}_rate (bytes/s),
# ${OUTVAR}_bytes, ${OUTVAR}_cpu (server CPU seconds), ${OUTVAR}_line (the bench output).
bench_run() {
    local var="$1" pid="$2" url="$3"; shift 3
    local c0 c1 out bpid rc deadline
    c0=$(cpu_ticks "$pid")
    # the client retries a dead server forever (hard-mount semantics): watch the server and stop
    # the client at once if the server goes away (OOM kill in a memory cgroup, crash)
    "$BIN" bench "$@" "$url" > "$BENCH_WORK/bench.out" 2> "$BENCH_WORK/bench.err" &
    bpid=$!
    deadline=$(( $(date +%s) + ${BENCH_TIMEOUT:-600} ))
    while kill -0 "$bpid" 2>/dev/null && alive "$bpid"; do
        if ! alive "$pid"; then
            kill -KILL "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null || true
            echo "  $var: the server (pid $pid) died during: sluice bench $*" >&2
            [ "${BENCH_SERVER_DEATH_OK:-0}" = 1 ] && return 3
            bench_die "the server (pid $pid) died during: sluice bench $* (OOM kill? see dmesg)"
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            kill -KILL "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null || true
            bench_die "sluice bench $* took over ${BENCH_TIMEOUT:-600} s"
        fi
        sleep 0.1
    done
    rc=0; wait "$bpid" || rc=$?
    [ "$rc" = 0 ] || bench_die "sluice bench $* $url failed ($rc): $(tail -3 "$BENCH_WORK/bench.err")"
    out=$(cat "$BENCH_WORK/bench.out")
    c1=$(cpu_ticks "$pid")
    echo "  $var: $out (server cpu $(( c1 - c0 )) ticks)" >&2
    printf -v "${var}_line" '%s' "$out"
    printf -v "${var}_bytes" '%s' "$(kv bytes "$out")"
    printf -v "${var}_rate" '%s' "$(python3 -c "print($(kv bytes "$out")/$(kv secs "$out"))")"
    printf -v "${var}_cpu" '%s' "$(python3 -c "print(($c1-$c0)/$CLK_TCK)")"
}

# alive PID: the process exists and is not a zombie
alive() {
    local line
    { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
    line="${line##*) }"
    [ "${line:0:1}" != Z ]
}

kv() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }   # KEY "k=v k=v": the value

# py EXPR: evaluate a python expression (formatting ratios)
py() { python3 -c "import statistics as st; print($1)"; }

machine_line() {
    echo "$(nproc) cores, $(uname -sr), $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo), TCP congestion control $(sysctl -n net.ipv4.tcp_congestion_control) (host default ${BENCH_CC_ORIG:-the same}), backing fs $(findmnt -no FSTYPE -T "$BENCH_WORK") on $(findmnt -no SOURCE -T "$BENCH_WORK"), sluice $(git -C "$BENCH_ROOT" rev-parse --short HEAD)$(git -C "$BENCH_ROOT" diff --quiet HEAD -- crates || echo '+uncommitted changes in crates/'); host load average (1/5/15 min) at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work shares the host)"
}

# backend_writes METRICS_ADDR: "MEDIAN_LE AVG COUNT BYTES" of the server's backend write sizes,
# from the sluice_backend_write_bytes histogram (MEDIAN_LE: the upper bound of the bucket that
# holds the median write; the buckets are powers of two).
backend_writes() {
    "$BIN" stats --prometheus "$1" | python3 -c '
import sys, re
buckets, total, count = [], 0, 0
for line in sys.stdin:
    m = re.match(r"sluice_backend_write_bytes_bucket\{le=\"([^\"]+)\"\} (\d+)", line)
    if m: buckets.append((float("inf") if m[1] == "+Inf" else float(m[1]), int(m[2])))
    m = re.match(r"sluice_backend_write_bytes_sum (\d+)", line)
    if m: total = int(m[1])
    m = re.match(r"sluice_backend_write_bytes_count (\d+)", line)
    if m: count = int(m[1])
med = next((le for le, c in sorted(buckets) if count and c >= (count + 1) / 2), 0)
print(int(med) if med != float("inf") else -1, total // count if count else 0, count, total)'
}

mib() { py "f'{$1/1048576:g} MiB'"; }
