# kc-lib.sh: helpers sourced before every guest script (busybox sh).
#
# From ../run.sh (through /kc/env) and /init:
#   KC_SERVER   the server as the guest sees it (10.0.2.2)   KC_GUEST_ADDR  the guest's address
#   KC_PORT     NFS port         KC_MOUNTPORT  MOUNT port     KC_EXPORT  export path
#   KC_VERS     3 | 4.1 | ...    KC_OPTS       extra mount options (comma separated)
#   KC_OUT      a folder that comes back to the host (RUN/out)
# Set by the guest script (or run.sh --env):
#   KC_LOCK=1   v3 mounts with locking (no nolock; start kc_nsm first)    [0: nolock]
#   KC_STATD_PORT, KC_NLM_PORT   kc_nsm's fixed statd and lockd ports (the host forwards the
#               same port numbers with run.sh --fwd, so a server's calls reach them)

kc_log() { echo "[kc $(cut -d' ' -f1 /proc/uptime)] $*"; }

# kc_opts [EXTRA]: the NFS mount options for $KC_VERS
kc_opts() {
    local o
    case "${KC_VERS:-3}" in
        2|3) o="vers=$KC_VERS,proto=tcp,port=$KC_PORT,mountport=${KC_MOUNTPORT:-$KC_PORT}"
             o="$o,mountproto=tcp"
             [ "${KC_LOCK:-0}" = 1 ] || o="$o,nolock"
             o="$o,addr=$KC_SERVER" ;;
        4*)  o="vers=$KC_VERS,proto=tcp,port=$KC_PORT,addr=$KC_SERVER,clientaddr=$KC_GUEST_ADDR" ;;
        *)   echo "kc_opts: unknown KC_VERS=$KC_VERS" >&2; return 1 ;;
    esac
    [ -n "${KC_OPTS:-}" ] && o="$o,$KC_OPTS"
    [ -n "${1:-}" ] && o="$o,$1"
    echo "$o"
}

# kc_mount [MNT] [EXTRA_OPTS]: mount $KC_SERVER:$KC_EXPORT on MNT (/mnt)
kc_mount() {
    local mnt="${1:-/mnt}" o
    o="$(kc_opts "${2:-}")" || return 1
    mkdir -p "$mnt"
    kc_log "mount -t nfs -o $o $KC_SERVER:$KC_EXPORT $mnt"
    kcmount nfs "$KC_SERVER:$KC_EXPORT" "$mnt" "$o"
}

kc_umount() { umount "${1:-/mnt}"; }

# kc_mountstats [MNT]: that mount's block of /proc/self/mountstats
kc_mountstats() {
    awk -v m="${1:-/mnt}" '/^device / { on = ($5 == m) } on { print }' /proc/self/mountstats
}

kc_dropcaches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# kc_save NAME: stdin to $KC_OUT/NAME, which comes back to the host
kc_save() { cat > "$KC_OUT/$1"; }

# kc_tlshd CA [CERT KEY]: (re)starts tlshd, the kernel's TLS handshake agent (a guest built
# with KC_SUITE=trixie has it), with a fresh /etc/tlshd.conf: CA is the trust store for servers,
# CERT/KEY the certificate presented when a mount asks for mutual TLS (xprtsec=mtls). Its log
# (one "Handshake with ... was successful" or "... failed" line per handshake) is appended to
# $KC_OUT/tlshd.log. Returns once tlshd has read its configuration (bounded: 10 s).
kc_tlshd() {
    local i n0
    command -v tlshd >/dev/null \
        || { echo "kc_tlshd: no tlshd in this guest (build it with KC_SUITE=trixie)" >&2; return 1; }
    if [ -n "${KC_TLSHD_PID:-}" ]; then
        kill "$KC_TLSHD_PID" 2>/dev/null
        wait "$KC_TLSHD_PID" 2>/dev/null
    fi
    modprobe tls || return 1
    {
        echo "[debug]"
        echo "loglevel=3"   # the readiness wait below reads its debug lines
        echo "tls=0"
        echo "nl=0"
        echo "[authenticate.client]"
        echo "x509.truststore=$1"
        if [ -n "${2:-}" ]; then
            echo "x509.certificate=$2"
            echo "x509.private_key=$3"
        fi
    } > /etc/tlshd.conf
    touch "$KC_OUT/tlshd.log"
    n0=$(grep -c 'x.509 priority string' "$KC_OUT/tlshd.log")
    tlshd -s -c /etc/tlshd.conf >> "$KC_OUT/tlshd.log" 2>&1 &
    KC_TLSHD_PID=$!
    # tlshd prints its TLS priority strings after reading the configuration, just before it
    # waits for the kernel's handshake requests.
    i=0
    while [ "$(grep -c 'x.509 priority string' "$KC_OUT/tlshd.log")" = "$n0" ] && [ $i -lt 100 ]; do
        kill -0 "$KC_TLSHD_PID" 2>/dev/null || { echo "kc_tlshd: tlshd exited" >&2; return 1; }
        sleep 0.1; i=$((i + 1))
    done
    [ $i -lt 100 ] || { echo "kc_tlshd: tlshd not ready after 10 s" >&2; return 1; }
}

# kc_nsm: starts rpcbind and rpc.statd (the default Debian 12 guest has them) for v3 mounts
# with locking (KC_LOCK=1): the kernel's lockd registers with rpcbind and asks statd to
# monitor the server, whose SM_NOTIFY after a restart reaches statd, which tells lockd to
# reclaim. statd listens on KC_STATD_PORT and lockd on KC_NLM_PORT (both TCP and UDP) when
# set, so a host can forward fixed ports to them. statd runs in the foreground with debug
# output to $KC_OUT/statd.log ("Received SM_NOTIFY ..." lines), rpcbind's goes to
# $KC_OUT/rpcbind.log. Returns once statd is registered with rpcbind (bounded: 20 s).
kc_nsm() {
    local i
    for b in rpcbind rpc.statd rpcinfo; do
        command -v $b >/dev/null \
            || { echo "kc_nsm: no $b in this guest (the default Debian 12 guest has it)" >&2; return 1; }
    done
    mkdir -p /var /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak
    [ -e /var/run ] || ln -s /run /var/run
    chown _rpc /run/rpcbind
    modprobe lockd || return 1
    if [ -n "${KC_NLM_PORT:-}" ]; then
        echo "$KC_NLM_PORT" > /proc/sys/fs/nfs/nlm_tcpport || return 1
        echo "$KC_NLM_PORT" > /proc/sys/fs/nfs/nlm_udpport || return 1
    fi
    rpcbind -f -w >> "$KC_OUT/rpcbind.log" 2>&1 &
    i=0
    until rpcinfo -p 127.0.0.1 >/dev/null 2>&1; do
        [ $i -lt 200 ] || { echo "kc_nsm: rpcbind not answering after 20 s" >&2; return 1; }
        sleep 0.1; i=$((i + 1))
    done
    # -L: no sm-notify at start (this guest has no peers from a previous boot)
    rpc.statd -F -d -L ${KC_STATD_PORT:+-p "$KC_STATD_PORT"} >> "$KC_OUT/statd.log" 2>&1 &
    i=0
    until rpcinfo -p 127.0.0.1 2>/dev/null | grep -q '^ *100024 '; do
        [ $i -lt 200 ] || { echo "kc_nsm: rpc.statd not registered after 20 s" >&2; return 1; }
        sleep 0.1; i=$((i + 1))
    done
    kc_log "rpcbind and rpc.statd up: $(rpcinfo -p 127.0.0.1 | grep -c .) registrations"
}
