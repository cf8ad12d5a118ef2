#!/usr/bin/env bash
# Issue 29 benchmark: small files and metadata. Side by side in one run, per NFS version:
#
#   untar   `tar -xf` of a tree of >= --files files of mixed small sizes (this repository's
#           `git archive HEAD`, repeated under c000/, c001/, ... until the count is reached),
#           then `sync`
#   ls -lR  of that tree, on a fresh mount (the client's caches empty)
#   rm -r   of that tree
#   create / stat / remove  --empty empty files in one directory (one process, a loop of
#           open(O_CREAT|O_EXCL)+close, then stat on a fresh mount, then unlink; files/s)
#
# through (a) the `sluice mount` FUSE client and, with --kclient, (b) the Linux kernel client
# in the qemu guest (tests/peers/kclient/), each against `sluice serve` and nfs-ganesha (VFS
# FSAL, its own caching defaults), plus the same work on the local file system as the limit.
#
#   bench/small-files.sh [--files 10000] [--empty 10000] [--reps 3] [--versions "3 4.2"]
#                        [--kclient] [--no-mount] [--out FILE]
#
# Reported per phase: median wall seconds (files/s for create/stat/remove), the ratio
# ganesha/sluice of the times (> 1: sluice faster; the issue's goal is >= 1.5 on untar, ls -lR
# and rm -r through the same client), the server's CPU per file (utime+stime of the whole
# server process from /proc/PID/stat around the phase) and its ratio sluice/ganesha (goal
# <= 0.5), and the RPCs per file the client sent (from sluice's own counters: v3 calls, or v4
# COMPOUNDs; ganesha gets the same client's calls). Through `sluice mount`, untar+sync+rm -r
# against the local file system's (goal: within 3x). Servers alternate order rep by rep.
#
# The guest's client runs under TCG emulation (~5x slower per call than native): its times
# and rates are reported only as ratios between the servers. Its phases are timed in the guest
# (busybox tar/ls/rm and the same static helper); the server CPU around each of its phases is
# sampled on the host when the guest creates a marker file in the export (a watcher polls for
# it every 5 ms), so a phase's CPU includes at most that much of its neighbours'.
#
# Env: BENCH_KEEP=1 keeps the work dir; BENCH_SKIP_BUILD=1 skips cargo build; SLUICE_BIN=PATH
# uses that binary; SLUICE_SERVE_ARGS adds `sluice serve` options; SLUICE_MOUNT_ARGS adds
# `sluice mount` options.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

FILES=10000; EMPTY=10000; REPS=3; VERSIONS="3 4.2"; KCLIENT=0; MOUNT=1
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES="$2"; shift ;;
        --empty) EMPTY="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --versions) VERSIONS="$2"; shift ;;
        --kclient) KCLIENT=1 ;;
        --no-mount) MOUNT=0 ;;
        --out) OUT="$2"; shift ;;
        *) sed -n '2,35p' "$0" >&2; exit 2 ;;
    esac
    shift
done
for v in $VERSIONS; do bench_nfs_version "$v"; done

if [ -n "${SLUICE_BIN:-}" ]; then BIN="$SLUICE_BIN"; export BENCH_SKIP_BUILD=1; fi
bench_init small-files
W="$BENCH_WORK"
for t in gcc tar fusermount3 git; do
    command -v "$t" >/dev/null || bench_die "$t not found (bash scripts/install-deps.sh)"
done
mkdir -p "$W/sluice" "$W/ganesha" "$W/local" "$W/mnt"

# The tree: `git archive HEAD` of this repository, its entries repeated under cNNN/ until
# FILES regular files are in (a source tree: mostly small text files, some directories deep).
git -C "$BENCH_ROOT" archive --format=tar HEAD > "$W/head.tar"
read -r TREE_FILES TREE_DIRS TREE_BYTES < <(python3 - "$W/head.tar" "$W/tree.tar" "$FILES" <<'PY'
import io, sys, tarfile
src, dst, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
with tarfile.open(src) as t:
    entries = [(m, t.extractfile(m).read() if m.isreg() else None)
               for m in t.getmembers() if m.isreg() or m.isdir()]
if not any(m.isreg() for m, _ in entries):
    sys.exit("no files in git archive")
files = dirs = size = 0
with tarfile.open(dst, "w", format=tarfile.GNU_FORMAT) as out:
    copy = 0
    while files < want:
        d = tarfile.TarInfo(f"c{copy:03d}"); d.type = tarfile.DIRTYPE; d.mode = 0o755
        out.addfile(d); dirs += 1
        for m, data in entries:
            if files >= want:
                break
            t = tarfile.TarInfo(f"c{copy:03d}/{m.name}")
            t.mode, t.mtime = m.mode, m.mtime
            if m.isdir():
                t.type = tarfile.DIRTYPE; out.addfile(t); dirs += 1
            else:
                t.size = len(data); out.addfile(t, io.BytesIO(data)); files += 1; size += len(data)
        copy += 1
print(files, dirs, size)
PY
)
[ "$TREE_FILES" -ge "$FILES" ] || bench_die "the tree has $TREE_FILES files, not $FILES"

