/* kc-lock: an fcntl (POSIX) lock holder and prober for the kernel-client guest, which has
 * only busybox. Built static on the host (crates/cli/tests/interop_kernel_grace.rs) and
 * handed to the guest with run.sh --file.
 *
 *   kc-lock hold FILE READY RELEASE   write-lock all of FILE (F_SETLK), create READY, wait
 *                                     until RELEASE exists, then write and fsync under the
 *                                     lock (EIO here means the client lost the lock), unlock;
 *                                     exit 0 when all of that worked
 *   kc-lock hold-read FILE READY RELEASE
 *                                     read-lock all of FILE opened read-only (so the client
 *                                     may hold it under a read delegation), create READY,
 *                                     wait until RELEASE exists, unlock; exit 0 when it worked
 *   kc-lock probe FILE                try F_SETLK write on all of FILE from a new process:
 *                                     print "held" (exit 0) or "free" (exit 1)
 *   kc-lock getlk FILE                F_GETLK of a write lock on all of FILE: print
 *                                     "unlocked" or "TYPE START LEN pid=PID" of a holder
 *                                     (TYPE write|read, LEN 0 = to the end)
 *   kc-lock hold-flock FILE READY RELEASE
 *                                     as hold, with flock(LOCK_EX) (on NFS the Linux client
 *                                     sends it as a whole-file POSIX lock)
 *   kc-lock probe-flock FILE          try flock(LOCK_EX|LOCK_NB): "held" (exit 0) or "free"
 *                                     (exit 1)
 * (kernel-grace: crates/cli/tests/interop_kernel_grace.rs; NLM: interop_kernel_nlm.rs)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int setlk(int fd, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0; /* to the end, whatever the size */
    return fcntl(fd, F_SETLK, &fl);
}

static int hold(const char *file, const char *ready, const char *release) {
    int fd = open(file, O_RDWR | O_CREAT, 0644);
    if (fd < 0) { perror("open"); return 2; }
    if (setlk(fd, F_WRLCK) != 0) { perror("F_SETLK"); return 2; }
    if (pwrite(fd, "locked\n", 7, 0) != 7 || fsync(fd) != 0) { perror("write"); return 2; }
    int r = open(ready, O_WRONLY | O_CREAT, 0644);
    if (r < 0) { perror("ready marker"); return 2; }
    close(r);
    printf("kc-lock: holding a write lock on %s\n", file);
    fflush(stdout);
    struct stat st;
    for (int i = 0; i < 6000 && stat(release, &st) != 0; i++) usleep(100000);
    if (pwrite(fd, "still held after\n", 17, 7) != 17 || fsync(fd) != 0) {
        printf("kc-lock: write under the lock failed: %s\n", strerror(errno));
        return 3;
    }
    if (setlk(fd, F_UNLCK) != 0) { perror("F_UNLCK"); return 3; }
    close(fd);
    printf("kc-lock: released %s\n", file);
    return 0;
}

static int hold_read(const char *file, const char *ready, const char *release) {
    int fd = open(file, O_RDONLY);
    if (fd < 0) { perror("open"); return 2; }
    if (setlk(fd, F_RDLCK) != 0) { perror("F_SETLK read"); return 2; }
    int r = open(ready, O_WRONLY | O_CREAT, 0644);
    if (r < 0) { perror("ready marker"); return 2; }
    close(r);
    printf("kc-lock: holding a read lock on %s\n", file);
    fflush(stdout);
    struct stat st;
    for (int i = 0; i < 6000 && stat(release, &st) != 0; i++) usleep(100000);
    if (setlk(fd, F_UNLCK) != 0) { perror("F_UNLCK"); return 3; }
    close(fd);
    printf("kc-lock: released the read lock on %s\n", file);
    return 0;
}

static int probe(const char *file) {
    int fd = open(file, O_RDWR);
    if (fd < 0) { perror("open"); return 2; }
    if (setlk(fd, F_WRLCK) == 0) {
        setlk(fd, F_UNLCK);
        puts("free");
        return 1;
    }
    if (errno == EAGAIN || errno == EACCES) { puts("held"); return 0; }
    perror("F_SETLK");
    return 2;
}

static int getlk(const char *file) {
    int fd = open(file, O_RDWR);
    if (fd < 0) { perror("open"); return 2; }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, F_GETLK, &fl) != 0) { perror("F_GETLK"); return 2; }
    if (fl.l_type == F_UNLCK) {
        puts("unlocked");
    } else {
        printf("%s %lld %lld pid=%d\n", fl.l_type == F_WRLCK ? "write" : "read",
               (long long)fl.l_start, (long long)fl.l_len, (int)fl.l_pid);
    }
    return 0;
}

static int hold_flock(const char *file, const char *ready, const char *release) {
    int fd = open(file, O_RDWR | O_CREAT, 0644);
    if (fd < 0) { perror("open"); return 2; }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { perror("flock"); return 2; }
    int r = open(ready, O_WRONLY | O_CREAT, 0644);
    if (r < 0) { perror("ready marker"); return 2; }
    close(r);
    printf("kc-lock: holding a flock on %s\n", file);
    fflush(stdout);
    struct stat st;
    for (int i = 0; i < 6000 && stat(release, &st) != 0; i++) usleep(100000);
    if (pwrite(fd, "flocked\n", 8, 0) != 8 || fsync(fd) != 0) {
        printf("kc-lock: write under the flock failed: %s\n", strerror(errno));
        return 3;
    }
    if (flock(fd, LOCK_UN) != 0) { perror("LOCK_UN"); return 3; }
    close(fd);
    printf("kc-lock: released the flock on %s\n", file);
    return 0;
}

static int probe_flock(const char *file) {
    int fd = open(file, O_RDWR);
    if (fd < 0) { perror("open"); return 2; }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        puts("free");
        return 1;
    }
    if (errno == EWOULDBLOCK || errno == EAGAIN || errno == EACCES) { puts("held"); return 0; }
    perror("flock");
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "hold") == 0) return hold(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "hold-read") == 0) return hold_read(argv[2], argv[3], argv[4]);
    if (argc == 3 && strcmp(argv[1], "probe") == 0) return probe(argv[2]);
    if (argc == 3 && strcmp(argv[1], "getlk") == 0) return getlk(argv[2]);
    if (argc == 5 && strcmp(argv[1], "hold-flock") == 0) return hold_flock(argv[2], argv[3], argv[4]);
    if (argc == 3 && strcmp(argv[1], "probe-flock") == 0) return probe_flock(argv[2]);
    fprintf(stderr, "usage: kc-lock hold|hold-read|hold-flock FILE READY RELEASE | "
                    "kc-lock probe|probe-flock|getlk FILE\n");
    return 2;
}
