#!/usr/bin/env bash
# Does NFSv4.2 READ_PLUS pay? Two measurements, one Markdown report:
#
# 1. Loopback, protocol level (crates/server/tests/read_plus_bench.rs, an #[ignore]d test run
#    here): a client reads a sparse and a dense file in 1 MiB calls with READ and with
#    READ_PLUS from an in-process server; median wall time of RP_RUNS reads, CPU (client and
#    server), reply bytes, ratios. This is where the server's cost and the bytes saved show.
# 2. The Linux kernel client (the kclient qemu guest, vers=4.2; RP_GUEST=0 skips it): the same
#    two files read with `gdd` from `sluice serve` with READ_PLUS and with --no-read-plus, side
#    by side; median read time, bytes the client received and its READ / READ_PLUS calls (its
#    /proc/self/mountstats), the server's READ_PLUS count, SHA-256 of what it read. Whether
#    the guest sends READ_PLUS at all is its kernel's build option (Debian's 6.1 has
#    CONFIG_NFS_V4_2_READ_PLUS off): the calls columns say.
#
#   bench/read-plus.sh [OUT.md]
#
# Environment: RP_MIB (256) file sizes, RP_DATA_PCT (10) share of the sparse file that is
# data (in runs of RP_RUN_KIB, 256, evenly spread), RP_RUNS (3), RP_GUEST (1),
# BENCH_SKIP_BUILD=1 uses target/release/sluice as it is. One guest boot per mode. The guest
# is software emulated (qemu TCG, ~80-90 MB/s): compare the two modes, not absolute figures.
# Root only (the guest, drop_caches).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="$ROOT/target/release/sluice"
MIB="${RP_MIB:-256}"
PCT="${RP_DATA_PCT:-10}"
RUN_KIB="${RP_RUN_KIB:-256}"
RUNS="${RP_RUNS:-3}"
OUT="${1:-}"
die() { echo "read-plus: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the kclient guest, drop_caches)"
cd "$ROOT"
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then cargo build --release -q -p sluice; fi
[ -x "$BIN" ] || die "$BIN missing"
command -v python3 >/dev/null || die "python3 not found"

WORK="$(mktemp -d /var/tmp/sluice-read-plus.XXXXXX)"   # a disk file system with holes
export RP_MIB="$MIB" RP_DATA_PCT="$PCT" RP_RUN_KIB="$RUN_KIB" RP_RUNS="$RUNS"
# 1. Loopback (the test binary is built optimized: the workspace's test profile).
cargo test -q -p sluice-server --test read_plus_bench -- --ignored --nocapture 2>"$WORK/loopback.err" \
    | grep '^|' >"$WORK/loopback.md" || { cat "$WORK/loopback.err" >&2; die "read_plus_bench failed"; }
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
EXP="$WORK/export"
mkdir -p "$EXP/read-plus"

# The sparse file: RUN_KIB of data every RUN_KIB*100/PCT KiB, holes between; the dense one
# all data. Both random bytes (nothing compresses on the way).
python3 - "$EXP/read-plus" "$MIB" "$PCT" "$RUN_KIB" <<'PY'
import os, sys
d, mib, pct, run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) * 1024
size = mib << 20
stride = run * 100 // pct
with open(os.path.join(d, "sparse"), "wb") as f:
    f.truncate(size)
    for at in range(0, size, stride):
        f.seek(at)
        f.write(os.urandom(min(run, size - at)))
with open(os.path.join(d, "dense"), "wb") as f:
    for _ in range(mib):
        f.write(os.urandom(1 << 20))
