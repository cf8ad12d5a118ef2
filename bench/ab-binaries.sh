#!/usr/bin/env bash
# An A/B of two sluice binaries under one benchmark, alternating run by run in one session, so
# that the machine's drift over the session falls on both alike.
#
#   bench/ab-binaries.sh [--rounds 3] [--out FILE] A_BIN B_BIN -- BENCH_SCRIPT [ARGS...]
#
# Runs BENCH_SCRIPT ARGS --out <tmp> with SLUICE_BIN=A_BIN, then with SLUICE_BIN=B_BIN, then
# B then A, and so on (ABBA order, so neither binary always runs first) for --rounds rounds of
# one run each. BENCH_SCRIPT is any benchmark built on bench/lib.sh: its result file's `| phase |`
# table (server-vs-ganesha.sh, ceph-vs-ganesha.sh), else its first table (client-speed.sh). The summary gives,
# for every numeric column of that table, the median over A's runs and over B's runs and B/A,
# then every run's file, in run order. Nothing else heavy may run meanwhile.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=3; OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --) shift; break ;;
        -*) sed -n '2,12p' "$0" >&2; exit 2 ;;
        *) if [ -z "${A:-}" ]; then A="$1"; elif [ -z "${B:-}" ]; then B="$1"; else
               sed -n '2,12p' "$0" >&2; exit 2; fi; shift ;;
    esac
done
[ -n "${A:-}" ] && [ -n "${B:-}" ] && [ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
for bin in "$A" "$B"; do [ -x "$bin" ] || { echo "ab-binaries: $bin is not executable" >&2; exit 1; }; done
SCRIPT="$1"; shift
WORK=$(mktemp -d /tmp/sluice-ab.XXXXXX)
OUT="${OUT:-$ROOT/bench/results/ab-$(date -u +%F)-$(basename "$SCRIPT" .sh).md}"

ORDER=()
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then ORDER+=(A B); else ORDER+=(B A); fi
done
n=0
for which in "${ORDER[@]}"; do
    n=$((n + 1))
    bin="$A"; [ "$which" = B ] && bin="$B"
    echo "== run $n/${#ORDER[@]}: $which ($bin)" >&2
    SLUICE_BIN="$bin" "$SCRIPT" "$@" --out "$WORK/$n-$which.md" >&2
done

python3 - "$WORK" "$A" "$B" "$OUT" "$SCRIPT $*" <<'EOF'
import glob, os, re, statistics, subprocess, sys
work, a_bin, b_bin, out, cmd = sys.argv[1:6]

def table(path):
    """The first `| phase |` table of a result file: {phase: {column: float}}, column order."""
    rows, header = {}, None
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if header is None:
            # A `| phase |` table, else the first table of the file (its first column names rows).
            nxt = lines[i + 1] if i + 1 < len(lines) else ''
            if line.startswith('|') and nxt.startswith('|---') and (
                    line.startswith('| phase |') or '| phase |' not in open(path).read()):
                header = cells
            continue
        if not line.startswith('|'):
            break
        if set(line.strip()) <= set('|-'):
            continue
        vals = {}
        for h, c in zip(header[1:], cells[1:]):
            try:
                vals[h] = float(c.strip('*x '))
            except ValueError:
                pass
        rows[cells[0]] = vals
    return rows, (header or [])[1:]

runs = sorted(glob.glob(os.path.join(work, '*.md')), key=lambda p: int(os.path.basename(p).split('-')[0]))
by = {'A': [], 'B': []}
cols = []
for p in runs:
    which = os.path.basename(p).split('-')[1][0]
    rows, header = table(p)
    by[which].append(rows)
    cols = cols or header
phases = list(by['A'][0].keys()) if by['A'] else []

def rev(b):
    try:
        return (subprocess.run([b, '--version'], capture_output=True, text=True).stdout.strip().splitlines() or ['?'])[0]
    except OSError:
        return '?'

lines = [f"# A/B of two sluice binaries, alternating: `{os.path.basename(cmd.split()[0])}`", "",
         f"Date: {subprocess.run(['date', '-u', '+%F'], capture_output=True, text=True).stdout.strip()}. "
         f"`bench/ab-binaries.sh --rounds {len(by['A'])} A B -- {cmd}`: runs in ABBA order "
         f"({len(runs)} in all), medians over each binary's runs.",
         f"A: `{a_bin}` ({rev(a_bin)}); B: `{b_bin}` ({rev(b_bin)}).", "",
         "| phase | column | A median | B median | B / A | A runs | B runs |", "|---|---|---|---|---|---|---|"]
for ph in phases:
    for c in cols:
        av = [r[ph][c] for r in by['A'] if c in r.get(ph, {})]
        bv = [r[ph][c] for r in by['B'] if c in r.get(ph, {})]
        if not av or not bv:
            continue
        am, bm = statistics.median(av), statistics.median(bv)
        ratio = f"{bm / am:.2f}" if am else "-"
        lines.append(f"| {ph} | {c} | {am:g} | {bm:g} | {ratio} | {' '.join(f'{v:g}' for v in av)} "
                     f"| {' '.join(f'{v:g}' for v in bv)} |")
lines += ["", "## The runs, in order", ""]
for p in runs:
    lines += [f"### Run {os.path.basename(p)[:-3]}", "", open(p).read(), ""]
open(out, 'w').write('\n'.join(lines))
print('\n'.join(lines).split('## The runs')[0])
print(f"written: {out}")
EOF
rm -rf "$WORK"