# sfops create|stat|remove DIR N: one process, N empty files f0..f(N-1) in DIR; prints seconds.
# Static, so the busybox guest runs the same program.
cat > "$W/sfops.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: sfops create|stat|remove DIR N\n"); return 2; }
    const char *op = argv[1], *dir = argv[2]; long n = atol(argv[3]);
    char p[4096]; struct stat st; double t0 = now();
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%ld", dir, i);
        if (!strcmp(op, "create")) {
            int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
            if (fd < 0 || close(fd)) { perror(p); return 1; }
        } else if (!strcmp(op, "stat")) {
            if (stat(p, &st)) { perror(p); return 1; }
        } else if (!strcmp(op, "remove")) {
            if (unlink(p)) { perror(p); return 1; }
        } else { fprintf(stderr, "sfops: unknown op %s\n", op); return 2; }
    }
    printf("%.6f\n", now() - t0);
    return 0;
}
C
gcc -O2 -static -o "$W/sfops" "$W/sfops.c" || bench_die "gcc -static failed (libc6-dev?)"

# shellcheck disable=SC2086
start_sluice sluice "$W/sluice" ${SLUICE_SERVE_ARGS:-}
start_ganesha ganesha "$W/ganesha"
declare -A PORT=([sluice]=$SL_PORT [ganesha]=$GA_PORT)
declare -A MPORT=([sluice]=$SL_PORT [ganesha]=$((GA_PORT + 1)))
declare -A PID=([sluice]=$SL_PID [ganesha]=$GA_PID)
declare -A EXPORT=([sluice]="$W/sluice" [ganesha]="$W/ganesha")
PHASES="untar ls rm create stat remove"

