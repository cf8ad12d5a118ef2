/* v42-tool: the guest side of tests/peers/kernel-v42.sh, built with `gcc -static` on the host
 * and copied into the kclient guest (busybox has no fallocate, copy_file_range or lock tester).
 * Each subcommand prints one "PASS name" or "FAIL name: why" line per check and exits 1 if
 * any check failed.
 *
 *   v42-tool fcntl HOLDER_PATH OTHER_PATH   byte-range locks between two processes
 *   v42-tool flock HOLDER_PATH OTHER_PATH   flock(2) between two processes
 *   v42-tool sparse PATH                    fallocate, punch hole, SEEK_DATA / SEEK_HOLE
 *   v42-tool copy SRC DST                   copy_file_range of all of SRC into DST (new)
 *   v42-tool clone SRC DST                  FICLONE: prints "clone ok" or "clone errno N"
 *   v42-tool noalloc PATH                   fallocate must be EOPNOTSUPP (an NFSv4.1 mount)
 *
 * HOLDER_PATH and OTHER_PATH name the same file: through two mounts (two NFS clients: the
 * server arbitrates) or through one (the guest's kernel arbitrates first). The holder is a
 * forked child with its own open file; the two processes step through the checks over pipes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <unistd.h>

static int nfail;
static const char *tag = "";

static void pass(const char *name) { printf("PASS %s%s\n", tag, name); fflush(stdout); }

static void fail(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...) {
    va_list ap;
    nfail++;
    printf("FAIL %s%s: ", tag, name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static void check(int ok, const char *name, const char *why) {
    if (ok)
        pass(name);
    else
        fail(name, "%s (errno %d %s)", why, errno, strerror(errno));
}

/* ------------------------------------------------------------------ two processes */

static int to_child[2], to_parent[2];

static void send_step(int fd, char c) {
    if (write(fd, &c, 1) != 1) {
        perror("pipe write");
        exit(2);
    }
}

static char wait_step(int fd) {
    char c;
    if (read(fd, &c, 1) != 1) {
        fprintf(stderr, "pipe read: the other process is gone\n");
        exit(2);
    }
    return c;
}

static int open_rw(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return fd;
}

static int setlk(int fd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, F_SETLK, &fl);
}

static int denied(int rc) { return rc < 0 && (errno == EAGAIN || errno == EACCES); }

/* F_GETLK for a write lock on [start, start+len): the lock found (l_type F_UNLCK if none). */
static struct flock getlk(int fd, off_t start, off_t len) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    if (fcntl(fd, F_GETLK, &fl) < 0) {
        fl.l_type = -1;
        fl.l_pid = errno;
    }
    return fl;
}

static void expect_lock(const char *name, struct flock fl, short type, off_t start, off_t len,
                        pid_t pid) {
    if (fl.l_type == type && fl.l_start == start && fl.l_len == len && fl.l_pid == pid)
        pass(name);
    else
        fail(name, "F_GETLK gave type %d start %lld len %lld pid %d; want type %d start %lld "
                   "len %lld pid %d",
             fl.l_type, (long long)fl.l_start, (long long)fl.l_len, fl.l_pid, type,
             (long long)start, (long long)len, pid);
}

/* The child's side: one lock state per step, then tells the parent and waits. */
static void fcntl_holder(const char *path) {
    int fd = open_rw(path), bad = 0;
    bad |= setlk(fd, F_WRLCK, 0, 100) < 0;                 /* step 1: W [0,100) */
    send_step(to_parent[1], bad ? 'x' : '1');
    wait_step(to_child[0]);
    bad |= setlk(fd, F_UNLCK, 40, 20) < 0;                 /* step 2: split: [0,40) [60,100) */
    send_step(to_parent[1], bad ? 'x' : '2');
    wait_step(to_child[0]);
    bad |= setlk(fd, F_RDLCK, 0, 0) < 0;                   /* step 3: R, whole file */
    send_step(to_parent[1], bad ? 'x' : '3');
    wait_step(to_child[0]);
    bad |= setlk(fd, F_UNLCK, 0, 0) < 0;                   /* step 4: nothing */
    send_step(to_parent[1], bad ? 'x' : '4');
    wait_step(to_child[0]);
    bad |= setlk(fd, F_WRLCK, 1000, 10) < 0;               /* step 5: W, then exit holding it */
    send_step(to_parent[1], bad ? 'x' : '5');
    wait_step(to_child[0]);
    _exit(bad);
}

