/* The kernel's cost of reading many small manifests, per file, by the way they are
 * opened and read (BENCHMARKS.md, "Session 46"). Reads d0.yaml .. d<N-1>.yaml of DIR
 * (the layout `weir-bench propagation --keep-work` leaves) on one thread, and prints the
 * wall and CPU time of the whole pass.
 *
 *   gcc -O2 -o /tmp/open-read-cost scripts/open-read-cost.c
 *   taskset -c 1 /tmp/open-read-cost DIR MODE N
 *
 * MODE is a sum of: 1 open relative to a descriptor of DIR (`openat`) instead of by the
 * whole path; 2 `fstat` the file before reading it; 4 read once more after the first
 * read (until a read returns nothing). weir before session 46: 2 (whole path, `statx`
 * for the size, one read); since: 5 (`openat`, a read, the read that returns nothing).
 * Run each mode twice, alternated: the first pass over files written just before is
 * slower than the next ones.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR MODE N\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int mode = atoi(argv[2]);
    long n = atol(argv[3]);
    static char path[4096], buf[65536];
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        perror(dir);
        return 1;
    }
    double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_PROCESS_CPUTIME_ID);
    long bytes = 0;
    for (long i = 0; i < n; i++) {
        int fd;
        if (mode & 1) {
            snprintf(path, sizeof path, "d%ld.yaml", i);
            fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC);
        } else {
            snprintf(path, sizeof path, "%s/d%ld.yaml", dir, i);
            fd = open(path, O_RDONLY | O_CLOEXEC);
        }
        if (fd < 0) {
            perror(path);
            return 1;
        }
        if (mode & 2) {
            struct stat st;
            fstat(fd, &st);
        }
        ssize_t r = read(fd, buf, sizeof buf);
        if (r > 0)
            bytes += r;
        if (mode & 4)
            r = read(fd, buf, sizeof buf);
        close(fd);
    }
    wall = seconds(CLOCK_MONOTONIC) - wall;
    cpu = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    printf("mode %d: %ld files, %ld bytes, %.3f s wall, %.3f s CPU, %.2f us CPU a file\n",
           mode, n, bytes, wall, cpu, cpu * 1e6 / n);
    return 0;
}