# rpcs: the calls sluice has served so far (v3 calls + v4 COMPOUNDs, NULL left out).
rpcs() {
    "$BIN" stats --prometheus 127.0.0.1:"$SL_METRICS" | awk '
        /^sluice_nfs_calls_total\{/ && !/proc="NULL"/ { n += $2 }
        /^sluice_nfs4_calls_total\{proc="COMPOUND"\}/ { n += $2 }
        END { print n + 0 }'
}

declare -A T CPU RPC   # key: client.server.version.phase -> "v, v, " lists for medians
note() {   # KEY SECS CPU_TICKS RPCS
    T[$1]+="$2, "; CPU[$1]+="$(py "$3 / $CLK_TCK"), "; RPC[$1]+="$4, "
}

# ---- (a) sluice mount ------------------------------------------------------------------------
is_mounted() { grep -qs " $W/mnt fuse" /proc/self/mounts; }
unmount() {
    local i
    is_mounted || return 0
    fusermount3 -u "$W/mnt" 2>/dev/null || umount -l "$W/mnt" 2>/dev/null || true
    for i in $(seq 1 100); do is_mounted || break; sleep 0.05; done
    [ -n "${MOUNT_PID:-}" ] && { wait "$MOUNT_PID" 2>/dev/null || true; }
    MOUNT_PID=""
}
mount_fresh() {   # SERVER VERSION
    local url i
    unmount
    url="$(nfs_url "${EXPORT[$1]}" "${PORT[$1]}" "${MPORT[$1]}" "$2")"
    # shellcheck disable=SC2086
    "$BIN" mount ${SLUICE_MOUNT_ARGS:-} "$url" "$W/mnt" 2>>"$W/mount.log" &
    MOUNT_PID=$!
    for i in $(seq 1 200); do is_mounted && return 0; kill -0 "$MOUNT_PID" 2>/dev/null || break; sleep 0.05; done
    bench_die "sluice mount $url failed (see $W/mount.log)"
}
trap 'rc=$?; unmount; (exit $rc); bench_cleanup' EXIT

# timed KEY SERVER CMD...: runs CMD, notes wall time, the server's CPU and the RPCs it served.
timed() {
    local key="$1" srv="$2" t0 t1 c0 c1 r0 r1; shift 2
    r0=$(rpcs); c0=$(cpu_ticks "${PID[$srv]}"); t0=$(date +%s.%N)
    "$@" >/dev/null 2>>"$W/phase.err" || bench_die "$key: $* failed: $(tail -3 "$W/phase.err")"
    t1=$(date +%s.%N); c1=$(cpu_ticks "${PID[$srv]}"); r1=$(rpcs)
    [ "$srv" = sluice ] || r1=$r0   # ganesha's calls are not counted here
    note "$key" "$(py "$t1 - $t0")" $((c1 - c0)) $((r1 - r0))
}
untar_sync() { tar -xf "$W/tree.tar" -C "$1" && sync; }
ls_lr() { ls -lR "$1"; }
sfops_timed() {   # KEY SERVER OP DIR: like timed, with the helper's own clock
    local key="$1" srv="$2" c0 c1 r0 r1 secs
    r0=$(rpcs); c0=$(cpu_ticks "${PID[$srv]}")
    secs=$("$W/sfops" "$3" "$4" "$EMPTY") || bench_die "$key: sfops $3 failed"
    c1=$(cpu_ticks "${PID[$srv]}"); r1=$(rpcs)
    [ "$srv" = sluice ] || r1=$r0
    note "$key" "$secs" $((c1 - c0)) $((r1 - r0))
}

mount_rep() {   # SERVER VERSION REP
    local s="$1" v="$2" k="mount.$1.$2" d="$W/mnt/t$3" e="$W/mnt/e$3"
    mount_fresh "$s" "$v"; mkdir "$d" "$e"
    timed "$k.untar" "$s" untar_sync "$d"
    mount_fresh "$s" "$v"
    timed "$k.ls" "$s" ls_lr "$d"
    timed "$k.rm" "$s" rm -r "$d"
    sfops_timed "$k.create" "$s" create "$e"
    mount_fresh "$s" "$v"
    sfops_timed "$k.stat" "$s" stat "$e"
    sfops_timed "$k.remove" "$s" remove "$e"
    rmdir "$e"
    unmount
    echo "mount $s v$v rep $3: untar $(tail1 "$k.untar") ls $(tail1 "$k.ls") rm $(tail1 "$k.rm") create $(tail1 "$k.create") stat $(tail1 "$k.stat") remove $(tail1 "$k.remove")" >&2
}
tail1() { local l="${T[$1]%, }"; echo "${l##*, }s"; }

local_rep() {   # REP: the same work on the local file system (no server)
    local k="local.local.-" d="$W/local/t$1" e="$W/local/e$1" t0 t1
    mkdir "$d" "$e"
    for ph in untar ls rm; do
        t0=$(date +%s.%N)
        case $ph in untar) untar_sync "$d" ;; ls) ls_lr "$d" >/dev/null ;; rm) rm -r "$d" ;; esac
        t1=$(date +%s.%N)
        note "$k.$ph" "$(py "$t1 - $t0")" 0 0
    done
    for op in create stat remove; do note "$k.$op" "$("$W/sfops" "$op" "$e" "$EMPTY")" 0 0; done
    rmdir "$e"
}

# ---- (b) the kernel client in the guest --------------------------------------------------------
# The guest script: each phase between two markers (mark-N files in the export root, created by
# the guest; the host's watcher records the server's CPU ticks when each appears).
cat > "$W/guest.sh" <<'G'
set -e
kc_mount /mnt
mark() { : > "/mnt/mark-$1"; }
now() { cut -d' ' -f1 /proc/uptime; }
timed() {   # NAME CMD...
    local n="$1" t0 t1; shift
    mark "$n-a"; t0=$(now); "$@" > /dev/null; t1=$(now); mark "$n-b"
    echo "$n $t0 $t1" >> "$KC_OUT/times"
}
remount() { kc_umount /mnt; kc_mount /mnt; }
mkdir /mnt/t /mnt/e
timed untar sh -c 'tar -xf /kc/tree.tar -C /mnt/t && sync'
remount
timed ls ls -lR /mnt/t
timed rm rm -r /mnt/t
timed create /kc/sfops create /mnt/e "$SF_EMPTY"
remount
timed stat /kc/sfops stat /mnt/e "$SF_EMPTY"
timed remove /kc/sfops remove /mnt/e "$SF_EMPTY"
rmdir /mnt/e
rm -f /mnt/mark-*
kc_umount /mnt
G

