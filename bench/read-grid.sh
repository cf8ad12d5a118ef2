#!/usr/bin/env bash
# Issue 4 benchmark: sequential reads through the link emulator, for RTT x bandwidth cells, with
# the sluice client in each readahead mode, `dd` through `sluice mount` of the same export over
# the same link (issue 17: the mount reads through the client's File reader, so it should come
# close to `auto`), and libnfs' nfs-cat for reference. Prints a markdown
# table of achieved rate / configured link rate, measured side by side in one run, plus the
# loopback single-stream limit (iperf3). Not part of the default tests: timings are noisy here.
#
#   bench/read-grid.sh [--quick] [--cells "RTT:RATE ..."] [--cap SECONDS] [--server sluice|ganesha] [--out FILE]
#
# --quick runs two cells only (for trying the script); --cells names the cells to run. Results
# go to stdout and, with --out, to FILE (commit it under bench/results/ with the date).
# SLUICE_BIN=PATH uses that binary and skips the release build.
#
# The mount column: `sluice mount` of the export through the cell's link (a fresh mount per
# cell, so neither the kernel's page cache nor the mount's own cache holds the file), then
# `dd bs=1M` of the file to stdout, capped like the others, then `fusermount3 -u`.
#
# --server ganesha reads from nfs-ganesha (VFS FSAL, tests/peers/ganesha.sh) instead of `sluice
# serve`: issue 15's "sluice cp over 4.1 from ganesha vs libnfs nfs-cat version=4" over a link.
# There nfs-cat reads over NFSv4.0 (`version=4`; libnfs has no 4.1) when BENCH_NFS_VERSION is
# 4.x, and the mount column's MOUNT calls go through a second link instance to ganesha's MOUNT
# port. The cp column is `sluice cp URL /dev/shm/...` (the copy's size over its time).
#
# Each read is cut off after --cap seconds (default 8) and its rate is the bytes it delivered
# over the time it ran: without the cap, fixed:128k on a 40 ms link (~3 MB/s) would take minutes
# per cell. A capped read includes its ramp-up, like a short file would.
#
# Each cell also measures the proxy's own ceiling: one iperf3 TCP stream through the same
# `sluice link` settings. The proxy is user space on this 2-core machine; where that ceiling is
# below the configured rate, the cell measures the proxy, not the client (marked in the table).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
SERVER=sluice
OUT=""
CAP=8
CELLS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --cells) CELLS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --cap) CAP="$2"; shift ;;
    --server) SERVER="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--cells \"RTT:RATE ...\"] [--cap SECONDS] [--server sluice|ganesha] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done

./scripts/install-deps.sh >/dev/null
if [ -n "${SLUICE_BIN:-}" ]; then
  BIN="$SLUICE_BIN"
else
  cargo build --release -q -p sluice
  BIN="$PWD/target/release/sluice"
fi

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
PIDS=()
MNT="$WORK/mnt"
mkdir -p "$MNT"
is_mounted() { grep -qs " $MNT fuse" /proc/self/mounts; }
unmount() { is_mounted || return 0; fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; }
cleanup() {
  unmount
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "$SERVER" = ganesha ]; then ./tests/peers/ganesha.sh stop "$WORK/ganesha" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -f /dev/shm/sluice-grid-cp.$$
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

mkdir -p "$WORK/export" "$WORK/state"
SP=$(free_port)
case "$SERVER" in
  sluice)
    "$BIN" serve "$WORK/export" --listen 127.0.0.1:"$SP" --state-dir "$WORK/state" --no-root-squash 2>"$WORK/server.log" &
    PIDS+=($!)
    wait_port "$SP"
    MP=$SP ;;
  ganesha)
    # ganesha's MOUNT listens on SP+1: pick SP so that both are free
    while ! python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',$SP+1))" 2>/dev/null; do SP=$(free_port); done
    GANESHA_CACHING=1 ./tests/peers/ganesha.sh start "$WORK/export" "$SP" "$WORK/ganesha" >"$WORK/ganesha-start.log" 2>&1 \
      || { cat "$WORK/ganesha-start.log" >&2; echo "ganesha did not start" >&2; exit 1; }
    MP=$((SP + 1)) ;;
  *) echo "--server must be sluice or ganesha" >&2; exit 2 ;;
esac

# Loopback limit: one TCP stream, as PEERS.md suggests. The iperf3 server stays up for the
# per-cell proxy ceilings.
IP=$(free_port)
iperf3 -s -p "$IP" >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.3
iperf_bps() { iperf3 -c 127.0.0.1 -p "$1" -t "$2" -J 2>/dev/null | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8))' 2>/dev/null || echo 0; }
LOOP_BPS=$(iperf_bps "$IP" 3)

if [ -n "$CELLS" ]; then
  :
elif [ "$QUICK" = 1 ]; then
  CELLS="1ms:300MB/s 10ms:300MB/s"
