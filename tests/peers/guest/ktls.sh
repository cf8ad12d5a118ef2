# Guest script (busybox sh, run by ../kclient.sh in the KC_SUITE=trixie guest: kernel 6.12 with
# the `tls` module; kc-lib.sh is already sourced). Kernel TLS in the sluice server: the server
# AND the client both run inside the guest, on the guest's own 127.0.0.1, so the server's
# sockets are the guest kernel's, which has kTLS (the host's kernel may not).
#
# For each mode of KT_MODES, in turn: `sluice serve` on a fresh export, one `sluice cp` up
# (KT_MIB MiB of random data) and KT_READS `sluice cp` down, each timed, each read back compared
# by SHA-256; then the server's counters (`sluice stats --prometheus` and the text form) and
# /proc/net/tls_stat are saved, and the server is stopped.
#   plain   no TLS at all (the baseline)
#   ktls    --tls-cert/--tls-key, ?xprtsec=tls: server and client (sluice cp) hand the record
#           layer to the kernel after the handshake (KT_CLIENT_KTLS=0: the client stays on rustls)
#   rustls  the same with SLUICE_KTLS=0 in the server's and the client's environment: rustls
#           does the records at both ends
#   mixed   the server on rustls (SLUICE_KTLS=0), the client on kernel TLS: the client's kernel
#           receives the server's session tickets after the handshake (the client skips them)
#
# Guest environment (run.sh --env K=V):
#   KT_MODES   modes, space separated                  [plain ktls rustls mixed]
#   KT_MIB     the file's size in MiB                  [32]
#   KT_READS   timed reads per mode                    [3]
#   KT_PKI     ca.pem, server.pem, server.key (a certificate for 127.0.0.1)   [/kc/pki]
#   KT_CLIENT_KTLS  0: the client keeps rustls in the ktls mode too          [1]
# Needs /kc/sluice (run.sh --file), and /kc/lib/ with the shared objects it needs that the
# initramfs lacks (libgcc_s.so.1), if any.
# Saved for the host, in out/: MODE-metrics.txt, MODE-stats.txt, MODE-serve.log,
# MODE-tls_stat-before.txt / -after.txt, and times.txt: one line per timed copy,
# "MODE up|down SECONDS" (centisecond resolution, from /proc/uptime). Prints "KT PASS MODE"
# or "KT FAIL MODE: why" per mode and exits non-zero if anything failed.

SL=/kc/sluice
PKI="${KT_PKI:-/kc/pki}"
MIB="${KT_MIB:-32}"
READS="${KT_READS:-3}"
RC=0
[ -d /kc/lib ] && export LD_LIBRARY_PATH=/kc/lib

now_cs() { awk '{ printf "%d\n", $1 * 100 }' /proc/uptime; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", (b - a) / 100 }'; }

modprobe tls || { echo "KT FAIL modprobe tls"; exit 1; }
kc_log "tls module loaded"
dd if=/dev/urandom of=/tmp/src.bin bs=1M count="$MIB" 2>/dev/null
SUM="$(sha256sum /tmp/src.bin | cut -d' ' -f1)"
: > "$KC_OUT/times.txt"

port=20049
for mode in ${KT_MODES:-plain ktls rustls mixed}; do
    port=$((port + 1))
    mport=$((port + 1000))
    exp="/tmp/export-$mode"
    mkdir -p "$exp" "/tmp/state-$mode"
    kc_log "== $mode"
    cat /proc/net/tls_stat > "$KC_OUT/$mode-tls_stat-before.txt"
    case "$mode" in
        plain) tlsflags="" query="version=3" ktls=1 cktls=1 ;;
        ktls) tlsflags="--tls-cert $PKI/server.pem --tls-key $PKI/server.key" query="version=3&xprtsec=tls"
              ktls=1 cktls="${KT_CLIENT_KTLS:-1}" ;;
        rustls) tlsflags="--tls-cert $PKI/server.pem --tls-key $PKI/server.key" query="version=3&xprtsec=tls"
                ktls=0 cktls=0 ;;
        mixed) tlsflags="--tls-cert $PKI/server.pem --tls-key $PKI/server.key" query="version=3&xprtsec=tls"
               ktls=0 cktls=1 ;;
        *) echo "KT FAIL $mode: unknown mode"; RC=1; continue ;;
    esac
    # shellcheck disable=SC2086  # tlsflags: words on purpose
    SLUICE_KTLS=$ktls RUST_LOG=info "$SL" serve "$exp" --listen "127.0.0.1:$port" \
        --metrics "127.0.0.1:$mport" --state-dir "/tmp/state-$mode" --no-root-squash $tlsflags \
        > "$KC_OUT/$mode-serve.log" 2>&1 &
    spid=$!
    up=0
    for _ in $(seq 1 300); do
        if "$SL" stats "127.0.0.1:$mport" > /dev/null 2>&1; then up=1; break; fi
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    if [ "$up" != 1 ]; then
        echo "KT FAIL $mode: the server did not come up"; RC=1
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
        continue
    fi
    url="nfs://127.0.0.1:$port$exp/big.bin?$query"
    fail=""
    t0="$(now_cs)"
    # --stats: the client's own account of its connections (kernel TLS, rustls or plaintext).
    if SLUICE_KTLS=$cktls "$SL" cp --stats --tls-ca "$PKI/ca.pem" /tmp/src.bin "$url" > "$KC_OUT/$mode-cp.log" 2>&1; then
        echo "$mode up $(secs "$t0" "$(now_cs)")" >> "$KC_OUT/times.txt"
    else
        fail="cp up failed"
    fi
    [ -z "$fail" ] && [ "$(sha256sum "$exp/big.bin" | cut -d' ' -f1)" != "$SUM" ] \
        && fail="the export's copy differs"
    i=0
    while [ -z "$fail" ] && [ "$i" -lt "$READS" ]; do
        i=$((i + 1))
        rm -f /tmp/back.bin
        t0="$(now_cs)"
        if SLUICE_KTLS=$cktls "$SL" cp --tls-ca "$PKI/ca.pem" "$url" /tmp/back.bin >> "$KC_OUT/$mode-cp.log" 2>&1; then
            echo "$mode down $(secs "$t0" "$(now_cs)")" >> "$KC_OUT/times.txt"
        else
            fail="cp down $i failed"
        fi
        [ -z "$fail" ] && [ "$(sha256sum /tmp/back.bin | cut -d' ' -f1)" != "$SUM" ] \
            && fail="read $i differs"
    done
    "$SL" stats --prometheus "127.0.0.1:$mport" > "$KC_OUT/$mode-metrics.txt" 2>&1
    "$SL" stats "127.0.0.1:$mport" > "$KC_OUT/$mode-stats.txt" 2>&1
    cat /proc/net/tls_stat > "$KC_OUT/$mode-tls_stat-after.txt"
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    rm -rf "$exp" /tmp/back.bin
    if [ -z "$fail" ]; then echo "KT PASS $mode"; else echo "KT FAIL $mode: $fail"; RC=1; fi
done
kc_log "done with ktls"
exit $RC