# watch_marks DIR PID OUT: appends "NAME TICKS RPCS" to OUT whenever DIR/mark-NAME appears.
watch_marks() {
    python3 - "$@" "$BIN" "127.0.0.1:$SL_METRICS" <<'PY' &
import os, subprocess, sys, time
d, pid, out, binary, metrics = sys.argv[1:6]
seen = set()
def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
def rpcs():
    n = 0
    for l in subprocess.run([binary, "stats", "--prometheus", metrics], capture_output=True, text=True).stdout.splitlines():
        if (l.startswith("sluice_nfs_calls_total{") and 'proc="NULL"' not in l) or l.startswith('sluice_nfs4_calls_total{proc="COMPOUND"}'):
            n += int(float(l.split()[-1]))
    return n
while True:
    for name in os.listdir(d):
        if name.startswith("mark-") and name not in seen:
            seen.add(name)
            t = ticks(); r = rpcs()
            with open(out, "a") as f:
                f.write(f"{name[5:]} {t} {r}\n")
    time.sleep(0.005)
PY
    WATCH_PID=$!
    BENCH_PIDS+=("$WATCH_PID")
}

kclient_rep() {   # SERVER VERSION REP
    local s="$1" v="$2" k="kclient.$1.$2" run="$W/kc-$1-$2-$3" ph a b ta tb ca cb ra rb
    : > "$W/marks"
    watch_marks "${EXPORT[$s]}" "${PID[$s]}" "$W/marks"
    "$BENCH_ROOT/tests/peers/kclient/run.sh" -q -p "${PORT[$s]}" -m "${MPORT[$s]}" -e "${EXPORT[$s]}" \
        -v "$v" -O "$run" --env SF_EMPTY="$EMPTY" --file "$W/tree.tar" --file "$W/sfops" \
        "$W/guest.sh" > "$W/kclient.log" 2>&1 \
        || bench_die "kernel client run failed: see $run/console.log"
    kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null || true
    for ph in $PHASES; do
        read -r _ ta tb < <(grep "^$ph " "$run/out/times")
        read -r _ ca ra < <(grep "^$ph-a " "$W/marks") || bench_die "no marker $ph-a seen"
        read -r _ cb rb < <(grep "^$ph-b " "$W/marks") || bench_die "no marker $ph-b seen"
        # a marker is one CREATE (v3) or OPEN+CLOSE: the second marker's calls are left out
        [ "$s" = sluice ] || { ra=0; rb=0; }
        note "$k.$ph" "$(py "$tb - $ta")" $((cb - ca)) $((rb - ra))
    done
    echo "kclient $s v$v rep $3: $(for ph in $PHASES; do echo -n "$ph $(tail1 "$k.$ph") "; done)" >&2
}

# ---- the runs ----------------------------------------------------------------------------------
for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then order=(sluice ganesha); else order=(ganesha sluice); fi
    local_rep "$rep"
    for v in $VERSIONS; do
        for s in "${order[@]}"; do
            if [ "$MOUNT" = 1 ]; then mount_rep "$s" "$v" "$rep"; fi
            if [ "$KCLIENT" = 1 ]; then kclient_rep "$s" "$v" "$rep"; fi
        done
    done
done