static int fcntl_locks(const char *holder_path, const char *other_path, int same_client) {
    pid_t child;
    int fd;
    /* Through one client the guest's kernel answers F_GETLK with the holder's pid; from
     * another client the server's LOCKT answer carries no pid (the Linux client reports 0). */
    if (pipe(to_child) || pipe(to_parent))
        return 2;
    child = fork();
    if (child == 0)
        fcntl_holder(holder_path);
    pid_t owner = same_client ? child : 0;
    fd = open_rw(other_path);

    if (wait_step(to_parent[0]) != '1')
        fail("holder takes W [0,100)", "the holder's F_SETLK failed");
    check(denied(setlk(fd, F_WRLCK, 50, 10)), "W [50,60) conflicts with W [0,100)",
          "not EAGAIN/EACCES");
    check(denied(setlk(fd, F_RDLCK, 99, 1)), "R [99,100) conflicts with W [0,100)",
          "not EAGAIN/EACCES");
    check(denied(setlk(fd, F_WRLCK, 0, 0)), "whole-file W conflicts", "not EAGAIN/EACCES");
    check(setlk(fd, F_WRLCK, 100, 50) == 0, "W [100,150) next to the holder's is granted",
          "F_SETLK failed");
    check(setlk(fd, F_UNLCK, 100, 50) == 0, "unlock [100,150)", "F_SETLK F_UNLCK failed");
    expect_lock("F_GETLK whole file reports the holder's W [0,100)", getlk(fd, 0, 0), F_WRLCK,
                0, 100, owner);
    expect_lock("F_GETLK [200,300) finds nothing", getlk(fd, 200, 100), F_UNLCK, 200, 100, 0);

    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '2')
        fail("holder unlocks [40,60)", "the holder's F_UNLCK failed");
    check(setlk(fd, F_WRLCK, 45, 10) == 0, "after the split, W [45,55) in the gap is granted",
          "F_SETLK failed");
    check(setlk(fd, F_UNLCK, 45, 10) == 0, "unlock [45,55)", "F_SETLK F_UNLCK failed");
    check(denied(setlk(fd, F_WRLCK, 30, 20)), "W [30,50) conflicts with the kept [0,40)",
          "not EAGAIN/EACCES");
    check(denied(setlk(fd, F_WRLCK, 55, 10)), "W [55,65) conflicts with the kept [60,100)",
          "not EAGAIN/EACCES");
    expect_lock("F_GETLK [40,60) finds nothing after the split", getlk(fd, 40, 20), F_UNLCK, 40,
                20, 0);
    expect_lock("F_GETLK from 60 reports the kept W [60,100)", getlk(fd, 60, 0), F_WRLCK, 60,
                40, owner);

    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '3')
        fail("holder takes R on the whole file", "the holder's F_SETLK failed");
    check(setlk(fd, F_RDLCK, 0, 0) == 0, "R whole file shares the holder's R",
          "F_SETLK failed");
    check(setlk(fd, F_UNLCK, 0, 0) == 0, "unlock whole file", "F_SETLK F_UNLCK failed");
    check(denied(setlk(fd, F_WRLCK, (off_t)1 << 40, 1)),
          "W at 1 TiB conflicts with the whole-file R", "not EAGAIN/EACCES");
    expect_lock("F_GETLK at 1 TiB reports R [0,EOF)", getlk(fd, (off_t)1 << 40, 1), F_RDLCK, 0,
                0, owner);

    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '4')
        fail("holder unlocks everything", "the holder's F_UNLCK failed");
    check(setlk(fd, F_WRLCK, 0, 0) == 0, "released: whole-file W granted", "F_SETLK failed");
    check(setlk(fd, F_UNLCK, 0, 0) == 0, "unlock whole file", "F_SETLK F_UNLCK failed");

    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '5')
        fail("holder takes W [1000,1010)", "the holder's F_SETLK failed");
    check(denied(setlk(fd, F_WRLCK, 1005, 1)), "W [1005,1006) conflicts", "not EAGAIN/EACCES");
    send_step(to_child[1], 'g');
    int status = 0;
    waitpid(child, &status, 0);
    /* The holder's exit closed its file: the client releases its locks (LOCKU) first. */
    int ok = 0;
    for (int i = 0; i < 50 && !ok; i++) {
        ok = setlk(fd, F_WRLCK, 1000, 10) == 0;
        if (!ok)
            usleep(100000);
    }
    check(ok, "the holder exited: its lock is released", "still denied after 5 s");
    check(setlk(fd, F_UNLCK, 1000, 10) == 0, "unlock [1000,1010)", "F_SETLK F_UNLCK failed");
    close(fd);
    return status == 0;
}

