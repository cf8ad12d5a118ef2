# Guest script: mount, write and read back a small file, unmount. The quickest check that the
# guest boots and reaches the server:
#   tests/peers/kclient.sh PORT PORT /export tests/peers/kclient/examples/smoke.sh
kc_mount /mnt || exit 1
grep ' /mnt ' /proc/mounts
f="/mnt/kc-smoke-$(hostname)"
echo "hello from $(uname -r)" > "$f" || exit 1
[ "$(cat "$f")" = "hello from $(uname -r)" ] || { echo "read back differs"; exit 1; }
rm -f "$f"
kc_umount /mnt
