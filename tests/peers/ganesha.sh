#!/usr/bin/env bash
# nfs-ganesha as a private, loopback-only reference NFS server for interop tests.
#
#   ganesha.sh start DIR PORT STATE_DIR   export DIR (v3 + v4) with NFS on 127.0.0.1:PORT and
#                                         MOUNT on 127.0.0.1:PORT+1; returns once it answers
#   ganesha.sh stop STATE_DIR             kill everything `start` started (idempotent)
#   ganesha.sh status STATE_DIR           exit 0 if running
#
# DIR may be `ceph:PATH`: the directory PATH of a Ceph file system, served by ganesha's
# FSAL_CEPH (Debian package nfs-ganesha-ceph) through libcephfs, with GANESHA_CEPH_CONF=FILE
# (the cluster's ceph.conf, required), GANESHA_CEPH_FS=NAME and GANESHA_CEPH_ID=ID (default:
# the cluster's default file system, client.admin). Clients mount PATH, as with sluice's
# `ceph:PATH` exports; PATH must exist in the Ceph file system.
#
# Layout: ganesha refuses to start without registering with
# rpcbind, and Debian's rpcbind cannot be limited to loopback. So `start` runs, in a new
# mount + pid namespace whose /run is a fresh tmpfs:
#   - `rpcbind -f` inside an additional, empty network namespace (it opens no port anywhere;
#     ganesha reaches it through the unix socket /run/rpcbind.sock, which is namespace-private);
#   - `ganesha.nfsd -F` (foreground) in the machine's network namespace, bound to 127.0.0.1.
# Nothing listens on port 111. Clients must be given the MOUNT port explicitly.
# Killing the namespace's init (our `_inner` shell, pid 1 there) makes the kernel kill every
# process of the namespace, so `stop` is reliable even after a crashed test.
#
# STATE_DIR gets: ganesha.conf, ganesha.log, ganesha.pid (pid inside the namespace),
# unshare.pid (host pid of the namespace holder), inner.log, recovery/, args.
# Environment: GANESHA_START_TIMEOUT (s, default 60), GANESHA_LEASE (s, default 10),
# GANESHA_MINOR_VERSIONS (NFSv4 minor versions served, e.g. "1"; default ganesha's own),
# GANESHA_CACHING=1 (benchmarks: keep ganesha's own attribute/dirent caching defaults instead of
# the test default that turns them off so host-side changes are visible at once; the test
# default is also what Ceph's documentation configures for FSAL_CEPH, whose libcephfs caches
# under the MDS's capabilities already).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
die() { echo "ganesha.sh: ERROR: $*" >&2; exit 1; }
usage() { sed -n '2,8p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found (run scripts/install-deps.sh)"; }

# pid of the live namespace holder (our `unshare ... _inner STATE`) for STATE, or nothing.
# The pidfile is the fast path; if it is gone (crashed run, wiped file) /proc is searched for
# the exact command line, so a restart never trips over an orphan of an earlier run.
is_holder() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null \
    | grep -qE "^unshare .*ganesha\.sh _inner $2  ?\$"; }
holder_pid() {
    local st="$1" pid f
    pid="$(cat "$st/unshare.pid" 2>/dev/null || true)"
    if [ -n "$pid" ] && is_holder "$pid" "$st"; then echo "$pid"; return 0; fi
    for f in /proc/[0-9]*; do
        pid="${f#/proc/}"
        is_holder "$pid" "$st" && { echo "$pid"; return 0; }
    done
    return 0
}

# host pids of all descendants of $1 (ppid walk over /proc; no procps needed)
descendants() {
    local all
    all="$(for f in /proc/[0-9]*/stat; do
        # comm (field 2) may contain spaces: strip through the last ')'
        { read -r line < "$f"; } 2>/dev/null || continue
        rest="${line##*) }"; set -- $rest; echo "${f//[^0-9]/} $2"
    done)"
    echo "$all" | awk -v root="$1" '{ kids[$2] = kids[$2] " " $1 }
        END { n = split(kids[root], q, " "); while (n > 0) { p = q[n--]; print p;
              m = split(kids[p], c, " "); for (i = 1; i <= m; i++) q[++n] = c[i] } }'
}

