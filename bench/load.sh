#!/usr/bin/env bash
# Issue 6 load run: 32 library clients (one connection each) on a mixed workload (create, write,
# read, readdir, rename, remove, stat) against one `sluice serve`, each checking every reply and,
# at the end, every surviving file against an in-memory model. This is the default-suite test
# crates/cli/tests/load.rs, run longer (60 s) and in a release build. It prints the report
# (p50/p99/max latency per procedure, calls/s, the server's peak and final RSS) and saves it to
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
trap 'rm -f "$REPORT"' EXIT
ENV=(SLUICE_LOAD_SECS="$SECS" SLUICE_LOAD_REPORT="$REPORT")
[ -n "$SEED" ] && ENV+=(SLUICE_LOAD_SEED="$SEED")

# The test starts the release `sluice` binary (CARGO_BIN_EXE_sluice) as the server. A bounded
# wait: the run plus generous room for the build and the final verification.
env "${ENV[@]}" timeout $((SECS + 1800)) \
  cargo test --release -q -p sluice --test load -- --exact \
  thirty_two_clients_mixed_workload_loses_nothing --nocapture >&2

mkdir -p "$(dirname "$OUT")"
{
  echo "# bench/load.sh, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "Host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)'), release build."
  echo "Client and server share the host: latencies include queueing behind the other 31 clients."
  echo "Host load average before the run: $LOAD_BEFORE (other work on the machine inflates the tails)."
  echo
  cat "$REPORT"
} | tee "$OUT"
echo "saved to $OUT" >&2
