/* xattr-tool: the guest side of tests/peers/kernel-xattr.sh, built with `gcc -static` on the
 * host and copied into the kclient guest (busybox has no setfattr or getfattr). Prints one
 * "PASS name" or "FAIL name: why" line per check and exits 1 if any check failed.
 *
 *   xattr-tool v42 FILE   user.* attributes through a vers=4.2 mount: set (plain, XATTR_CREATE,
 *                         XATTR_REPLACE), get, list, remove, a 3000-byte value, the errors
 *                         (EEXIST, ENODATA); reads user.host, which the host set; leaves
 *                         user.kernel and user.big for the host to check
 *   xattr-tool v41 FILE   the same file through a vers=4.1 mount: EOPNOTSUPP for everything
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

static int nfail;

static void pass(const char *name) { printf("PASS %s\n", name); fflush(stdout); }

static void fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...) {
    va_list ap;
    nfail++;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* A call that must answer `want` (0: success, else that errno). */
static void expect(const char *name, int r, int want) {
    int got = r < 0 ? errno : 0;
    if (got == want)
        pass(name);
    else
        fail(name, "answered %s, expected %s", got ? strerror(got) : "success",
             want ? strerror(want) : "success");
}

static void expect_value(const char *name, const char *file, const char *attr, const void *want,
                         size_t len) {
    static char buf[65536];
    ssize_t n = getxattr(file, attr, buf, sizeof buf);
    if (n < 0)
        fail(name, "getxattr %s: %s", attr, strerror(errno));
    else if ((size_t)n != len || memcmp(buf, want, len) != 0)
        fail(name, "getxattr %s: %zd bytes, not the %zu expected", attr, n, len);
    else
        pass(name);
}

/* Whether the listxattr(2) answer of `file` holds `attr`. */
static int listed(const char *file, const char *attr) {
    static char buf[65536];
    ssize_t n = listxattr(file, buf, sizeof buf);
    if (n < 0)
        return -1;
    for (char *p = buf; p < buf + n; p += strlen(p) + 1)
        if (strcmp(p, attr) == 0)
            return 1;
    return 0;
}

static void v42(const char *f) {
    static char big[3000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    expect("set user.kernel", setxattr(f, "user.kernel", "from-guest", 10, 0), 0);
    expect_value("get user.kernel", f, "user.kernel", "from-guest", 10);
    expect_value("get user.host (set on the server)", f, "user.host", "from-host", 9);
    expect("create user.tmp", setxattr(f, "user.tmp", "1", 1, XATTR_CREATE), 0);
    expect("create of an existing name: EEXIST", setxattr(f, "user.tmp", "2", 1, XATTR_CREATE),
           EEXIST);
    expect("replace of a missing name: ENODATA",
           setxattr(f, "user.none", "2", 1, XATTR_REPLACE), ENODATA);
    expect("replace user.tmp", setxattr(f, "user.tmp", "22", 2, XATTR_REPLACE), 0);
    expect_value("get user.tmp after replace", f, "user.tmp", "22", 2);
    char one[8];
    expect("get of a missing name: ENODATA", (int)getxattr(f, "user.none", one, sizeof one),
           ENODATA);
    int a = listed(f, "user.kernel"), b = listed(f, "user.tmp"), c = listed(f, "user.host");
    if (a == 1 && b == 1 && c == 1)
        pass("list holds user.kernel, user.tmp, user.host");
    else
        fail("list", "user.kernel %d, user.tmp %d, user.host %d (errno %s)", a, b, c,
             strerror(errno));
    expect("remove user.tmp", removexattr(f, "user.tmp"), 0);
    expect("get after remove: ENODATA", (int)getxattr(f, "user.tmp", one, sizeof one), ENODATA);
    expect("remove again: ENODATA", removexattr(f, "user.tmp"), ENODATA);
    if (listed(f, "user.tmp") == 0)
        pass("list without user.tmp");
    else
        fail("list after remove", "user.tmp still listed");
    expect("set user.big (3000 bytes)", setxattr(f, "user.big", big, sizeof big, 0), 0);
    expect_value("get user.big", f, "user.big", big, sizeof big);
}

static void v41(const char *f) {
    char buf[64];
    expect("4.1: get is EOPNOTSUPP", (int)getxattr(f, "user.kernel", buf, sizeof buf),
           EOPNOTSUPP);
    expect("4.1: set is EOPNOTSUPP", setxattr(f, "user.v41", "1", 1, 0), EOPNOTSUPP);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: xattr-tool v42|v41 FILE\n");
        return 2;
    }
    if (strcmp(argv[1], "v42") == 0)
        v42(argv[2]);
    else if (strcmp(argv[1], "v41") == 0)
        v41(argv[2]);
    else {
        fprintf(stderr, "unknown subcommand %s\n", argv[1]);
        return 2;
    }
    return nfail ? 1 : 0;
}