PY
sync
declare -A WANT
for f in sparse dense; do WANT[$f]="$(sha256sum "$EXP/read-plus/$f" | cut -d' ' -f1)"; done
alloc_kib="$(du -k "$EXP/read-plus/sparse" | cut -f1)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run_mode NAME [serve flags...]: one server, one guest boot; the guest's output in $WORK/NAME.out
run_mode() {
    local name="$1"; shift
    local port metrics pid
    port="$(free_port)"; metrics="127.0.0.1:$(free_port)"
    mkdir -p "$WORK/state-$name"
    "$BIN" serve "$EXP" --listen "127.0.0.1:$port" --no-root-squash \
        --state-dir "$WORK/state-$name" --metrics "$metrics" "$@" >"$WORK/serve-$name.log" 2>&1 &
    pid=$!; PIDS+=("$pid")
    for _ in $(seq 1 100); do
        grep -q "serving" "$WORK/serve-$name.log" 2>/dev/null && break; sleep 0.1
    done
    KC_VERS=4.2 KC_TIMEOUT=600 KC_RUN_DIR="$WORK/kc-$name" \
        "$ROOT/tests/peers/kclient.sh" "$port" "$port" "$EXP" "$ROOT/tests/peers/guest/read-plus.sh" \
        --env "RP_RUNS=$RUNS" >"$WORK/$name.out" 2>&1 \
        || { cat "$WORK/$name.out" "$WORK/kc-$name/out/guest.log" 2>/dev/null | tail -40 >&2; die "guest run $name failed"; }
    cp "$WORK/kc-$name/out/guest.log" "$WORK/$name.out" 2>/dev/null || true
    "$BIN" stats --prometheus "$metrics" >"$WORK/$name.metrics"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

if [ "${RP_GUEST:-1}" != 0 ]; then
    run_mode on
    run_mode off --no-read-plus
else
    : >"$WORK/on.out"; : >"$WORK/off.out"; : >"$WORK/on.metrics"; : >"$WORK/off.metrics"
fi

python3 - "$WORK" "$MIB" "$PCT" "$RUN_KIB" "$RUNS" "$alloc_kib" "${WANT[sparse]}" "${WANT[dense]}" \
    "$(git -C "$ROOT" rev-parse --short HEAD)" >"$WORK/report.md" <<'PY'
import re, statistics, sys
work, mib, pct, run_kib, runs, alloc_kib, want_sparse, want_dense, rev = sys.argv[1:]
want = {"sparse": want_sparse, "dense": want_dense}
res, sums, plus_server = {}, {}, {}
for mode in ("on", "off"):
    for line in open(f"{work}/{mode}.out"):
        m = re.search(r"RP file=(\S+) run=\d+ secs=([\d.]+) read=(\d+) read_plus=(\d+) recv_bytes=(\d+)", line)
        if m:
            f = m.group(1)
            res.setdefault((mode, f), []).append(tuple(float(x) for x in m.groups()[1:]))
        m = re.search(r"RPSUM (\S+) (\S+)", line)
        if m:
            sums[(mode, m.group(1))] = m.group(2)
    plus_server[mode] = 0
    for line in open(f"{work}/{mode}.metrics"):
        m = re.match(r'sluice_nfs4_op_calls_total\{op="READ_PLUS"\} (\d+)', line)
        if m:
            plus_server[mode] = int(m.group(1))
print(f"# Does READ_PLUS pay? {mib} MiB files, sparse ({pct}% data) and dense")
print()
print(f"Made by `bench/read-plus.sh` at {rev}.")
print()
print("## 1. Loopback, protocol level")
print()
print(f"`crates/server/tests/read_plus_bench.rs`: one client reads each file start to end in 1 MiB")
print(f"calls (one in flight) with READ, then with READ_PLUS, from an in-process `sluice serve` on")
print(f"127.0.0.1; {runs} reads each after a warm-up (the page cache is warm). CPU is the process's")
print(f"(client and server together). Reply bytes are the COMPOUND replies (RPC headers aside).")
print()
print(open(f"{work}/loopback.md").read().rstrip())
print()
print("## 2. Through the Linux kernel client")
print()
print(f"`sluice serve` (release) exporting a directory on the")
print(f"host's disk file system, read by the kclient qemu guest (Debian's Linux 6.1 client, vers=4.2,")
print(f"read_ahead_kb 15360) with `gdd bs=1M`, {runs} reads per file and mode, guest caches dropped")
print(f"before each (the host's page cache stays warm). Sparse: {run_kib} KiB of random data every")
print(f"{int(run_kib) * 100 // int(pct)} KiB ({pct}% data, {alloc_kib} KiB allocated); dense: all random data.")
print(f"\"on\": READ_PLUS answered; \"off\": `--no-read-plus` (NOTSUPP, the client reads with READ).")
print(f"Bytes are what the client received for READ and READ_PLUS (its mountstats). The guest is")
print(f"software-emulated: only the ratios mean anything.")
print()
print("| file | mode | median s | runs s | MiB received | READ calls | READ_PLUS calls (client) | sha256 |")
print("|---|---|---|---|---|---|---|---|")
med = {}
for f in ("sparse", "dense"):
    for mode in ("on", "off"):
        rows = res.get((mode, f), [])
        if not rows:
            print(f"| {f} | {mode} | - | - | - | - | - | missing |")
            continue
        secs = [r[0] for r in rows]
        med[(mode, f)] = (statistics.median(secs), statistics.median(r[3] for r in rows))
        ok = "ok" if sums.get((mode, f)) == want[f] else f"MISMATCH {sums.get((mode, f))}"
        print(f"| {f} | {mode} | {statistics.median(secs):.2f} | {', '.join(f'{s:.2f}' for s in secs)} "
              f"| {rows[0][3] / 2**20:.1f} | {int(rows[0][1])} | {int(rows[0][2])} | {ok} |")
print()
print(f"Server-side READ_PLUS calls (sluice stats): on {plus_server['on']}, off {plus_server['off']}. "
      f"With no READ_PLUS sent in either mode the two do the same READs, and their time ratio is "
      f"only the machine's noise.")
print()
print("| file | time on/off | bytes on/off |")
print("|---|---|---|")
for f in ("sparse", "dense"):
    if ("on", f) in med and ("off", f) in med:
        (t1, b1), (t0, b0) = med[("on", f)], med[("off", f)]
        print(f"| {f} | {t1 / t0:.2f} | {b1 / b0:.3f} |")
PY
cat "$WORK/report.md"
if [ -n "$OUT" ]; then cp "$WORK/report.md" "$OUT"; fi
