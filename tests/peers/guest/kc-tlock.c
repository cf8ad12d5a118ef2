/* kc-tlock: two-process POSIX (fcntl) byte-range lock cases, in the spirit of the classic
 * NFS lock tests, written for sluice. Static-buildable (`gcc -static -O2 -o kc-tlock
 * kc-tlock.c`), needs only libc, so it also runs in the busybox kernel-client guest.
 *
 *   kc-tlock DIR1 [DIR2]
 *
 * Creates the file DIR1/kc-tlock.PID (sized to FILE_SIZE bytes), forks, and runs every case
 * with the parent working on the file through DIR1 and the child through DIR2 (default:
 * DIR1). With two directories that name the same export through two mounts, the two
 * processes are two clients of the server and every conflict has to be decided there.
 *
 * The parent drives: it takes its own locks with fcntl and asks the child, over a pipe, to
 * take, test or drop locks and to open or close descriptors; the child answers each request
 * with fcntl's result. Each case prints `PASS <case>` or, for each check that went wrong,
 * `FAIL <case>: expected X got Y`; the exit status is 0 when every case passed, 1 when any
 * failed, 2 on a usage or setup error (or the overall timeout, KC_TLOCK_TIMEOUT seconds,
 * default 600). Each case starts and ends with neither process holding a lock.
 *
 * F_GETLK answers are compared by type and byte range only (the pid a remote lock reports
 * differs between clients), and a range reaching OFFSET_MAX compares equal to a lock "to the
 * end" (l_len 0), which is what it is. A refused F_SETLK may fail with EAGAIN or EACCES
 * (POSIX allows both). Every F_GETLK asks over a range where at most one lock conflicts,
 * since which of several a lock manager reports is its choice.
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* The largest off_t: the last byte a lock can cover (the kernel's OFFSET_MAX). */
#define OFF_MAX ((off_t)INT64_MAX)
/* The file's size, so that "beyond EOF" and SEEK_END mean fixed offsets. */
#define FILE_SIZE 1000
/* How long the child waits in F_SETLKW before giving up (a lock that never comes fails the
 * case instead of hanging the run). A waiting mount may poll the server with back-off
 * (sluice: 1 s, then 2 s, ...), so this is generous. */
#define WAIT_LIMIT_S 30
/* How long the parent watches a blocked F_SETLKW before releasing the lock it waits for: an
 * answer within this time is a lock granted while it conflicted. */
#define BLOCKED_WATCH_MS 500

/* How long a F_SETLKW that is meant to be interrupted waits before its alarm. */
#define INTERRUPT_AFTER_S 2
/* After an interrupted F_SETLKW, how long the parent leaves the server to (wrongly) grant
 * the abandoned wait before it takes the range itself. */
#define ABANDONED_GRACE_MS 1500

enum op { OP_SETLK, OP_SETLKW, OP_GETLK, OP_OPEN2, OP_CLOSE2, OP_LOCK_AND_EXIT, OP_QUIT };

struct req {
    int op;
    struct flock fl;
    /* OP_SETLKW: the alarm in seconds (0: WAIT_LIMIT_S). */
    unsigned secs;
};

struct rep {
    int rc;
    int err;
    struct flock fl;
};

static int to_child, from_child;
static const char *cur_case;
static int case_failed, any_failed;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...) {
    va_list ap;
    printf("FAIL %s: ", cur_case);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    case_failed = 1;
    any_failed = 1;
}

static void begin(const char *name) {
    cur_case = name;
    case_failed = 0;
}

static void end(void) {
    if (!case_failed) printf("PASS %s\n", cur_case);
    fflush(stdout);
}

static struct flock mk(short type, short whence, off_t start, off_t len) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = whence;
    fl.l_start = start;
    fl.l_len = len;
    return fl;
}

static const char *tname(short t) {
    return t == F_RDLCK ? "F_RDLCK" : t == F_WRLCK ? "F_WRLCK" : t == F_UNLCK ? "F_UNLCK" : "?";
}