# ---- the report --------------------------------------------------------------------------------
med() { py "st.median([${1%, }])"; }
per_file() { case $1 in create|stat|remove) echo "$EMPTY" ;; *) echo "$TREE_FILES" ;; esac; }
fmt_phase() {   # CLIENT VERSION PHASE: one table row
    local c="$1" v="$2" ph="$3" n ts tg cs cg rs lim
    n=$(per_file "$ph")
    ts=$(med "${T[$c.sluice.$v.$ph]}"); tg=$(med "${T[$c.ganesha.$v.$ph]}")
    cs=$(med "${CPU[$c.sluice.$v.$ph]}"); cg=$(med "${CPU[$c.ganesha.$v.$ph]}")
    rs=$(med "${RPC[$c.sluice.$v.$ph]}")
    lim=$(med "${T[local.local.-.$ph]}")
    case $ph in
        create|stat|remove)
            echo "| $ph | $(py "f'{$n / $ts:.0f}/s'") | $(py "f'{$n / $tg:.0f}/s'") | $(py "f'{$tg / $ts:.2f}'") | $(py "f'{$n / $lim:.0f}/s'") | $(py "f'{$cs * 1e6 / $n:.0f}'") | $(py "f'{$cg * 1e6 / $n:.0f}'") | $(py "f'{$cs / $cg:.2f}' if $cg > 0 else '-'") | $(py "f'{$rs / $n:.2f}'") |" ;;
        *)
            echo "| $ph | $(py "f'{$ts:.2f} s'") | $(py "f'{$tg:.2f} s'") | $(py "f'{$tg / $ts:.2f}'") | $(py "f'{$lim:.2f} s'") | $(py "f'{$cs * 1e6 / $n:.0f}'") | $(py "f'{$cg * 1e6 / $n:.0f}'") | $(py "f'{$cs / $cg:.2f}' if $cg > 0 else '-'") | $(py "f'{$rs / $n:.2f}'") |" ;;
    esac
}
goals() {   # CLIENT VERSION: the issue's goals for this client and version
    local c="$1" v="$2" ph r ok=() miss=() cs cg sum lsum
    for ph in untar ls rm; do
        r=$(py "st.median([${T[$c.ganesha.$v.$ph]%, }]) / st.median([${T[$c.sluice.$v.$ph]%, }])")
        if py "$r >= 1.5" | grep -q True; then ok+=("$ph ganesha/sluice $(py "f'{$r:.2f}'")"); else miss+=("$ph ganesha/sluice $(py "f'{$r:.2f}'") < 1.5"); fi
    done
    cs=0; cg=0
    for ph in $PHASES; do
        cs=$(py "$cs + st.median([${CPU[$c.sluice.$v.$ph]%, }])"); cg=$(py "$cg + st.median([${CPU[$c.ganesha.$v.$ph]%, }])")
    done
    r=$(py "$cs / $cg if $cg > 0 else 0")
    if py "0 < $r <= 0.5" | grep -q True; then ok+=("server CPU sluice/ganesha over all phases $(py "f'{$r:.2f}'")"); else miss+=("server CPU sluice/ganesha over all phases $(py "f'{$r:.2f}'") > 0.5"); fi
    if [ "$c" = mount ]; then
        sum=$(py "st.median([${T[$c.sluice.$v.untar]%, }]) + st.median([${T[$c.sluice.$v.rm]%, }])")
        lsum=$(py "st.median([${T[local.local.-.untar]%, }]) + st.median([${T[local.local.-.rm]%, }])")
        r=$(py "$sum / $lsum")
        if py "$r <= 3" | grep -q True; then ok+=("untar+sync+rm -r $(py "f'{$r:.1f}'")x local"); else miss+=("untar+sync+rm -r $(py "f'{$r:.1f}'")x local > 3x"); fi
    fi
    echo "Goals met: ${ok[*]:-none}."
    echo "Goals **missed**: ${miss[*]:-none}."
}

report() {
echo "# Small files and metadata: sluice serve vs nfs-ganesha, through the same client"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo "Tree: $TREE_FILES files ($(mib "$TREE_BYTES"), $TREE_DIRS directories; this repository's \`git archive HEAD\` repeated)."
echo "Empty files: $EMPTY in one directory. Reps: $REPS (medians; servers alternate order). ganesha: VFS FSAL, its own caching defaults."
echo "Columns: wall time (or files/s) through each server; ganesha/sluice of the times (> 1: sluice faster);"
echo "the local file system's (the limit); server CPU µs per file for each and sluice/ganesha;"
echo "RPCs per file the client sent to sluice (v3 calls or v4 COMPOUNDs)."
for c in mount kclient; do
    [ "$c" = mount ] && [ "$MOUNT" = 0 ] && continue
    [ "$c" = kclient ] && [ "$KCLIENT" = 0 ] && continue
    for v in $VERSIONS; do
        echo
        if [ "$c" = mount ]; then echo "## sluice mount (FUSE), NFS $v"; else echo "## Linux kernel client in the qemu guest (TCG: relative figures only), NFS $v"; fi
        echo
        echo "| phase | sluice | ganesha | ganesha/sluice | local | sluice CPU µs/file | ganesha CPU µs/file | CPU sluice/ganesha | RPCs/file (sluice) |"
        echo "|---|---|---|---|---|---|---|---|---|"
        for ph in $PHASES; do fmt_phase "$c" "$v" "$ph"; done
        echo
        goals "$c" "$v"
    done
done
echo
echo "Raw times (s), per rep in order:"
echo
for k in $(printf '%s\n' "${!T[@]}" | sort); do echo "- $k: ${T[$k]%, }"; done
}

if [ -n "$OUT" ]; then report | tee "$OUT"; else report; fi
