# kc-lib.sh: helpers sourced before every guest script (busybox sh).
#
# From ../run.sh (through /kc/env) and /init:
#   KC_SERVER   the server as the guest sees it (10.0.2.2)   KC_GUEST_ADDR  the guest's address
#   KC_PORT     NFS port         KC_MOUNTPORT  MOUNT port     KC_EXPORT  export path
#   KC_VERS     3 | 4.1 | ...    KC_OPTS       extra mount options (comma separated)
#   KC_OUT      a folder that comes back to the host (RUN/out)

kc_log() { echo "[kc $(cut -d' ' -f1 /proc/uptime)] $*"; }

# kc_opts [EXTRA]: the NFS mount options for $KC_VERS
kc_opts() {
    local o
    case "${KC_VERS:-3}" in
        2|3) o="vers=$KC_VERS,proto=tcp,port=$KC_PORT,mountport=${KC_MOUNTPORT:-$KC_PORT}"
             o="$o,mountproto=tcp,nolock,addr=$KC_SERVER" ;;
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