/* ---- the child: a lock agent -------------------------------------------------------- */

static void on_alarm(int sig) { (void)sig; }

static int full_read(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int full_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int child_main(const char *path, int in, int out) {
    int fd = open(path, O_RDWR);
    int fd2 = -1;
    if (fd < 0) {
        fprintf(stderr, "kc-tlock child: open %s: %s\n", path, strerror(errno));
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: the alarm interrupts F_SETLKW */
    sigaction(SIGALRM, &sa, NULL);
    struct req q;
    while (full_read(in, &q, sizeof q) == 0) {
        struct rep r;
        memset(&r, 0, sizeof r);
        r.fl = q.fl;
        switch (q.op) {
        case OP_SETLK: r.rc = fcntl(fd, F_SETLK, &r.fl); break;
        case OP_SETLKW:
            alarm(q.secs ? q.secs : WAIT_LIMIT_S);
            r.rc = fcntl(fd, F_SETLKW, &r.fl);
            r.err = errno;
            alarm(0);
            errno = r.err;
            break;
        case OP_GETLK: r.rc = fcntl(fd, F_GETLK, &r.fl); break;
        case OP_OPEN2:
            fd2 = open(path, O_RDONLY);
            r.rc = fd2 < 0 ? -1 : 0;
            break;
        case OP_CLOSE2:
            r.rc = close(fd2);
            fd2 = -1;
            break;
        case OP_LOCK_AND_EXIT: {
            /* A grandchild opens the file, takes the lock and exits without unlocking or
             * closing: its exit must release the lock. Its exit status is the F_SETLK's errno. */
            pid_t g = fork();
            if (g == 0) {
                int gfd = open(path, O_RDWR);
                if (gfd < 0) _exit(errno);
                _exit(fcntl(gfd, F_SETLK, &r.fl) == 0 ? 0 : errno);
            }
            int st = 0;
            if (g < 0 || waitpid(g, &st, 0) != g) { r.rc = -1; break; }
            r.rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
            errno = WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
            break;
        }
        case OP_QUIT: close(fd); return 0;
        default: r.rc = -1; errno = EINVAL;
        }
        r.err = r.rc < 0 ? errno : 0;
        if (full_write(out, &r, sizeof r) != 0) return 2;
    }
    return 2;
}

/* ---- the parent: requests and checks ------------------------------------------------ */

static int pfd; /* the parent's descriptor of the file */

static struct rep child(int op, struct flock fl) {
    struct req q = { op, fl, 0 };
    struct rep r;
    if (full_write(to_child, &q, sizeof q) != 0 || full_read(from_child, &r, sizeof r) != 0) {
        printf("FAIL %s: the child is gone\n", cur_case);
        exit(1);
    }
    return r;
}

static struct rep parent(int cmd, struct flock fl) {
    struct rep r;
    memset(&r, 0, sizeof r);
    r.fl = fl;
    r.rc = fcntl(pfd, cmd, &r.fl);
    r.err = r.rc < 0 ? errno : 0;
    return r;
}

static const char *who_name(int who) { return who ? "child" : "parent"; }

/* F_SETLK by `who` (0: parent, 1: child) must succeed. */
static void ok_lock(int who, short type, short whence, off_t start, off_t len) {
    struct flock fl = mk(type, whence, start, len);
    struct rep r = who ? child(OP_SETLK, fl) : parent(F_SETLK, fl);
    if (r.rc != 0)
        fail("%s %s whence %d [%lld, len %lld): expected success got %s", who_name(who),
             tname(type), whence, (long long)start, (long long)len, strerror(r.err));
}

/* F_SETLK by `who` must be refused as a conflict (EAGAIN or EACCES). */
static void denied(int who, short type, short whence, off_t start, off_t len) {
    struct flock fl = mk(type, whence, start, len);
    struct rep r = who ? child(OP_SETLK, fl) : parent(F_SETLK, fl);
    if (r.rc == 0) {
        fail("%s %s [%lld, len %lld): expected EAGAIN/EACCES got success", who_name(who),
             tname(type), (long long)start, (long long)len);
        /* Undo what should not have been granted, so later checks stay meaningful. */
        struct flock un = mk(F_UNLCK, whence, start, len);
        if (who) child(OP_SETLK, un); else parent(F_SETLK, un);
    } else if (r.err != EAGAIN && r.err != EACCES) {
        fail("%s %s [%lld, len %lld): expected EAGAIN/EACCES got %s", who_name(who),
             tname(type), (long long)start, (long long)len, strerror(r.err));
    }
}

/* The last byte of a lock as F_GETLK reports it (len 0: to OFF_MAX). */
static off_t last_byte(off_t start, off_t len) { return len == 0 ? OFF_MAX : start + (len - 1); }

/* F_GETLK by `who` for `type` over [start, len) must report a lock of `want_type` over
 * [want_start, want_len), or F_UNLCK when want_type is F_UNLCK. */
static void getlk(int who, short type, off_t start, off_t len, short want_type, off_t want_start,
                  off_t want_len) {
    struct flock fl = mk(type, SEEK_SET, start, len);
    struct rep r = who ? child(OP_GETLK, fl) : parent(F_GETLK, fl);
    if (r.rc != 0) {
        fail("%s F_GETLK %s [%lld, len %lld): expected an answer got %s", who_name(who),
             tname(type), (long long)start, (long long)len, strerror(r.err));
        return;
    }
    if (r.fl.l_type != want_type) {
        fail("%s F_GETLK %s [%lld, len %lld): expected %s got %s [%lld, len %lld)",
             who_name(who), tname(type), (long long)start, (long long)len, tname(want_type),
             tname(r.fl.l_type), (long long)r.fl.l_start, (long long)r.fl.l_len);
        return;
    }
    if (want_type == F_UNLCK) return;
    if (r.fl.l_whence != SEEK_SET || r.fl.l_start != want_start ||
        last_byte(r.fl.l_start, r.fl.l_len) != last_byte(want_start, want_len))
        fail("%s F_GETLK %s [%lld, len %lld): expected %s [%lld, len %lld) got %s [%lld, len "
             "%lld) whence %d",
             who_name(who), tname(type), (long long)start, (long long)len, tname(want_type),
             (long long)want_start, (long long)want_len, tname(r.fl.l_type),
             (long long)r.fl.l_start, (long long)r.fl.l_len, r.fl.l_whence);
}

static void free_range(int who, short type, off_t start, off_t len) {
    getlk(who, type, start, len, F_UNLCK, 0, 0);
}

/* Both processes drop every lock (the end of each case). */
static void clear(void) {
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
}

/* ---- the cases ------------------------------------------------------------------------ */

static void case_whole_file(void) {
    begin("whole-file");
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 0);
    getlk(0, F_RDLCK, 0, 1, F_WRLCK, 0, 0);
    getlk(0, F_WRLCK, FILE_SIZE / 2, 10, F_WRLCK, 0, 0);
    getlk(0, F_RDLCK, (off_t)1 << 40, 1, F_WRLCK, 0, 0);
    denied(0, F_RDLCK, SEEK_SET, 0, 0);
    denied(0, F_WRLCK, SEEK_SET, 100, 1);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
    free_range(0, F_WRLCK, 0, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 0);
    getlk(1, F_RDLCK, 0, 0, F_WRLCK, 0, 0);
    clear();
    end();
}

static void case_disjoint(void) {
    begin("disjoint-ranges");
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100);
    ok_lock(1, F_WRLCK, SEEK_SET, 100, 100);
    ok_lock(0, F_WRLCK, SEEK_SET, 200, 1);
    ok_lock(1, F_WRLCK, SEEK_SET, 201, 0);
    getlk(0, F_WRLCK, 150, 1, F_WRLCK, 100, 100);
    getlk(1, F_WRLCK, 99, 2, F_WRLCK, 0, 100);
    getlk(1, F_RDLCK, 200, 1, F_WRLCK, 200, 1);
    getlk(0, F_RDLCK, 5000, 1, F_WRLCK, 201, 0);
    clear();
    end();
}