static void flock_holder(const char *path) {
    int fd = open_rw(path), bad = 0;
    bad |= flock(fd, LOCK_EX | LOCK_NB) < 0;
    send_step(to_parent[1], bad ? 'x' : '1');
    wait_step(to_child[0]);
    bad |= flock(fd, LOCK_SH | LOCK_NB) < 0;               /* downgrade */
    send_step(to_parent[1], bad ? 'x' : '2');
    wait_step(to_child[0]);
    bad |= flock(fd, LOCK_UN) < 0;
    send_step(to_parent[1], bad ? 'x' : '3');
    wait_step(to_child[0]);
    _exit(bad);
}

static int flock_locks(const char *holder_path, const char *other_path) {
    if (pipe(to_child) || pipe(to_parent))
        return 2;
    pid_t child = fork();
    if (child == 0)
        flock_holder(holder_path);
    int fd = open_rw(other_path);
    if (wait_step(to_parent[0]) != '1')
        fail("holder takes LOCK_EX", "the holder's flock failed");
    check(flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK,
          "LOCK_EX conflicts with the holder's LOCK_EX", "not EWOULDBLOCK");
    check(flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK,
          "LOCK_SH conflicts with the holder's LOCK_EX", "not EWOULDBLOCK");
    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '2')
        fail("holder downgrades to LOCK_SH", "the holder's flock failed");
    check(flock(fd, LOCK_SH | LOCK_NB) == 0, "LOCK_SH shares the holder's LOCK_SH",
          "flock failed");
    check(flock(fd, LOCK_UN) == 0, "LOCK_UN", "flock failed");
    check(flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK,
          "LOCK_EX conflicts with the holder's LOCK_SH", "not EWOULDBLOCK");
    send_step(to_child[1], 'g');
    if (wait_step(to_parent[0]) != '3')
        fail("holder releases", "the holder's flock failed");
    check(flock(fd, LOCK_EX | LOCK_NB) == 0, "released: LOCK_EX granted", "flock failed");
    check(flock(fd, LOCK_UN) == 0, "LOCK_UN", "flock failed");
    send_step(to_child[1], 'g');
    int status = 0;
    waitpid(child, &status, 0);
    close(fd);
    return status == 0;
}

/* ------------------------------------------------------------------ 4.2 data ops */

#define KIB 1024
#define MIB (1024 * 1024)

static void fill(char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (char)(seed >> 16);
    }
}

static int pwrite_all(int fd, const char *buf, size_t len, off_t off) {
    while (len) {
        ssize_t n = pwrite(fd, buf, len, off);
        if (n <= 0)
            return -1;
        buf += n, len -= (size_t)n, off += n;
    }
    return 0;
}

static int all_zero(int fd, off_t off, size_t len) {
    static char buf[64 * KIB];
    while (len) {
        size_t want = len < sizeof buf ? len : sizeof buf;
        ssize_t n = pread(fd, buf, want, off);
        if (n <= 0)
            return 0;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i])
                return 0;
        off += n, len -= (size_t)n;
    }
    return 1;
}

static void expect_off(const char *name, off_t got, off_t want) {
    if (got == want)
        pass(name);
    else
        fail(name, "got %lld (errno %d %s), want %lld", (long long)got, got < 0 ? errno : 0,
             got < 0 ? strerror(errno) : "", (long long)want);
}

static void drop_caches(void) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "3\n", 2) != 2)
            perror("drop_caches");
        close(fd);
    }
}

/* A 4 MiB file with data at [0,64K) and [1M,1M+64K), then: ALLOCATE of [2M,3M), SEEK_DATA
 * and SEEK_HOLE across it, DEALLOCATE of [0,64K) and the reads and seeks after it. The
 * server's file system decides hole granularity; 64 KiB ranges are a multiple of any block. */
