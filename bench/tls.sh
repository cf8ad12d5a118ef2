#!/usr/bin/env bash
# Issue 28 benchmark: RPC-with-TLS (RFC 9289) against plaintext, the same client (`sluice
# bench`) and the same `sluice serve` (started once with --tls-cert/--tls-key: plaintext and
# TLS clients share its port), side by side in one run. Per NFS version and rep, in this order
# for each transport (plaintext and TLS alternating which goes first from rep to rep):
#
#   write   cold  new file (old one removed, page cache dropped):
#                 sluice bench --workload write --size 1G --block 1M --depth 16, then COMMIT
#   read    warm  --workload read of that file (in the server's page cache: the transport, not
#                 the disk, is what differs)
#
# Reported per version and phase: medians over reps of MB/s plaintext and TLS, TLS/plaintext
# (median of the per-rep ratios: the two transports of a rep ran back to back), and CPU seconds
# per GiB moved of the server (utime+stime of the server process from /proc/PID/stat) and of the
# client (`sluice bench`'s own client_cpu_s) for both. Issue 28's goals: TLS throughput >= 0.8 of
# plaintext on loopback, and >= 0.95 where kernel TLS is available. Whether this kernel has kernel
# TLS is checked (`modprobe tls`, then a TCP_ULP "tls" setsockopt on a loopback socket) and
# recorded; sluice hands the record layer to the kernel where it can (crates/tcp/src/ktls.rs),
# else rustls carries it (crates/tcp/src/tls.rs). Every
# TLS run must report tls=TLSv1_3:... and every plaintext one tls=none, or the script stops.
#
# Certificates: a throw-away CA and a server certificate for 127.0.0.1 (EC P-256) made with the
# openssl command line in the work directory.
#
#   bench/tls.sh [--size 1G] [--reps 3] [--warmup 1] [--nconnect N] [--nfs-versions "3 4.1"]
#                [--cc NAME] [--out FILE]
#
# Env: SLUICE_SERVE_ARGS adds options to `sluice serve`; BENCH_KEEP=1, BENCH_SKIP_BUILD=1,
# SLUICE_BIN=PATH (see lib.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SIZE=1G; REPS=3; WARMUP=1; OUT=""; CC=""; NCONNECT=1; VERSIONS="3 4.1"
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --warmup) WARMUP="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --cc) CC="$2"; shift ;;
        --nconnect) NCONNECT="$2"; shift ;;
        --nfs-versions) VERSIONS="$2"; shift ;;
        *) sed -n '2,29p' "$0" >&2; exit 2 ;;
    esac
    shift
done

bench_init tls
for v in $VERSIONS; do bench_nfs_version "$v"; done
command -v openssl >/dev/null || bench_die "openssl not found"
W="$BENCH_WORK"
mkdir -p "$W/sl" "$W/pki"
if [ -n "$CC" ]; then bench_tcp_cc "$CC"; fi

# --- kernel TLS: is it there at all? ---------------------------------------------------------
ktls_check() {
    local modprobe
    if command -v modprobe >/dev/null; then
        if modprobe tls 2>"$W/modprobe.err"; then modprobe="\`modprobe tls\` succeeded"
        else modprobe="\`modprobe tls\` failed: $(head -c 200 "$W/modprobe.err" | tr '\n' ' ')"; fi
    else
        modprobe="no modprobe command"
    fi
    # The definitive test: attach the "tls" upper-layer protocol to a connected TCP socket, what
    # any kTLS user does first (TCP_ULP is 31 in linux/tcp.h). ENOENT: no tls module.
    local ulp
    ulp=$(python3 - <<'EOF'
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
try:
    c.setsockopt(socket.IPPROTO_TCP, 31, b"tls")
    print("available (TCP_ULP \"tls\" accepted)")
except OSError as e:
    print("not available (TCP_ULP \"tls\": %s)" % e.strerror)
EOF
    )
    local config=""
    if [ -r /proc/config.gz ]; then config="; $(zcat /proc/config.gz | grep -E '^(# )?CONFIG_TLS[ =]' | head -1)"; fi
    echo "kernel TLS on $(uname -r): $ulp; $modprobe$config"
}
KTLS=$(ktls_check)
echo "$KTLS" >&2

# --- certificates -----------------------------------------------------------------------------
P="$W/pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=sluice-bench-ca -keyout "$P/ca.key" -out "$P/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj /CN=127.0.0.1 -keyout "$P/server.key" -out "$P/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$P/ext.cnf"
openssl x509 -req -in "$P/server.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
    -days 2 -extfile "$P/ext.cnf" -out "$P/server.pem" 2>/dev/null \
    || bench_die "openssl could not sign the server certificate"

LOOP_BPS=$(iperf3_rate)
# shellcheck disable=SC2086
start_sluice sl "$W/sl" --tls-cert "$P/server.pem" --tls-key "$P/server.key" ${SLUICE_SERVE_ARGS:-}
echo "server: sluice :$SL_PORT (pid $SL_PID)" >&2

# url V MODE NAME: the URL of NAME in the export over NFS V, plaintext or TLS
url() {
    local u
    u=$(nfs_url "$W/sl/$3" "$SL_PORT" "$SL_PORT" "$1")
    if [ "$2" = tls ]; then echo "$u&xprtsec=tls"; else echo "$u"; fi
}
BENCH_ARGS=(--block 1M --depth 16 --nconnect "$NCONNECT" --tls-ca "$P/ca.pem")