static void case_write_overlap(void) {
    begin("write-overlap-conflicts");
    ok_lock(0, F_WRLCK, SEEK_SET, 100, 100);
    denied(1, F_WRLCK, SEEK_SET, 150, 100); /* overlaps the tail */
    denied(1, F_WRLCK, SEEK_SET, 50, 51);   /* overlaps the first byte */
    denied(1, F_WRLCK, SEEK_SET, 199, 1);   /* the last byte */
    denied(1, F_WRLCK, SEEK_SET, 0, 0);     /* covers it */
    denied(1, F_WRLCK, SEEK_SET, 120, 10);  /* inside it */
    ok_lock(1, F_WRLCK, SEEK_SET, 50, 50);  /* touches the first byte, no overlap */
    ok_lock(1, F_WRLCK, SEEK_SET, 200, 50); /* touches the last byte */
    clear();
    end();
}

static void case_read_share(void) {
    begin("read-locks-share");
    ok_lock(0, F_RDLCK, SEEK_SET, 0, 100);
    ok_lock(1, F_RDLCK, SEEK_SET, 50, 100);
    free_range(0, F_RDLCK, 0, 0);
    free_range(1, F_RDLCK, 0, 0);
    getlk(1, F_WRLCK, 0, 10, F_RDLCK, 0, 100);
    getlk(0, F_WRLCK, 120, 10, F_RDLCK, 50, 100);
    clear();
    end();
}