static int sparse(const char *path) {
    static char buf[64 * KIB];
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fail("create sparse file", "%s", strerror(errno));
        return 0;
    }
    fill(buf, sizeof buf, 7);
    check(pwrite_all(fd, buf, sizeof buf, 0) == 0 && pwrite_all(fd, buf, sizeof buf, MIB) == 0,
          "write [0,64K) and [1M,1M+64K)", "pwrite failed");
    check(ftruncate(fd, 4 * MIB) == 0, "extend to 4 MiB", "ftruncate failed");
    check(fsync(fd) == 0, "fsync", "fsync failed");
    expect_off("SEEK_DATA from 0 is 0", lseek(fd, 0, SEEK_DATA), 0);
    expect_off("SEEK_HOLE from 0 is 64K", lseek(fd, 0, SEEK_HOLE), 64 * KIB);
    expect_off("SEEK_DATA from 64K is 1M", lseek(fd, 64 * KIB, SEEK_DATA), MIB);
    expect_off("SEEK_HOLE from 1M is 1M+64K", lseek(fd, MIB, SEEK_HOLE), MIB + 64 * KIB);
    errno = 0;
    off_t r = lseek(fd, MIB + 64 * KIB, SEEK_DATA);
    check(r < 0 && errno == ENXIO, "SEEK_DATA in the trailing hole is ENXIO", "not ENXIO");
    r = lseek(fd, 4 * MIB, SEEK_DATA);
    check(r < 0 && errno == ENXIO, "SEEK_DATA at EOF is ENXIO", "not ENXIO");

    struct stat before, after;
    fstat(fd, &before);
    check(fallocate(fd, 0, 2 * MIB, MIB) == 0, "fallocate [2M,3M) (ALLOCATE)",
          "fallocate failed");
    fstat(fd, &after);
    if (after.st_blocks >= before.st_blocks + 2048 && after.st_size == 4 * MIB)
        pass("fallocate: 1 MiB more space used, size unchanged");
    else
        fail("fallocate: 1 MiB more space used, size unchanged",
             "blocks %lld -> %lld, size %lld", (long long)before.st_blocks,
             (long long)after.st_blocks, (long long)after.st_size);
    check(all_zero(fd, 2 * MIB, MIB), "allocated range reads as zeros", "non-zero byte");
    check(fallocate(fd, 0, 4 * MIB, MIB) == 0, "fallocate [4M,5M) past EOF", "failed");
    fstat(fd, &after);
    expect_off("fallocate past EOF grows the file to 5 MiB", after.st_size, 5 * MIB);

    check(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 64 * KIB) == 0,
          "punch hole [0,64K) (DEALLOCATE)", "fallocate failed");
    drop_caches();
    check(all_zero(fd, 0, 64 * KIB), "punched range reads as zeros after drop_caches",
          "non-zero byte");
    expect_off("SEEK_DATA from 0 after the punch is 1M", lseek(fd, 0, SEEK_DATA), MIB);
    expect_off("SEEK_HOLE from 0 after the punch is 0", lseek(fd, 0, SEEK_HOLE), 0);
    fstat(fd, &after);
    expect_off("size kept by the punch", after.st_size, 5 * MIB);
    close(fd);
    return 1;
}

static int copy(const char *src, const char *dst) {
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct stat st;
    if (in < 0 || out < 0 || fstat(in, &st) < 0) {
        fail("copy_file_range: open", "%s", strerror(errno));
        return 0;
    }
    off_t left = st.st_size;
    int calls = 0;
    while (left > 0) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
        if (n <= 0) {
            fail("copy_file_range", "returned %zd after %d calls (errno %d %s)", n, calls,
                 errno, strerror(errno));
            return 0;
        }
        left -= n;
        calls++;
    }
    printf("copy_file_range: %lld bytes in %d calls\n", (long long)st.st_size, calls);
    check(fsync(out) == 0, "fsync the copy", "fsync failed");
    close(in);
    close(out);
    pass("copy_file_range of the whole file");
    return 1;
}

static int clone(const char *src, const char *dst) {
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0)
        return 0;
    if (ioctl(out, FICLONE, in) == 0)
        printf("clone ok\n");
    else
        printf("clone errno %d %s\n", errno, strerror(errno));
    close(in);
    close(out);
    return 1;
}

static int noalloc(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    int rc = fallocate(fd, 0, 0, 4096);
    check(rc < 0 && errno == EOPNOTSUPP, "fallocate on NFSv4.1 is EOPNOTSUPP",
          "fallocate did not fail with EOPNOTSUPP");
    close(fd);
    return 1;
}

int main(int argc, char **argv) {
    int ok = 0;
    if (argc >= 4 && !strcmp(argv[1], "fcntl")) {
        tag = argc >= 5 ? argv[4] : "";
        ok = fcntl_locks(argv[2], argv[3], !strcmp(argv[2], argv[3]));
    } else if (argc >= 4 && !strcmp(argv[1], "flock")) {
        tag = argc >= 5 ? argv[4] : "";
        ok = flock_locks(argv[2], argv[3]);
    } else if (argc == 3 && !strcmp(argv[1], "sparse")) {
        ok = sparse(argv[2]);
    } else if (argc == 4 && !strcmp(argv[1], "copy")) {
        ok = copy(argv[2], argv[3]);
    } else if (argc == 4 && !strcmp(argv[1], "clone")) {
        ok = clone(argv[2], argv[3]);
    } else if (argc == 3 && !strcmp(argv[1], "noalloc")) {
        ok = noalloc(argv[2]);
    } else {
        fprintf(stderr, "usage: see the top of v42-tool.c\n");
        return 2;
    }
    if (!ok && !nfail)
        fail(argv[1], "the helper process failed");
    return nfail ? 1 : 0;
}
