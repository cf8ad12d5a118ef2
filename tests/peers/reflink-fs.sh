#!/usr/bin/env bash
# A small XFS file system with reflinks (mkfs.xfs -m reflink=1) on a loop device, for the
# CLONE tests: FICLONERANGE needs a file system that shares extents, and the test machines'
# own (ext4) has none.
#
#   reflink-fs.sh mount DIR [MIB]   image DIR.img (MIB, default 320: XFS's least is 300),
#                                   loop device, mounted on DIR (created)
#   reflink-fs.sh umount DIR        unmount, detach the loop device, remove the image
#
# Exit 77 (skip) with a message on stderr when this machine cannot: no mkfs.xfs (bash
# scripts/install-deps.sh), no loop devices (a container without /dev/loop-control), not root,
# or a kernel without XFS. Any other failure exits 1.
set -euo pipefail
skip() { echo "reflink-fs: SKIP: $*" >&2; exit 77; }
die() { echo "reflink-fs: FAIL: $*" >&2; exit 1; }
[ $# -ge 2 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
CMD="$1" DIR="$2" MIB="${3:-320}"
IMG="${DIR%/}.img"

case "$CMD" in
mount)
    [ "$(id -u)" = 0 ] || skip "not root: loop devices and mount need it"
    command -v mkfs.xfs >/dev/null || skip "mkfs.xfs not found (bash scripts/install-deps.sh)"
    command -v losetup >/dev/null || skip "losetup not found"
    [ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true
    [ -e /dev/loop-control ] || skip "no /dev/loop-control: loop devices are unavailable here"
    rm -f "$IMG"
    truncate -s "${MIB}M" "$IMG"
    mkfs.xfs -q -m reflink=1 "$IMG" || die "mkfs.xfs -m reflink=1 $IMG"
    dev="$(losetup -f --show "$IMG" 2>/dev/null)" || { rm -f "$IMG"; skip "losetup could not attach $IMG (no free loop device?)"; }
    mkdir -p "$DIR"
    if ! mount -t xfs "$dev" "$DIR" 2>/dev/null; then
        losetup -d "$dev"; rm -f "$IMG"
        grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || skip "the kernel has no XFS"
        die "mount -t xfs $dev $DIR"
    fi
    ;;
umount)
    dev="$(findmnt -n -o SOURCE --target "$DIR" 2>/dev/null || true)"
    if mountpoint -q "$DIR"; then umount "$DIR" || umount -l "$DIR"; fi
    case "$dev" in /dev/loop*) losetup -d "$dev" 2>/dev/null || true ;; esac
    # a loop device left attached to the image by an interrupted run
    for d in $(losetup -j "$IMG" -O NAME -n 2>/dev/null); do losetup -d "$d" || true; done
    rm -f "$IMG"
    ;;
*) die "unknown command $CMD" ;;
esac