static void case_read_write(void) {
    begin("read-vs-write");
    ok_lock(0, F_RDLCK, SEEK_SET, 0, 100);
    denied(1, F_WRLCK, SEEK_SET, 90, 20);
    ok_lock(1, F_WRLCK, SEEK_SET, 100, 20);
    denied(0, F_RDLCK, SEEK_SET, 110, 1);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 100, 20);
    getlk(1, F_WRLCK, 0, 0, F_RDLCK, 0, 100);
    clear();
    end();
}

static void case_upgrade_downgrade(void) {
    begin("upgrade-downgrade");
    ok_lock(1, F_RDLCK, SEEK_SET, 0, 100);
    getlk(0, F_WRLCK, 0, 0, F_RDLCK, 0, 100);
    free_range(0, F_RDLCK, 0, 0);
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 100); /* upgrade in place */
    getlk(0, F_RDLCK, 10, 1, F_WRLCK, 0, 100);
    denied(0, F_RDLCK, SEEK_SET, 10, 1);
    ok_lock(1, F_RDLCK, SEEK_SET, 0, 100); /* downgrade in place */
    getlk(0, F_WRLCK, 10, 1, F_RDLCK, 0, 100);
    ok_lock(0, F_RDLCK, SEEK_SET, 10, 1);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    /* Upgrade of a part: the middle becomes a write lock, the ends stay read. */
    ok_lock(1, F_WRLCK, SEEK_SET, 40, 20);
    getlk(0, F_WRLCK, 0, 40, F_RDLCK, 0, 40);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 40, 20);
    getlk(0, F_WRLCK, 60, 0, F_RDLCK, 60, 40);
    ok_lock(0, F_RDLCK, SEEK_SET, 0, 40);
    ok_lock(0, F_RDLCK, SEEK_SET, 60, 40);
    denied(0, F_RDLCK, SEEK_SET, 59, 1);
    clear();
    end();
}

static void case_unlock_unlocked(void) {
    begin("unlock-never-locked");
    ok_lock(1, F_UNLCK, SEEK_SET, 1000, 100);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 10);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 10); /* the other's range: not the child's to drop */
    getlk(1, F_RDLCK, 0, 0, F_WRLCK, 0, 10);
    ok_lock(0, F_UNLCK, SEEK_SET, 20, 10); /* beside the parent's own lock */
    getlk(1, F_RDLCK, 0, 0, F_WRLCK, 0, 10);
    clear();
    end();
}

