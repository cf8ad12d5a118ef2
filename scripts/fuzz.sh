#!/usr/bin/env bash
# Fuzzes every wire decoder (the cargo-fuzz targets in fuzz/) and fails on the first crash.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   replay fuzz/regressions/, then fuzz each target
#                                          for SECONDS_PER_TARGET (default 30)
#   scripts/fuzz.sh replay                 replay fuzz/regressions/ only (seconds, no fuzzing)
#
# Installs what it needs first, idempotently: the nightly toolchain (libFuzzer's sanitizer
# flags need it) and cargo-fuzz. Every run is bounded: -max_total_time per target and
# -rss_limit_mb=1024, so a decoder that allocates without bound is a crash like a panic is.
#
# A crash stops the script with a non-zero status; its input is copied to
# fuzz/regressions/<target>/ (from fuzz/artifacts/<target>/) so that the next run replays it
# first. Commit it together with the fix. See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

MODE="${1:-30}"
RSS_LIMIT_MB=1024

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "== installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

mapfile -t TARGETS < <(cargo +nightly fuzz list)
echo "== building ${#TARGETS[@]} fuzz targets: ${TARGETS[*]}"
started=$SECONDS
cargo +nightly fuzz build
echo "== build took $((SECONDS - started)) s"

# Replays every kept input once (libFuzzer runs files given as arguments and exits).
replay() {
    local t="$1"
    local dir="regressions/$t"
    [ -d "$dir" ] || return 0
    mapfile -t inputs < <(find "$dir" -type f ! -name '*.md' | sort)
    [ "${#inputs[@]}" -gt 0 ] || return 0
    echo "== replay $t: ${#inputs[@]} regression inputs"
    cargo +nightly fuzz run "$t" "${inputs[@]}" -- -rss_limit_mb=$RSS_LIMIT_MB -runs=1 \
        >"/tmp/sluice-fuzz-replay-$t.log" 2>&1 || {
        tail -n 40 "/tmp/sluice-fuzz-replay-$t.log"
        echo "FAIL: $t crashes on a regression input (log: /tmp/sluice-fuzz-replay-$t.log)"
        exit 1
    }
}

for t in "${TARGETS[@]}"; do
    replay "$t"
done
if [ "$MODE" = replay ]; then
    echo "== all regression inputs pass"
    exit 0
fi
if ! [[ "$MODE" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 [SECONDS_PER_TARGET | replay]" >&2
    exit 2
fi

for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    seeds=()
    [ -d "regressions/$t" ] && seeds=("regressions/$t")
    echo "== fuzz $t for $MODE s"
    log="/tmp/sluice-fuzz-$t.log"
    t0=$SECONDS
    # New inputs go to the first directory (corpus/, not committed); regressions/ only seeds.
    if ! cargo +nightly fuzz run "$t" "corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$MODE" -rss_limit_mb=$RSS_LIMIT_MB -print_final_stats=1 \
        >"$log" 2>&1; then
        tail -n 60 "$log"
        mkdir -p "regressions/$t"
        for a in "artifacts/$t"/*; do
            [ -f "$a" ] && cp -v "$a" "regressions/$t/"
        done
        echo "FAIL: $t crashed (log: $log); the input is now in fuzz/regressions/$t/"
        exit 1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)
    echo "   ok: ${execs:-?} executions, coverage ${cov:-?} edges, $((SECONDS - t0)) s"
done
echo "== no crashes in ${#TARGETS[@]} targets"
