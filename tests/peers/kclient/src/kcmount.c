/*
 * kcmount: mount(2) with a text option string, for the kernel-client guest.
 *
 *   kcmount [-r] FSTYPE SOURCE TARGET [OPTIONS]
 *
 * The kernel's NFS client parses text mount options itself (fs/nfs/fs_context.c), so the guest
 * needs neither mount.nfs nor rpcbind: the options name the ports. busybox's mount -t nfs would
 * build the legacy binary nfs_mount_data instead. Built static by ../build.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>

int main(int argc, char **argv)
{
	unsigned long flags = 0;
	int first = 1;

	if (argc > 1 && strcmp(argv[1], "-r") == 0) {
		flags |= MS_RDONLY;
		first = 2;
	}
	int n = argc - first;
	if (n != 3 && n != 4) {
		fprintf(stderr, "usage: kcmount [-r] FSTYPE SOURCE TARGET [OPTIONS]\n");
		return 2;
	}
	const char *fstype = argv[first];
	const char *source = argv[first + 1];
	const char *target = argv[first + 2];
	const char *options = n == 4 ? argv[first + 3] : NULL;

	if (mount(source, target, fstype, flags, options) != 0) {
		int e = errno;
		fprintf(stderr, "kcmount: mount %s on %s (%s, \"%s\"): %s\n", source, target,
			fstype, options ? options : "", strerror(e));
		return 1;
	}
	return 0;
}