# true if pid $1 exists and is not a zombie (an orphaned holder is reaped by whatever init
# the machine has, which may be slow or never: a zombie counts as gone)
alive() {
    local line
    { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
    line="${line##*) }"
    [ "${line:0:1}" != Z ]
}

do_stop() {
    local st="$1" pid i kids k
    [ -d "$st" ] || return 0
    st="$(cd "$st" && pwd -P)"
    pid="$(holder_pid "$st")"
    if [ -n "$pid" ]; then
        kids="$(descendants "$pid")"
        # unshare --kill-child: when it dies its child (pid 1 of the namespace) gets SIGKILL,
        # and the kernel then kills every process of that pid namespace. (unshare --fork
        # ignores SIGTERM, and a test peer needs no graceful shutdown: SIGKILL right away.)
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && die "could not kill namespace holder $pid"
        # the namespace's processes die asynchronously: wait (bounded) until they are gone
        for k in $kids; do
            for i in $(seq 1 100); do alive "$k" || break; sleep 0.1; done
            alive "$k" && die "process $k of the ganesha namespace survived"
        done
    fi
    rm -f "$st/unshare.pid" "$st/ganesha.pid"
}

# Runs as pid 1 of the new pid + mount namespace (via unshare, see do_start).
do_inner() {
    local st="$1" conf rb_pid g_pid i
    conf="$st/ganesha.conf"
    mount -t tmpfs -o mode=0755,size=16m sluice-ganesha-run /run
    mkdir -p /run/ganesha /run/rpcbind
    # rpcbind in an empty network namespace: only the unix socket is usable
    unshare --net -- rpcbind -f >>"$st/rpcbind.log" 2>&1 &
    rb_pid=$!
    for i in $(seq 1 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.05; done
    [ -S /run/rpcbind.sock ] || { echo "rpcbind did not create /run/rpcbind.sock" >&2; exit 1; }
    ganesha.nfsd -F -f "$conf" -L "$st/ganesha.log" -p "$st/ganesha.pid" -N NIV_EVENT \
        >>"$st/inner.log" 2>&1 &
    g_pid=$!
    # exit (and so kill the namespace) as soon as ganesha exits
    wait "$g_pid"
    echo "ganesha.nfsd exited with $?" >&2
    exit 1
}

# The FSAL block of the export: VFS on a local directory, CEPH on `ceph:PATH`.
fsal_conf() {   # DIR
    case "$1" in
        ceph:*)
            echo "FSAL { Name = CEPH;${GANESHA_CEPH_FS:+ Filesystem = \"$GANESHA_CEPH_FS\";}${GANESHA_CEPH_ID:+ User_Id = \"$GANESHA_CEPH_ID\";} }" ;;
        *) echo "FSAL { Name = VFS; }" ;;
    esac
}

nfs_path() { echo "${1#ceph:}"; }   # DIR: the path clients mount

write_conf() {
    local dir="$1" port="$2" st="$3" mdcache attr minors="" path ceph=""
    if [ -n "${GANESHA_MINOR_VERSIONS:-}" ]; then
        minors="Minor_Versions = ${GANESHA_MINOR_VERSIONS};"
    fi
    mkdir -p "$st/recovery"
    # no attribute caching by default: files the host changes behind ganesha's back (test
    # set-up, host-side mkdir/rename/rm) must be visible to the clients at once. That costs
    # ganesha a refresh per operation, so benchmarks ask for ganesha's defaults instead.
    if [ "${GANESHA_CACHING:-0}" = 1 ]; then
        mdcache="# GANESHA_CACHING=1: ganesha's default MDCACHE"
        attr="# GANESHA_CACHING=1: ganesha's default Attr_Expiration_Time"
    else
        mdcache="MDCACHE { Dir_Chunk = 0; }"
        attr="Attr_Expiration_Time = 0;"
    fi
    path="$(nfs_path "$dir")"
    case "$dir" in
        ceph:*) ceph="CEPH { Ceph_Conf = \"$GANESHA_CEPH_CONF\"; }" ;;
    esac
    cat > "$st/ganesha.conf" <<EOF
# written by tests/peers/ganesha.sh
NFS_CORE_PARAM {
    Bind_addr = 127.0.0.1;
    NFS_Port = $port;
    MNT_Port = $((port + 1));
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Protocols = 3, 4;
    Enable_UDP = false;
}
NFSV4 {
    Graceless = true;
    Lease_Lifetime = ${GANESHA_LEASE:-10};
    $minors
    RecoveryBackend = fs;
    RecoveryRoot = "$st/recovery";
}
NFS_KRB5 { Active_krb5 = false; }
$mdcache
$ceph
EXPORT {
    Export_Id = 1;
    Path = "$path";
    Pseudo = "$path";
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3, 4;
    Transports = TCP;
    $attr
    $(fsal_conf "$dir")
}
EOF
}

answers() {   # DIR PORT
    timeout -k 1 3 nfs-ls "nfs://127.0.0.1$(nfs_path "$1")?version=3&nfsport=$2&mountport=$(($2 + 1))" \
        >/dev/null 2>&1
}