static void case_split(void) {
    begin("unlock-splits");
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 300);
    ok_lock(1, F_UNLCK, SEEK_SET, 100, 100);
    getlk(0, F_WRLCK, 0, 150, F_WRLCK, 0, 100);
    free_range(0, F_WRLCK, 100, 100);
    getlk(0, F_RDLCK, 150, 0, F_WRLCK, 200, 100);
    ok_lock(0, F_WRLCK, SEEK_SET, 100, 100); /* the hole */
    denied(0, F_WRLCK, SEEK_SET, 99, 1);
    denied(0, F_WRLCK, SEEK_SET, 200, 1);
    /* Split a lock to the end. */
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_RDLCK, SEEK_SET, 500, 0);
    ok_lock(1, F_UNLCK, SEEK_SET, 600, 10);
    getlk(0, F_WRLCK, 0, 600, F_RDLCK, 500, 100);
    free_range(0, F_WRLCK, 600, 10);
    getlk(0, F_WRLCK, 605, 0, F_RDLCK, 610, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 600, 10);
    clear();
    end();
}

static void case_eof(void) {
    begin("to-eof-and-beyond");
    ok_lock(1, F_WRLCK, SEEK_SET, 2 * FILE_SIZE, 0); /* from past EOF to the end */
    getlk(0, F_RDLCK, (off_t)1 << 40, 1, F_WRLCK, 2 * FILE_SIZE, 0);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 2 * FILE_SIZE, 0);
    free_range(0, F_WRLCK, 0, 2 * FILE_SIZE);
    ok_lock(0, F_WRLCK, SEEK_SET, FILE_SIZE, FILE_SIZE); /* up to it, past EOF */
    denied(0, F_WRLCK, SEEK_SET, 2 * FILE_SIZE, 1);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_RDLCK, SEEK_SET, 5 * FILE_SIZE, 10); /* wholly beyond EOF */
    getlk(0, F_WRLCK, 5 * FILE_SIZE + 9, 1, F_RDLCK, 5 * FILE_SIZE, 10);
    free_range(0, F_WRLCK, 5 * FILE_SIZE + 10, 0);
    clear();
    end();
}

static void case_seek_end(void) {
    begin("eof-relative");
    /* SEEK_END ranges are made absolute from the file's size (FILE_SIZE) by the locker. */
    ok_lock(1, F_WRLCK, SEEK_END, -100, 50);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, FILE_SIZE - 100, 50);
    ok_lock(1, F_RDLCK, SEEK_END, 0, 0);
    getlk(0, F_WRLCK, FILE_SIZE, 0, F_RDLCK, FILE_SIZE, 0);
    ok_lock(1, F_WRLCK, SEEK_END, -200, -10); /* negative length: the 10 bytes before */
    getlk(0, F_RDLCK, 0, FILE_SIZE - 100, F_WRLCK, FILE_SIZE - 210, 10);
    denied(0, F_WRLCK, SEEK_END, -95, 1);
    ok_lock(0, F_WRLCK, SEEK_END, -150, -10);
    ok_lock(1, F_UNLCK, SEEK_END, -100, 0);
    free_range(0, F_WRLCK, FILE_SIZE - 100, 0);
    getlk(1, F_RDLCK, 0, 0, F_WRLCK, FILE_SIZE - 160, 10);
    clear();
    end();
}