else
  for rtt in 0.2ms 1ms 10ms 40ms; do
    for rate in 12.5MB/s 300MB/s 1GB/s; do CELLS="$CELLS $rtt:$rate"; done
  done
fi

to_secs() { python3 -c "import sys; v=sys.argv[1]; print(float(v[:-2])/1000 if v.endswith('ms') else float(v[:-1]))" "$1"; }
to_bps() { python3 -c "import sys; v=sys.argv[1].removesuffix('/s'); m={'MB':1e6,'GB':1e9}; print(int(float(v[:-2])*m[v[-2:]]))" "$1"; }

# time_read CMD...: runs CMD for at most CAP seconds, prints the bytes/s it delivered.
time_read() {
  local t0 t1 bytes
  t0=$(date +%s.%N)
  bytes=$( { timeout "$CAP" "$@" 2>>"$WORK/client.log" || true; } | wc -c)
  t1=$(date +%s.%N)
  [ "$bytes" -gt 0 ] || { echo "FAILED: $*" >&2; echo 0; return; }
  python3 -c "print(int($bytes/($t1-$t0)))"
}

# time_cp URL: `sluice cp URL` into /dev/shm for at most CAP seconds, prints the bytes/s it copied
# (the copy's size when it finished or was cut off, over the time it ran).
time_cp() {
  local t0 t1 bytes dst=/dev/shm/sluice-grid-cp.$$
  rm -f "$dst"
  t0=$(date +%s.%N)
  timeout "$CAP" "$BIN" cp -q "$1" "$dst" 2>>"$WORK/client.log" || true
  t1=$(date +%s.%N)
  bytes=$(stat -c %s "$dst" 2>/dev/null || echo 0)
  rm -f "$dst"
  [ "$bytes" -gt 0 ] || { echo "FAILED: sluice cp $1" >&2; echo 0; return; }
  python3 -c "print(int($bytes/($t1-$t0)))"
}

# mount_read URL FILE: mounts URL (the export) on $MNT with `sluice mount`, prints the bytes/s of
# `dd bs=1M` reading FILE (a name in the export) through it (capped like time_read), unmounts.
mount_read() {
  local mpid r=0 i
  "$BIN" mount "$1" "$MNT" 2>>"$WORK/mount.log" &
  mpid=$!
  PIDS+=($mpid)
  for i in $(seq 1 200); do is_mounted && break; kill -0 "$mpid" 2>/dev/null || break; sleep 0.05; done
  if is_mounted; then
    r=$(time_read dd if="$MNT/$2" bs=1M status=none)
  else
    echo "FAILED: sluice mount $1 (see mount.log)" >&2
  fi
  unmount
  for i in $(seq 1 100); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.05; done
  kill "$mpid" 2>/dev/null || true
  wait "$mpid" 2>/dev/null || true
  echo "$r"
}

{
echo "# Sequential read through sluice link: achieved / link rate"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(nproc) cores. Loopback single-stream limit (iperf3): $((LOOP_BPS/1000000)) MB/s."
if [ "$SERVER" = ganesha ]; then SNAME="nfs-ganesha (VFS FSAL, its caching defaults)"; else SNAME="sluice serve"; fi
echo "Server: $SNAME (page cache warm). Client: sluice cat in each readahead mode; \`sluice cp\` to /dev/shm (cp); \`dd bs=1M\` through a fresh \`sluice mount\` of the export (mount); libnfs nfs-cat (one 1 MiB READ in flight) for reference."
echo "Each read runs at most ${CAP} s (rate = bytes delivered / time, ramp-up included). Cells are achieved rate / configured link rate;"
echo "'proxy' is one iperf3 TCP stream through the same sluice link, the ceiling of the emulator itself (user space, $(nproc) cores)."
echo "A cell marked * has a proxy ceiling below 0.9 of the link rate: there the proxy, not the client, is the bottleneck; compare the modes with the proxy column, not with 1.00."
echo
echo "| RTT | link rate | file | proxy | auto | fixed:128k | fixed:15m | cp | mount | nfs-cat | cp / nfs-cat |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
} | tee "$WORK/table.md"