port_busy() {   # prints the listener line if 127.0.0.1:PORT or *:PORT is taken
    ss -Htln "( sport = :$1 )" 2>/dev/null | head -1
}

do_start() {
    local dir="$1" port="$2" st="$3" pid i t0 deadline busy
    need ganesha.nfsd; need rpcbind; need unshare; need nfs-ls; need ss
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1024 ] && [ "$port" -le 65534 ] \
        || die "PORT must be 1024..65534 (MOUNT uses PORT+1), got '$port'"
    case "$dir" in
        ceph:/*)
            [ -n "${GANESHA_CEPH_CONF:-}" ] || die "a ceph: export needs GANESHA_CEPH_CONF=the cluster's ceph.conf"
            [ -r "$GANESHA_CEPH_CONF" ] || die "GANESHA_CEPH_CONF: cannot read $GANESHA_CEPH_CONF"
            GANESHA_CEPH_CONF="$(readlink -f "$GANESHA_CEPH_CONF")"
            ls /usr/lib/*/ganesha/libfsalceph.so >/dev/null 2>&1 \
                || die "ganesha's FSAL_CEPH is missing: install the Debian package nfs-ganesha-ceph (scripts/install-deps.sh)" ;;
        ceph:*) die "ceph:PATH needs an absolute PATH, got '$dir'" ;;
        *)
            [ -d "$dir" ] || die "export dir $dir does not exist"
            dir="$(cd "$dir" && pwd -P)" ;;
    esac
    mkdir -p "$st"
    st="$(cd "$st" && pwd -P)"

    # idempotent: same export on the same port already up -> nothing to do
    pid="$(holder_pid "$st")"
    if [ -n "$pid" ] && [ "$(cat "$st/args" 2>/dev/null)" = "$dir $port ${GANESHA_CACHING:-0} ${GANESHA_MINOR_VERSIONS:-} ${GANESHA_CEPH_CONF:-} ${GANESHA_CEPH_FS:-} ${GANESHA_CEPH_ID:-}" ] && answers "$dir" "$port"; then
        return 0
    fi
    do_stop "$st"   # leftovers of a crashed run with this STATE_DIR

    for p in "$port" $((port + 1)); do
        busy="$(port_busy "$p")"
        if [ -n "$busy" ]; then
            # a listener right after a stop may be ours still closing; give it a moment
            for i in $(seq 1 30); do sleep 0.1; busy="$(port_busy "$p")"; [ -z "$busy" ] && break; done
            [ -z "$busy" ] || die "port $p is already in use: $busy ($(ss -Htlnp "( sport = :$p )" | head -1))"
        fi
    done

    write_conf "$dir" "$port" "$st"
    echo "$dir $port ${GANESHA_CACHING:-0} ${GANESHA_MINOR_VERSIONS:-} ${GANESHA_CEPH_CONF:-} ${GANESHA_CEPH_FS:-} ${GANESHA_CEPH_ID:-}" > "$st/args"
    : > "$st/ganesha.log"; : > "$st/inner.log"; : > "$st/rpcbind.log"

    # setsid: not in the caller's process group / terminal, so ^C of a test does not half-kill it
    setsid unshare --mount --propagation private --pid --fork --kill-child=SIGKILL --mount-proc \
        -- bash "$SELF" _inner "$st" "" </dev/null >>"$st/inner.log" 2>&1 &
    echo $! > "$st/unshare.pid"

    t0=$(date +%s)
    deadline=$((t0 + ${GANESHA_START_TIMEOUT:-60}))
    while :; do
        if answers "$dir" "$port"; then return 0; fi
        if [ -z "$(holder_pid "$st")" ]; then
            echo "ganesha.sh: ganesha exited during start-up; last log lines:" >&2
            tail -n 20 "$st/inner.log" "$st/ganesha.log" >&2 || true
            do_stop "$st"
            die "start failed (state in $st)"
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "ganesha.sh: no answer on 127.0.0.1:$port within ${GANESHA_START_TIMEOUT:-60}s; last log lines:" >&2
            tail -n 20 "$st/inner.log" "$st/ganesha.log" >&2 || true
            do_stop "$st"
            die "start timed out (state in $st)"
        fi
        sleep 0.3
    done
}

cmd="${1:-}"
case "$cmd" in
    start)  [ $# -eq 4 ] || usage; [ "$(id -u)" = 0 ] || die "must run as root"; do_start "$2" "$3" "$4" ;;
    stop)   [ $# -eq 2 ] || usage; do_stop "$2" ;;
    status) [ $# -eq 2 ] || usage; [ -d "$2" ] && [ -n "$(holder_pid "$(cd "$2" && pwd -P)")" ] ;;
    _inner) do_inner "$2" ;;
    *) usage ;;
esac