static void case_coalesce(void) {
    begin("coalesce");
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 100);
    ok_lock(1, F_WRLCK, SEEK_SET, 100, 100); /* adjacent: one lock [0, 200) */
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 0, 200);
    ok_lock(1, F_WRLCK, SEEK_SET, 50, 200); /* overlapping: one lock [0, 250) */
    getlk(0, F_RDLCK, 240, 0, F_WRLCK, 0, 250);
    ok_lock(1, F_UNLCK, SEEK_SET, 90, 20); /* a hole across the old seam */
    getlk(0, F_RDLCK, 0, 100, F_WRLCK, 0, 90);
    getlk(0, F_RDLCK, 95, 0, F_WRLCK, 110, 140);
    ok_lock(0, F_RDLCK, SEEK_SET, 90, 20);
    /* Adjacent locks of different types stay apart. */
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_RDLCK, SEEK_SET, 0, 100);
    ok_lock(1, F_WRLCK, SEEK_SET, 100, 100);
    getlk(0, F_WRLCK, 0, 100, F_RDLCK, 0, 100);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 100, 100);
    clear();
    end();
}

static void case_blocking(void) {
    begin("setlkw-waits");
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100);
    struct req q = { OP_SETLKW, mk(F_WRLCK, SEEK_SET, 50, 100), 0 };
    if (full_write(to_child, &q, sizeof q) != 0) {
        fail("the child is gone");
        exit(1);
    }
    struct pollfd p = { from_child, POLLIN, 0 };
    int early = poll(&p, 1, BLOCKED_WATCH_MS);
    if (early > 0) fail("the child's F_SETLKW returned while the parent held the range");
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 100);
    struct rep r;
    if (full_read(from_child, &r, sizeof r) != 0) {
        fail("the child is gone");
        exit(1);
    }
    if (early <= 0 && r.rc != 0)
        fail("F_SETLKW after the holder unlocked: expected success got %s", strerror(r.err));
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 50, 100);
    clear();
    end();
}

/* Sends a F_SETLKW to the child (alarm `secs`, 0: WAIT_LIMIT_S) and checks that it has not
 * answered after BLOCKED_WATCH_MS; the answer is read with wait_answer. */
static int start_wait(struct flock fl, unsigned secs) {
    struct req q = { OP_SETLKW, fl, secs };
    if (full_write(to_child, &q, sizeof q) != 0) {
        fail("the child is gone");
        exit(1);
    }
    struct pollfd p = { from_child, POLLIN, 0 };
    int early = poll(&p, 1, BLOCKED_WATCH_MS);
    if (early > 0) fail("the child's F_SETLKW returned while the range was held");
    return early > 0;
}

static struct rep wait_answer(void) {
    struct rep r;
    if (full_read(from_child, &r, sizeof r) != 0) {
        fail("the child is gone");
        exit(1);
    }
    return r;
}

static void case_blocking_downgrade(void) {
    begin("setlkw-read-waits-for-downgrade");
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100);
    int early = start_wait(mk(F_RDLCK, SEEK_SET, 0, 100), 0);
    ok_lock(0, F_RDLCK, SEEK_SET, 0, 100); /* the holder downgrades: readers may come in */
    struct rep r = wait_answer();
    if (!early && r.rc != 0)
        fail("F_SETLKW read after the holder downgraded: expected success got %s",
             strerror(r.err));
    getlk(0, F_WRLCK, 0, 0, F_RDLCK, 0, 100);
    getlk(1, F_WRLCK, 0, 0, F_RDLCK, 0, 100);
    denied(0, F_WRLCK, SEEK_SET, 0, 1); /* no upgrade while the other reads */
    clear();
    end();
}

static void case_blocking_interrupted(void) {
    begin("setlkw-interrupted");
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100);
    start_wait(mk(F_WRLCK, SEEK_SET, 0, 10), INTERRUPT_AFTER_S);
    struct rep r = wait_answer();
    if (r.rc == 0) fail("F_SETLKW on a held range: expected EINTR got success");
    else if (r.err != EINTR) fail("F_SETLKW on a held range: expected EINTR got %s", strerror(r.err));
    /* The abandoned wait must not turn into a lock once the range is free. */
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 100);
    poll(NULL, 0, ABANDONED_GRACE_MS);
    free_range(0, F_WRLCK, 0, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 0);
    getlk(1, F_RDLCK, 0, 10, F_WRLCK, 0, 0);
    clear();
    end();
}