PHASES=(write read)
declare -A RATE SCPU CCPU
RAW=""
one_mode() {   # V plain|tls REP
    local v=$1 m=$2 rep=$3 u ph tls gib
    rm -f "$W/sl/f.$m"
    u=$(url "$v" "$m" "f.$m")
    for ph in "${PHASES[@]}"; do
        case $ph in
            write) drop_caches
                   bench_run r "$SL_PID" "$u" --workload write --size "$SIZE" "${BENCH_ARGS[@]}" ;;
            read)  bench_run r "$SL_PID" "$u" --workload read --size "$SIZE" "${BENCH_ARGS[@]}" ;;
        esac
        tls=$(kv tls "$r_line")
        case "$m:$tls" in
            tls:TLSv1_3:*|plain:none) ;;
            *) bench_die "a $m run reported tls=$tls: $r_line" ;;
        esac
        gib=$(py "$r_bytes / 2**30")
        RATE[$v.$m.$ph]+="$r_rate "
        SCPU[$v.$m.$ph]+="$(py "$r_cpu / $gib") "
        CCPU[$v.$m.$ph]+="$(py "$(kv client_cpu_s "$r_line") / $gib") "
        RAW+="| $v | $rep | $m | $ph | $r_line | $r_cpu |"$'\n'
    done
}
for v in $VERSIONS; do
    for w in $(seq 1 "$WARMUP"); do
        echo "NFSv$v warm-up $w" >&2
        for m in plain tls; do
            rm -f "$W/sl/f.warm"
            drop_caches
            bench_run r "$SL_PID" "$(url "$v" "$m" f.warm)" --workload write --size "$SIZE" "${BENCH_ARGS[@]}"
        done
    done
    for rep in $(seq 1 "$REPS"); do
        if [ $((rep % 2)) = 1 ]; then order="plain tls"; else order="tls plain"; fi
        echo "NFSv$v rep $rep: $order" >&2
        for m in $order; do one_mode "$v" "$m" "$rep"; done
    done
done
LOOP_BPS2=$(iperf3_rate)
CIPHER=$(kv tls "$(printf '%s' "$RAW" | grep -m1 -o 'tls=TLSv1_3[^ |]*')")

arr() { echo "[${1// /,}]"; }
med() { py "f'{st.median($(arr "$1")):.$2f}'"; }   # VALUES DIGITS
{
echo "# RPC-with-TLS vs plaintext: sequential 1 MiB write and read against sluice serve (issue 28)"
echo
echo "Date: $(date -u +%Y-%m-%d). Machine: $(machine_line)."
echo
echo "One \`sluice serve --tls-cert --tls-key ${SLUICE_SERVE_ARGS:-}\` serving both transports on one port; client \`sluice bench\`, $SIZE in 1 MiB calls, 16 in flight, $NCONNECT TCP connection(s), with and without \`xprtsec=tls\` (negotiated: $CIPHER; a trailing \`:ktls\` means the kernel carried the records, else rustls in user space)."
echo "Phases per transport: write (**cold**: new file, old one removed, page cache dropped; ends with COMMIT) -> read (**warm**: the file is in the server's page cache)."
echo "$REPS reps after $WARMUP untimed warm-up write(s) per transport and version, transport order alternating; medians over reps."
echo "CPU: server utime+stime (/proc/PID/stat) and client CPU (\`client_cpu_s\`) per GiB moved. Loopback single-stream limit (iperf3, before/after): $(py "f'{$LOOP_BPS/1e6:.0f}'") / $(py "f'{$LOOP_BPS2/1e6:.0f}'") MB/s."
echo
echo "$KTLS."
echo "Goals: TLS >= 0.8 of plaintext on loopback (checked below); >= 0.95 with kernel TLS, which sluice uses on both ends where the kernel has it (the line above says whether this kernel does; without it the figures are rustls's)."
echo
echo "| NFS | phase | plaintext MB/s | TLS MB/s | TLS / plaintext | goal >= 0.8 | server CPU s/GiB plain | server CPU s/GiB TLS | client CPU s/GiB plain | client CPU s/GiB TLS |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for v in $VERSIONS; do
    for ph in "${PHASES[@]}"; do
        rp=$(arr "${RATE[$v.plain.$ph]}"); rt=$(arr "${RATE[$v.tls.$ph]}")
        ratio=$(py "st.median([t/p for p, t in zip($rp, $rt)])")
        echo "| $v | $ph | $(py "f'{st.median($rp)/1e6:.0f}'") | $(py "f'{st.median($rt)/1e6:.0f}'") | $(py "f'{$ratio:.2f}'") | $(py "'met' if $ratio >= 0.8 else '**missed**'") | $(med "${SCPU[$v.plain.$ph]}" 2) | $(med "${SCPU[$v.tls.$ph]}" 2) | $(med "${CCPU[$v.plain.$ph]}" 2) | $(med "${CCPU[$v.tls.$ph]}" 2) |"
    done
done
echo
echo "## Raw"
echo
echo "| NFS | rep | transport | phase | sluice bench output | server CPU s |"
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
