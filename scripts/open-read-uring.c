/* The kernel's cost of reading many small manifests with io_uring, against the plain
 * calls weir makes otherwise (BENCHMARKS.md, "Session 48"; the companion of
 * scripts/open-read-cost.c). Reads d0.yaml .. d<N-1>.yaml of DIR (the layout
 * `weir-bench propagation --keep-work` leaves) on one thread and prints the CPU time
 * (all of the process's threads, io_uring's workers included) per file.
 *
 *   apt-get install liburing-dev
 *   gcc -O2 -o /tmp/open-read-uring scripts/open-read-uring.c -luring
 *   taskset -c 1 nice -n -15 /tmp/open-read-uring DIR MODE 1000000
 *
 * MODE 5: `openat` relative to DIR, a read, the read that returns nothing, `close` (the
 * plain path); 1: the same with one read; 2: io_uring, 16 files a submission, each an
 * `openat` into a registered slot, a read and a close of the slot, linked; 3: the same on a
 * ring set up with IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN; 4: weir's
 * chain (mode 3 with one more read per file, which must find the end).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BATCH 16
#define BUF 16384

static char bufs[BATCH][BUF];
static char names[BATCH][64];
static char probe[BATCH];

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec +
           r.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR MODE N\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[2]);
    long n = atol(argv[3]);
    int dir_fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        perror(argv[1]);
        return 1;
    }
    long bytes = 0, errors = 0;
    double wall0 = seconds(), cpu0 = cpu_seconds();
    if (mode == 1 || mode == 5) {
        char name[64];
        for (long i = 0; i < n; i++) {
            snprintf(name, sizeof name, "d%ld.yaml", i);
            int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            if (fd < 0) {
                errors++;
                continue;
            }
            ssize_t r = read(fd, bufs[0], BUF);
            if (r > 0)
                bytes += r;
            if (mode == 5 && r >= 0 && read(fd, bufs[0] + r, BUF - r) != 0)
                errors++;
            close(fd);
        }
    } else {
        struct io_uring ring;
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        if (mode >= 3)
            p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        int rc = io_uring_queue_init_params(4 * BATCH, &ring, &p);
        if (rc == 0)
            rc = io_uring_register_files_sparse(&ring, BATCH);
        if (rc < 0) {
            fprintf(stderr, "io_uring: %s\n", strerror(-rc));
            return 1;
        }
        for (long i = 0; i < n; i += BATCH) {
            int m = n - i < BATCH ? (int)(n - i) : BATCH;
            for (int j = 0; j < m; j++) {
                snprintf(names[j], sizeof names[j], "d%ld.yaml", i + j);
                struct io_uring_sqe *s = io_uring_get_sqe(&ring);
                /* Direct descriptors take no O_CLOEXEC. */
                io_uring_prep_openat_direct(s, dir_fd, names[j], O_RDONLY | O_NONBLOCK, 0, j);
                s->flags |= IOSQE_IO_LINK;
                s->user_data = 1;
                /* A hard link: the short read (the file's end) does not cancel what
                 * follows. Offset -1: from the file's position. */
                s = io_uring_get_sqe(&ring);
                io_uring_prep_read(s, j, bufs[j], BUF, (__u64)-1);
                s->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
                s->user_data = 2;
                if (mode == 4) {
                    /* weir's chain: one more read, which must find the end. */
                    s = io_uring_get_sqe(&ring);
                    io_uring_prep_read(s, j, probe + j, 1, (__u64)-1);
                    s->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
                    s->user_data = 4;
                }
                s = io_uring_get_sqe(&ring);
                io_uring_prep_close_direct(s, j);
                s->user_data = 3;
            }
            int ops = mode == 4 ? 4 : 3;
            rc = io_uring_submit_and_wait(&ring, ops * m);
            if (rc < 0) {
                fprintf(stderr, "submit: %s\n", strerror(-rc));
                return 1;
            }
            for (int seen = 0; seen < ops * m; seen++) {
                struct io_uring_cqe *c;
                rc = io_uring_wait_cqe(&ring, &c);
                if (rc < 0) {
                    fprintf(stderr, "wait: %s\n", strerror(-rc));
                    return 1;
                }
                if (c->user_data == 2 && c->res > 0)
                    bytes += c->res;
                if (c->res < 0 || (c->user_data == 4 && c->res != 0))
                    errors++;
                io_uring_cqe_seen(&ring, c);
            }
        }
    }
    double wall = seconds() - wall0, cpu = cpu_seconds() - cpu0;
    printf("mode %d: %ld files, %ld bytes, %ld errors, wall %.2f s, cpu %.2f s, %.3f us a file\n",
           mode, n, bytes, errors, wall, cpu, cpu / n * 1e6);
    return 0;
}
