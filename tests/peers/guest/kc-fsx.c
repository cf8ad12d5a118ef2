/* kc-fsx: random file operations checked against a model, in the spirit of fsx (xfstests), for
 * the kernel-client guest (busybox only). Built static on the host by ../kernel-interop.sh and
 * handed to the guest with run.sh --file.
 *
 *   kc-fsx FILE SEED OPS MODEL_OUT
 *
 * Creates FILE (truncating it) and applies OPS operations drawn from SEED: writes at random
 * offsets (up to 64 KiB, past the end too, leaving zero-filled gaps), truncates up and down,
 * reads of random ranges compared byte for byte with an in-memory model, fsync followed by
 * posix_fadvise(DONTNEED) (so the next reads come from the server, not the page cache), and
 * close + reopen (close-to-open: the client flushes at close and revalidates at open). The file
 * stays below SIZE_MAX_BYTES so the model fits in memory. At the end it checks the whole file,
 * closes it and writes the model to MODEL_OUT, for the caller to compare after dropping the
 * caches and to checksum. Prints the seed first; exit 0 when every read matched, 1 on the first
 * mismatch (offset, expected and seen byte, and the last operations), 2 on a system error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 MiB + 4097: several of the client's 1 MiB READ/WRITE sizes apart, not a multiple of a page. */
#define SIZE_MAX_BYTES (1048576 + 4097)
/* Why 64 KiB: above a page and below the 1 MiB rsize/wsize, so one op spans pages but a short
 * run still touches the whole file many times. */
#define OP_LEN_MAX 65536
#define HISTORY 16

static uint64_t rng;
static uint64_t next(void) { /* xorshift64* */
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}
static uint64_t below(uint64_t n) { return n ? next() % n : 0; }

static unsigned char model[SIZE_MAX_BYTES], buf[SIZE_MAX_BYTES];
static uint64_t size;
static char history[HISTORY][96];
static long done;

static void note(const char *fmt, long a, long b) {
    snprintf(history[done % HISTORY], sizeof history[0], fmt, done, a, b);
}
static int fail(const char *what) {
    printf("kc-fsx: op %ld: %s: %s\n", done, what, strerror(errno));
    return 2;
}
static int mismatch(uint64_t off, uint64_t len, const unsigned char *got, const char *when) {
    for (uint64_t i = 0; i < len; i++) {
        if (got[i] != model[off + i]) {
            printf("kc-fsx: MISMATCH %s at byte %llu: expected 0x%02x, read 0x%02x (size %llu)\n", when,
                   (unsigned long long)(off + i), model[off + i], got[i], (unsigned long long)size);
            break;
        }
    }
    printf("kc-fsx: the last operations:\n");
    for (long k = done - HISTORY + 1; k <= done; k++)
        if (k >= 0) printf("  %s\n", history[k % HISTORY]);
    return 1;
}
static int check_range(int fd, uint64_t off, uint64_t len, const char *when) {
    ssize_t n = pread(fd, buf, len, off);
    if (n < 0) return fail("pread");
    if ((uint64_t)n != len) {
        printf("kc-fsx: op %ld: short read %zd of %llu at %llu (size %llu)\n", done, n,
               (unsigned long long)len, (unsigned long long)off, (unsigned long long)size);
        return 1;
    }
    return memcmp(buf, model + off, len) ? mismatch(off, len, buf, when) : 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: kc-fsx FILE SEED OPS MODEL_OUT\n");
        return 2;
    }
    const char *file = argv[1];
    unsigned long long seed = strtoull(argv[2], 0, 10);
    long ops = strtol(argv[3], 0, 10);
    rng = seed * 0x9E3779B97F4A7C15ULL | 1;
    printf("kc-fsx: seed %llu, %ld ops on %s\n", seed, ops, file);
    fflush(stdout);
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail("open");
    long counts[6] = {0};
    for (done = 0; done < ops; done++) {
        uint64_t r = below(100), off, len;
        int rc;
        if (r < 40) { /* write */
            off = below(SIZE_MAX_BYTES - 1);
            len = 1 + below(OP_LEN_MAX);
            if (off + len > SIZE_MAX_BYTES) len = SIZE_MAX_BYTES - off;
            for (uint64_t i = 0; i < len; i++) buf[i] = (unsigned char)next();
            note("%ld write %ld +%ld", (long)off, (long)len);
            if (pwrite(fd, buf, len, off) != (ssize_t)len) return fail("pwrite");
            if (off > size) memset(model + size, 0, off - size);
            memcpy(model + off, buf, len);
            if (off + len > size) size = off + len;
            counts[0]++;
        } else if (r < 48) { /* truncate */
            uint64_t to = below(SIZE_MAX_BYTES + 1);
            note("%ld truncate %ld (was %ld)", (long)to, (long)size);
            if (ftruncate(fd, to) != 0) return fail("ftruncate");
            if (to > size) memset(model + size, 0, to - size);
            size = to;
            counts[1]++;
        } else if (r < 88) { /* read and compare */
            if (size == 0) continue;
            off = below(size);
            len = 1 + below(OP_LEN_MAX);
            if (off + len > size) len = size - off;
            note("%ld read %ld +%ld", (long)off, (long)len);
            if ((rc = check_range(fd, off, len, "read")) != 0) return rc;
            counts[2]++;
        } else if (r < 94) { /* fsync, then drop this file's clean pages */
            note("%ld fsync+fadvise (size %ld)", (long)size, 0);
            if (fsync(fd) != 0) return fail("fsync");
            if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) return fail("posix_fadvise");
            counts[3]++;
        } else if (r < 98) { /* close and reopen */
            note("%ld close+open (size %ld)", (long)size, 0);
            if (close(fd) != 0) return fail("close");
            if ((fd = open(file, O_RDWR)) < 0) return fail("reopen");
            counts[4]++;
        } else { /* the whole file */
            note("%ld read all (size %ld)", (long)size, 0);
            if ((rc = check_range(fd, 0, size, "whole-file read")) != 0) return rc;
            counts[5]++;
        }
    }
    int rc = check_range(fd, 0, size, "final read");
    if (rc) return rc;
    if (fsync(fd) != 0 || close(fd) != 0) return fail("final fsync/close");
    FILE *m = fopen(argv[4], "wb");
    if (!m || fwrite(model, 1, size, m) != size || fclose(m) != 0) return fail("model out");
    printf("kc-fsx: ok: %ld writes, %ld truncates, %ld reads, %ld fsyncs, %ld reopens, %ld whole-file "
           "reads; final size %llu\n", counts[0], counts[1], counts[2], counts[3], counts[4], counts[5],
           (unsigned long long)size);
    return 0;
}
