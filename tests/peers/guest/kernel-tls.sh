# Guest script (busybox sh, run by ../kclient.sh in the KC_SUITE=trixie guest: kernel 6.12 with
# RPC-with-TLS, tlshd; kc-lib.sh is already sourced). The Linux kernel NFS client mounts the
# export with xprtsec=tls and xprtsec=mtls over each NFS version of KT_MOUNTS in turn and runs
# the interop workload of kernel-interop.sh (--file, run once per mount) on each mount: cp -a
# of a tree, ls -lR, dd both ways with sha256 after drop_caches, a host-placed tree and file,
# renames, links, a file removed while open, fcntl locks, kc-fsx, rm -r.
#
# tlshd (kc_tlshd) trusts KT_PKI/ca.pem and presents KT_PKI/client.pem for mtls. At the end
# (KT_REFUSALS=1) three 4.2 mounts must fail: mtls with tlshd presenting KT_PKI/stranger.pem
# (another CA's: the server refuses the handshake), mtls with tlshd holding no certificate
# (tlshd gives up), and, if KT_WRONG_NAME_PORT is set, tls against the server on that port,
# whose certificate does not name 10.0.2.2 (tlshd refuses it).
#
# Guest environment (run.sh --env K=V):
#   KT_MOUNTS    VERS:SEC pairs, space separated         [4.2:tls 4.2:mtls 3:tls 3:mtls]
#   KT_PKI       ca.pem, client.pem/.key, stranger.pem/.key   [/kc/pki]
#   KT_WORK      work folder prefix in the export          [kernel-tls]
#   KT_REFUSALS  1: the mounts that must fail               [1]
#   KT_WRONG_NAME_PORT  a TLS server whose certificate does not name 10.0.2.2   [none]
#   KI_*         for kernel-interop.sh (KI_BIG_MIB, KI_FSX_OPS, KI_FSX_SEED, KI_HOST_TREE,
#                KI_HOST_FILE); KI_WORK is KT_WORK-NAME, NAME being v4.2-tls, v3-mtls ...
# Needs /kc/kernel-interop.sh, /kc/kc-lock, /kc/kc-fsx (run.sh --file).
# Saved for the host per mount, in out/NAME/: e1-sums.txt (kernel-interop's), mounts.txt (the
# mount's /proc/mounts line, right after the mount), mountstats.txt (its mountstats block just
# before the umount); out/tlshd.log. Prints kernel-interop's PASS/FAIL lines, then one
# "KT PASS NAME" or "KT FAIL NAME" per mount and per refusal, and exits non-zero if anything
# failed.

PKI="${KT_PKI:-/kc/pki}"
WORK="${KT_WORK:-kernel-tls}"
RC=0

kc_tlshd "$PKI/ca.pem" "$PKI/client.pem" "$PKI/client.key" || { echo "KT FAIL tlshd"; exit 1; }
kc_log "tlshd up"

for spec in ${KT_MOUNTS:-4.2:tls 4.2:mtls 3:tls 3:mtls}; do
    vers="${spec%%:*}" sec="${spec#*:}"
    name="v$vers-$sec"
    mkdir -p "$KC_OUT/$name"
    kc_log "== $name"
    (
        export KC_VERS="$vers" KC_OPTS="xprtsec=$sec" KI_WORK="$WORK-$name"
        export KC_OUT="$KC_OUT/$name" KI_EXPORTS="$KC_EXPORT"
        # kernel-interop.sh mounts and unmounts through these: the same mount as kc-lib.sh's,
        # with what the kernel says about the transport saved on the way.
        kc_mount() {
            local mnt="${1:-/mnt}" o
            o="$(kc_opts "${2:-}")" || return 1
            mkdir -p "$mnt"
            kc_log "mount -t nfs -o $o $KC_SERVER:$KC_EXPORT $mnt"
            kcmount nfs "$KC_SERVER:$KC_EXPORT" "$mnt" "$o" || return 1
            awk -v m="$mnt" '$2 == m' /proc/mounts > "$KC_OUT/mounts.txt"
        }
        kc_umount() {
            kc_mountstats "${1:-/mnt}" > "$KC_OUT/mountstats.txt"
            umount "${1:-/mnt}"
        }
        . /kc/kernel-interop.sh
    )
    if [ $? = 0 ]; then echo "KT PASS $name"; else echo "KT FAIL $name"; RC=1; fi
done

# refused NAME PORT SEC: a 4.2 mount with xprtsec=SEC of the server on PORT must fail
refused() {
    local out
    kc_log "== $1: must be refused"
    if out="$(KC_VERS=4.2; KC_PORT="$2"; kc_mount /mnt/refused "xprtsec=$3" 2>&1)"; then
        echo "KT FAIL $1: the mount succeeded"
        umount /mnt/refused
        RC=1
    else
        echo "KT PASS $1: refused ($(echo "$out" | tail -n 1 | sed 's/.*: //'))"
    fi
}
if [ "${KT_REFUSALS:-1}" = 1 ]; then
    # the server refuses a client certificate of another CA
    if kc_tlshd "$PKI/ca.pem" "$PKI/stranger.pem" "$PKI/stranger.key"; then
        refused stranger "$KC_PORT" mtls
    else
        echo "KT FAIL stranger: tlshd did not restart"; RC=1
    fi
    # tlshd refuses an mtls handshake when it has no certificate to present
    if kc_tlshd "$PKI/ca.pem"; then
        refused no-client-cert "$KC_PORT" mtls
        # tlshd checks the server's certificate against the mount's server address
        # (10.0.2.2): the server on KT_WRONG_NAME_PORT has a certificate for 127.0.0.1 only
        if [ -n "${KT_WRONG_NAME_PORT:-}" ]; then
            refused wrong-name "$KT_WRONG_NAME_PORT" tls
        fi
    else
        echo "KT FAIL no-client-cert: tlshd did not restart"; RC=1
    fi
fi
kill "$KC_TLSHD_PID" 2>/dev/null
[ "$RC" = 0 ] && echo "KT RESULT: PASS" || echo "KT RESULT: FAIL"
exit "$RC"
