#!/usr/bin/env bash
# Issue 6 and 30 load runs: 32 library clients (one connection each) on a mixed workload (create,
# write, read, readdir, rename, remove, stat) against one `sluice serve`, each checking every
# reply and, at the end, every surviving file against an in-memory model; once over NFSv3 and
# once over NFSv4.1 (a session per client, OPEN/CLOSE around writes, reads under open stateids,
# reads of each other's files so that read delegations are granted and recalled; at the end
# every client destroyed and the server's state gauges back to zero). These are the
# default-suite tests of crates/cli/tests/load.rs, run longer (60 s each) and in a release
# build, one after the other (never side by side: each report's latencies are its own). It
# prints both reports (p50/p99/max latency per procedure, calls/s, the server's peak and final
# RSS; over NFSv4.1 also delegations, recalls and the state gauges) and saves them to
# bench/results/load-<date>.md (or --out FILE).
#
#   bench/load.sh [--secs N] [--seed S] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=60
SEED=""
OUT="bench/results/load-$(date -u +%Y-%m-%d).md"
while [ $# -gt 0 ]; do
  case "$1" in
    --secs) SECS="$2"; shift ;;
    --seed) SEED="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) echo "usage: $0 [--secs N] [--seed S] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
REPORT=$(mktemp /tmp/sluice-load.XXXXXX)
REPORT41=$(mktemp /tmp/sluice-load41.XXXXXX)
trap 'rm -f "$REPORT" "$REPORT41"' EXIT
ENV=(SLUICE_LOAD_SECS="$SECS" SLUICE_LOAD_REPORT="$REPORT" SLUICE_LOAD_REPORT_V41="$REPORT41")
[ -n "$SEED" ] && ENV+=(SLUICE_LOAD_SEED="$SEED")

# The tests start the release `sluice` binary (CARGO_BIN_EXE_sluice) as the server, one test at
# a time (--test-threads 1). A bounded wait: both runs plus generous room for the build and the
# final verifications.
env "${ENV[@]}" timeout $((2 * SECS + 1800)) \
  cargo test --release -q -p sluice --test load -- --exact --test-threads 1 \
  thirty_two_clients_mixed_workload_loses_nothing \
  thirty_two_v41_clients_mixed_workload_lose_nothing --nocapture >&2

mkdir -p "$(dirname "$OUT")"
{
  echo "# bench/load.sh, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "Host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)'), release build."
  echo "Client and server share the host: latencies include queueing behind the other 31 clients."
  echo "Host load average before the runs: $LOAD_BEFORE (other work on the machine inflates the tails)."
  echo "The NFSv3 run, then the NFSv4.1 run (one COMPOUND per row, named by its main op; OPEN and"
  echo "REMOVE/RENAME include the NFS4ERR_DELAY waits while another client's delegation is recalled)."
  echo
  cat "$REPORT"
  echo
  cat "$REPORT41"
} | tee "$OUT"
echo "saved to $OUT" >&2
