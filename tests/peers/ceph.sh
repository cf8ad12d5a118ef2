#!/usr/bin/env bash
# A private one-node Ceph cluster on 127.0.0.1 with one CephFS, for tests and for trying sluice
# on Ceph by hand.
#
#   ceph.sh start DIR    start (or reuse) the cluster whose files all live under DIR; prints the
#                        path of its ceph.conf once the file system's MDS is up:active
#   ceph.sh stop DIR     kill every daemon `start` started for DIR (idempotent)
#   ceph.sh status DIR   exit 0 if the mon answers and the MDS is up:active
#
# The cluster: one mon (v1 protocol only, on a free loopback port), one OSD on memstore (data in
# the OSD's memory: nothing survives `stop`), one MDS, no manager, no authentication, pools of
# size 1, and the file system `cephfs` over the pools cephfs_meta and cephfs_data.
# DIR gets: ceph.conf, monmap, mon/ osd/ mds/ (daemon data), run/ (pid files, admin sockets),
# log/ (daemon and client logs), port (the mon's port).
# Environment: CEPH_START_TIMEOUT (s, default 60), CEPH_MEMSTORE_BYTES (the OSD's capacity,
# default 2 GiB; memory is used only for what is written), CEPH_MGR=1 (also start a manager and
# wait until the cluster reports its capacity: without one, statfs answers 0 bytes; it costs
# ~300 MB and ~8 s).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
die() { echo "ceph.sh: ERROR: $*" >&2; exit 1; }
usage() { sed -n '2,9p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }
need() {
    command -v "$1" >/dev/null 2>&1 \
        || die "$1 not found: install the Debian packages ceph-mon ceph-osd ceph-mds ceph-common ceph-fuse libcephfs-dev (scripts/install-deps.sh does)"
}

# A free TCP port on 127.0.0.1: bind port 0 and read what the kernel chose. (It is free when
# asked; the mon binds it a moment later, and `start` fails clearly if someone took it.)
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The ceph CLI against DIR's cluster, bounded so a dead mon never hangs the caller.
cli() { timeout -k 2 15 ceph -c "$CONF" --connect-timeout 10 "$@"; }

# A mon command, retried a few times (a busy mon was seen to refuse one now and then); dies
# with its last error.
retry() {
    local i out
    for i in 1 2 3 4 5; do
        out="$(cli "$@" 2>&1)" && return 0
        sleep 1
    done
    die "ceph $*: $out"
}

alive() {   # pid $1 exists and is not a zombie
    local line
    { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
    line="${line##*) }"
    [ "${line:0:1}" != Z ]
}

# pid of daemon $1 (mon.a, osd.0, mds.a) of this cluster, if it runs: from its pid file, checked
# against /proc so a stale file never makes us signal an unrelated process.
daemon_pid() {
    local pid
    pid="$(cat "$DIR/run/$1.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
        | grep -q -- "-c $CONF" && echo "$pid"
    return 0
}

write_conf() {
    local fsid="$1" port="$2"
    cat > "$CONF" <<EOF
# written by tests/peers/ceph.sh: a one-node test cluster, loopback only, no authentication
[global]
fsid = $fsid
mon_host = v1:127.0.0.1:$port
public_addr = 127.0.0.1
ms_bind_msgr2 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_crush_chooseleaf_type = 0
mon_warn_on_pool_no_redundancy = false
# The monitor's store is a few MB, but by default it stops below 5% free disk ("mon data avail
# crit"), which a shared build machine's disk full of build outputs reaches: 1% then.
mon_data_avail_crit = 1
mon_data_avail_warn = 2
run_dir = $DIR/run
pid_file = $DIR/run/\$name.pid
admin_socket = $DIR/run/\$name.\$pid.asok
log_file = $DIR/log/\$name.log
mon_cluster_log_file = $DIR/log/cluster.log
keyring = $DIR/keyring
mon_data = $DIR/mon/\$name
osd_data = $DIR/osd/\$name
mds_data = $DIR/mds/\$name
mgr_data = $DIR/mgr/\$name
osd_objectstore = memstore
# The OSD does not place itself in the CRUSH map (nor set its device class): on a busy machine
# its own update was seen to fail its start with EPERM now and then. The start step places it.
osd_crush_update_on_start = false
osd_class_update_on_start = false
memstore_device_bytes = ${CEPH_MEMSTORE_BYTES:-2147483648}
# small test daemons: a few threads and little memory each
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 1
[client]
log_file = $DIR/log/\$name.\$pid.log
EOF
}

do_start() {
    need ceph-mon; need ceph-osd; need ceph-mds; need ceph; need monmaptool; need python3
    mkdir -p "$DIR"
    DIR="$(cd "$DIR" && pwd -P)"; CONF="$DIR/ceph.conf"
    if [ -r "$CONF" ] && do_status; then echo "$CONF"; return 0; fi
    do_stop
    rm -rf "$DIR/mon" "$DIR/osd" "$DIR/mds" "$DIR/run" "$DIR/log" "$DIR/monmap" "$DIR/keyring"
    mkdir -p "$DIR/mon/mon.a" "$DIR/mds/mds.a" "$DIR/mgr/mgr.x" "$DIR/run" "$DIR/log"
    local fsid port osd_uuid osd_id t0 deadline
    t0=$(date +%s.%N)
    deadline=$(( $(date +%s) + ${CEPH_START_TIMEOUT:-60} ))
    fsid="$(cat /proc/sys/kernel/random/uuid)"
    port="$(free_port)"
    echo "$port" > "$DIR/port"
    write_conf "$fsid" "$port"
    : > "$DIR/keyring"
    monmaptool --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$port]" "$DIR/monmap" >/dev/null \
        || die "monmaptool failed"
    ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" >"$DIR/log/mkfs-mon.out" 2>&1 \
        || die "ceph-mon --mkfs failed: $(tail -3 "$DIR/log/mkfs-mon.out")"
    ceph-mon -c "$CONF" -i a >"$DIR/log/mon.out" 2>&1 || die "ceph-mon did not start: $(tail -3 "$DIR/log/mon.out")"
    until cli mon stat >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || die "mon on 127.0.0.1:$port does not answer (see $DIR/log/mon.a.log)"
        sleep 0.2
    done
    # The OSD's uuid must be the one given to `ceph osd create`, or the OSD never boots.
    osd_uuid="$(cat /proc/sys/kernel/random/uuid)"
    # Retried like `retry` (a mon just up was seen to answer EPERM "problem getting command
    # descriptions" once); creating with the same uuid again is idempotent in Ceph.
    osd_id=""
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        osd_id="$(cli osd create "$osd_uuid" 2>"$DIR/log/osd-create.err")" && break
        osd_id=""
        sleep 1
    done
    [ -n "$osd_id" ] || die "ceph osd create failed: $(cat "$DIR/log/osd-create.err")"
    mkdir -p "$DIR/osd/osd.$osd_id"
    ceph-osd -c "$CONF" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/mkfs-osd.out" 2>&1 \
        || die "ceph-osd --mkfs failed: $(tail -3 "$DIR/log/mkfs-osd.out")"
    retry osd crush add "osd.$osd_id" 1.0 root=default host=localhost
    ceph-osd -c "$CONF" -i "$osd_id" >"$DIR/log/osd.out" 2>&1 \
        || die "ceph-osd did not start: $(tail -3 "$DIR/log/osd.out")"
    ceph-mds -c "$CONF" -i a >"$DIR/log/mds.out" 2>&1 || die "ceph-mds did not start: $(tail -3 "$DIR/log/mds.out")"
    retry osd pool create cephfs_meta 8
    retry osd pool create cephfs_data 8
    retry fs new cephfs cephfs_meta cephfs_data
    until do_status; do
        [ "$(date +%s)" -lt "$deadline" ] \
            || die "MDS not up:active after ${CEPH_START_TIMEOUT:-60} s (see $DIR/log/): $(cli fs dump 2>&1 | grep -m1 'up:' || true)"
        sleep 0.2
    done
    if [ "${CEPH_MGR:-0}" = 1 ]; then
        need ceph-mgr
        ceph-mgr -c "$CONF" -i x >"$DIR/log/mgr.out" 2>&1 || die "ceph-mgr did not start: $(tail -3 "$DIR/log/mgr.out")"
        until cli df 2>/dev/null | awk '/TOTAL/ { exit !($2 > 0) }'; do
            [ "$(date +%s)" -lt "$deadline" ] || die "the manager reported no capacity in time (see $DIR/log/)"
            sleep 0.5
        done
    fi
    echo "ceph.sh: cluster up in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-4) s, mon 127.0.0.1:$port" >&2
    echo "$CONF"
}

do_status() {
    [ -r "$CONF" ] || return 1
    [ -n "$(daemon_pid mon.a)" ] || return 1
    cli fs dump 2>/dev/null | grep -q 'up:active'
}

do_stop() {
    [ -d "$DIR/run" ] || return 0
    local f name pid pids="" i
    for f in "$DIR"/run/*.pid; do
        [ -e "$f" ] || continue
        name="$(basename "$f" .pid)"
        pid="$(daemon_pid "$name")"
        [ -n "$pid" ] && pids="$pids $pid"
    done
    [ -n "$pids" ] || return 0
    # Test daemons hold nothing worth a graceful shutdown (memstore loses its data anyway).
    kill -9 $pids 2>/dev/null || true
    for i in $(seq 50); do
        local any=0
        for pid in $pids; do alive "$pid" && any=1; done
        [ "$any" = 0 ] && return 0
        sleep 0.1
    done
    die "daemons$pids still alive after SIGKILL"
}

[ $# -eq 2 ] || usage
DIR="$2"
case "$1" in
    start) do_start ;;
    stop)
        [ -d "$DIR" ] || exit 0
        DIR="$(cd "$DIR" && pwd -P)"; CONF="$DIR/ceph.conf"; do_stop ;;
    status)
        [ -d "$DIR" ] || exit 1
        DIR="$(cd "$DIR" && pwd -P)"; CONF="$DIR/ceph.conf"; need ceph; do_status ;;
    *) usage ;;
esac