for cell in $CELLS; do
  rtt=${cell%%:*}; rate=${cell#*:}
  bps=$(to_bps "$rate"); secs=$(to_secs "$rtt")
  # Enough bytes to measure after warm-up: at least 16 x BDP, 64 MiB, and ~2 s of transfer (capped at 1 GiB).
  FILE_BYTES=$(python3 -c "b=$bps; print(min(max(64<<20, int(16*b*$secs), int(2*b)), 1<<30))")
  f="$WORK/export/f-$FILE_BYTES"
  [ -f "$f" ] || head -c "$FILE_BYTES" /dev/urandom > "$f"
  cat "$f" > /dev/null   # warm the server's page cache
  LP=$(free_port)
  "$BIN" link --listen 127.0.0.1:"$LP" --to 127.0.0.1:"$SP" --rtt "$rtt" --rate "$rate" 2>>"$WORK/link.log" &
  LPID=$!
  PIDS+=($LPID)
  wait_port "$LP"
  MLP=$LP
  if [ "$MP" != "$SP" ]; then
    # ganesha: MOUNT has its own port, so the v3 clients need a second link to reach it
    MLP=$(free_port)
    "$BIN" link --listen 127.0.0.1:"$MLP" --to 127.0.0.1:"$MP" --rtt "$rtt" --rate "$rate" 2>>"$WORK/link.log" &
    MLPID=$!
    PIDS+=($MLPID)
    wait_port "$MLP"
  fi
  URL="nfs://127.0.0.1$WORK/export/$(basename "$f")?version=3&nfsport=$LP&mountport=$MLP"
  LURL="$URL"
  if [ "$SERVER" = ganesha ] && [ "${BENCH_NFS_VERSION:-3}" != 3 ]; then
    LURL="nfs://127.0.0.1$WORK/export/$(basename "$f")?version=4&nfsport=$LP"
  fi
  # BENCH_NFS_VERSION=4.1 (or 4.2, 4): the sluice client's columns read over NFSv4 (issue 15's
  # grid, to set beside a v3 one); nfs-cat stays on $URL, NFSv3: libnfs has no 4.1 and sluice
  # serve no 4.0.
  case "${BENCH_NFS_VERSION:-3}" in
    3) SURL="$URL" ;;
    4|4.1|4.2) SURL="nfs://127.0.0.1$WORK/export/$(basename "$f")?version=$BENCH_NFS_VERSION&nfsport=$LP" ;;
    *) echo "BENCH_NFS_VERSION must be 3, 4, 4.1 or 4.2" >&2; exit 2 ;;
  esac
  # One connection for the sluice clients: `sluice link` models a link per TCP connection, so
  # the automatic nconnect (which adds a connection when the reader's socket reads come back
  # full, as they do behind the emulator at 1 GB/s) would get a second, private link of the
  # cell's rate instead of sharing one. The grid measures readahead over one path.
  SURL="$SURL&nconnect=1"
  MURL="nfs://127.0.0.1$WORK/export?version=3&nfsport=$LP&mountport=$MLP&nconnect=1"
  # The emulator's own ceiling with these settings: iperf3 through a second link instance.
  PP=$(free_port)
  "$BIN" link --listen 127.0.0.1:"$PP" --to 127.0.0.1:"$IP" --rtt "$rtt" --rate "$rate" 2>>"$WORK/link.log" &
  PPID_=$!
  PIDS+=($PPID_)
  # No wait_port here: a probe connection through the link would reach iperf3 as a bogus
  # client and make it refuse the next test as busy.
  sleep 0.5
  pbps=$(iperf_bps "$PP" 3)
  [ "$pbps" -gt 0 ] || { sleep 1; pbps=$(iperf_bps "$PP" 3); }
  kill "$PPID_" 2>/dev/null || true
  mark=$(python3 -c "print('*' if $pbps < 0.9*$bps else '')")
  row="| $rtt | $rate$mark | $((FILE_BYTES>>20)) MiB | $(python3 -c "print(f'{$pbps/$bps:.2f}')")"
  for mode in auto fixed:128k fixed:15m; do
    r=$(time_read "$BIN" cat --readahead "$mode" "$SURL")
    row="$row | $(python3 -c "print(f'{$r/$bps:.2f}')")"
  done
  cpr=$(time_cp "$SURL")
  row="$row | $(python3 -c "print(f'{$cpr/$bps:.2f}')")"
  r=$(mount_read "$MURL" "$(basename "$f")")
  row="$row | $(python3 -c "print(f'{$r/$bps:.2f}')")"
  r=$(time_read nfs-cat "$LURL")
  row="$row | $(python3 -c "print(f'{$r/$bps:.2f}')") | $(python3 -c "print(f'{$cpr/$r:.2f}' if $r > 0 else '-')") |"
  echo "$row" | tee -a "$WORK/table.md"
  kill "$LPID" 2>/dev/null || true
  if [ "$MLP" != "$LP" ]; then kill "$MLPID" 2>/dev/null || true; fi
done

if [ "${BENCH_NFS_VERSION:-3}" != 3 ]; then
  if [ "$SERVER" = ganesha ]; then LV="NFSv4.0 (\`version=4\`)"; else LV="NFSv3"; fi
  printf '\nThe sluice cat columns (auto, fixed:128k, fixed:15m) and cp read over NFS version %s (BENCH_NFS_VERSION); nfs-cat over %s; the mount over NFSv3.\n' \
    "$BENCH_NFS_VERSION" "$LV" | tee -a "$WORK/table.md"
fi

if [ -n "$OUT" ]; then
  mkdir -p "$(dirname "$OUT")"
  cp "$WORK/table.md" "$OUT"
  echo "wrote $OUT" >&2
fi