static void case_failed_upgrade(void) {
    begin("failed-upgrade-keeps-read");
    ok_lock(1, F_RDLCK, SEEK_SET, 0, 100);
    ok_lock(0, F_RDLCK, SEEK_SET, 50, 10);
    denied(1, F_WRLCK, SEEK_SET, 0, 100); /* refused: the parent reads 50..60 */
    /* The child still holds its whole read lock, not a part of it, and no write lock. */
    getlk(0, F_WRLCK, 0, 50, F_RDLCK, 0, 100);
    getlk(0, F_WRLCK, 60, 0, F_RDLCK, 0, 100);
    free_range(0, F_RDLCK, 0, 0);
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 50); /* the part nobody else reads */
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, 0, 50);
    clear();
    end();
}

static void case_own_locks(void) {
    begin("own-locks-never-conflict");
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100);
    free_range(0, F_WRLCK, 0, 0); /* F_GETLK does not report the caller's own locks */
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 100); /* taking it again is no conflict */
    ok_lock(0, F_RDLCK, SEEK_SET, 20, 10);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 0);
    getlk(1, F_RDLCK, 0, 0, F_WRLCK, 0, 0);
    clear();
    end();
}

static void case_many_ranges(void) {
    begin("many-ranges");
    for (int i = 0; i < 40; i++) ok_lock(1, i % 2 ? F_RDLCK : F_WRLCK, SEEK_SET, i * 100, 10);
    getlk(0, F_RDLCK, 2000, 100, F_WRLCK, 2000, 10);
    getlk(0, F_WRLCK, 3100, 100, F_RDLCK, 3100, 10);
    free_range(0, F_WRLCK, 3110, 90);
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0); /* one unlock drops them all */
    free_range(0, F_WRLCK, 0, 0);
    clear();
    end();
}

static void case_exit_releases(void) {
    begin("exit-releases");
    struct rep r = child(OP_LOCK_AND_EXIT, mk(F_WRLCK, SEEK_SET, 0, 0));
    if (r.rc != 0) fail("a grandchild's lock: expected success got %s", strerror(r.err));
    free_range(0, F_WRLCK, 0, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 0);
    clear();
    end();
}

static void case_close_any_fd(void) {
    begin("close-releases");
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 10);
    ok_lock(1, F_RDLCK, SEEK_SET, 100, 0);
    struct rep r = child(OP_OPEN2, mk(0, 0, 0, 0));
    if (r.rc != 0) fail("child opens a second descriptor: expected success got %s", strerror(r.err));
    getlk(0, F_WRLCK, 0, 50, F_WRLCK, 0, 10);
    r = child(OP_CLOSE2, mk(0, 0, 0, 0));
    if (r.rc != 0) fail("child closes its second descriptor: expected success got %s", strerror(r.err));
    /* Closing any descriptor of the file drops all of the process's locks on it. */
    free_range(0, F_WRLCK, 0, 0);
    ok_lock(0, F_WRLCK, SEEK_SET, 0, 0);
    clear();
    end();
}

static void case_offset_max(void) {
    begin("offset-max");
    ok_lock(1, F_WRLCK, SEEK_SET, OFF_MAX - 9, 0); /* the last 10 bytes */
    getlk(0, F_RDLCK, OFF_MAX, 1, F_WRLCK, OFF_MAX - 9, 0);
    getlk(0, F_RDLCK, 0, 0, F_WRLCK, OFF_MAX - 9, 10);
    free_range(0, F_WRLCK, OFF_MAX - 19, 10);
    ok_lock(0, F_WRLCK, SEEK_SET, OFF_MAX - 19, 10);
    denied(0, F_WRLCK, SEEK_SET, OFF_MAX - 10, 2);
    denied(0, F_RDLCK, SEEK_SET, OFF_MAX, 1);
    ok_lock(1, F_UNLCK, SEEK_SET, OFF_MAX - 9, 0);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    /* An explicit length that ends on the last byte, then its last byte alone. */
    ok_lock(1, F_RDLCK, SEEK_SET, OFF_MAX - 4, 5);
    getlk(0, F_WRLCK, OFF_MAX - 100, 0, F_RDLCK, OFF_MAX - 4, 5);
    ok_lock(1, F_UNLCK, SEEK_SET, OFF_MAX - 4, 4);
    getlk(0, F_WRLCK, 0, 0, F_RDLCK, OFF_MAX, 1);
    ok_lock(0, F_WRLCK, SEEK_SET, OFF_MAX - 4, 4);
    denied(0, F_WRLCK, SEEK_SET, OFF_MAX, 1);
    /* A range past the last byte is refused before it is a lock. */
    struct rep r = parent(F_SETLK, mk(F_WRLCK, SEEK_SET, OFF_MAX, 2));
    if (r.rc == 0) fail("a lock past OFFSET_MAX: expected EINVAL/EOVERFLOW got success");
    else if (r.err != EINVAL && r.err != EOVERFLOW)
        fail("a lock past OFFSET_MAX: expected EINVAL/EOVERFLOW got %s", strerror(r.err));
    /* A low lock and a top one of the same owner do not merge into the whole range. */
    ok_lock(1, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(0, F_UNLCK, SEEK_SET, 0, 0);
    ok_lock(1, F_WRLCK, SEEK_SET, 0, 1);
    ok_lock(1, F_WRLCK, SEEK_SET, OFF_MAX, 1);
    free_range(0, F_WRLCK, 1, OFF_MAX - 1);
    getlk(0, F_WRLCK, 1, 0, F_WRLCK, OFF_MAX, 1);
    clear();
    end();
}

static void on_timeout(int sig) {
    (void)sig;
    static const char msg[] = "FAIL kc-tlock: overall timeout\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(2);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: kc-tlock DIR1 [DIR2]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *d1 = argv[1], *d2 = argc == 3 ? argv[2] : argv[1];
    char p1[4096], p2[4096];
    snprintf(p1, sizeof p1, "%s/kc-tlock.%d", d1, (int)getpid());
    snprintf(p2, sizeof p2, "%s/kc-tlock.%d", d2, (int)getpid());
    pfd = open(p1, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (pfd < 0) { fprintf(stderr, "kc-tlock: create %s: %s\n", p1, strerror(errno)); return 2; }
    if (ftruncate(pfd, FILE_SIZE) != 0 || fsync(pfd) != 0) {
        fprintf(stderr, "kc-tlock: size %s: %s\n", p1, strerror(errno));
        return 2;
    }
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) { perror("pipe"); return 2; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 2; }
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        close(pfd);
        _exit(child_main(p2, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    to_child = down[1];
    from_child = up[0];
    signal(SIGPIPE, SIG_IGN);
    const char *t = getenv("KC_TLOCK_TIMEOUT");
    signal(SIGALRM, on_timeout);
    alarm(t ? (unsigned)atoi(t) : 600);

    case_whole_file();
    case_disjoint();
    case_write_overlap();
    case_read_share();
    case_read_write();
    case_upgrade_downgrade();
    case_unlock_unlocked();
    case_split();
    case_eof();
    case_seek_end();
    case_coalesce();
    case_blocking();
    case_blocking_downgrade();
    case_blocking_interrupted();
    case_failed_upgrade();
    case_own_locks();
    case_many_ranges();
    case_exit_releases();
    case_close_any_fd();
    case_offset_max();

    struct req q = { OP_QUIT, mk(0, 0, 0, 0), 0 };
    full_write(to_child, &q, sizeof q);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL kc-tlock: the child exited with status %d\n", st);
        any_failed = 1;
    }
    close(pfd);
    unlink(p1);
    printf("%s\n", any_failed ? "kc-tlock: some cases FAILED" : "kc-tlock: all cases passed");
    return any_failed ? 1 : 0;
}
