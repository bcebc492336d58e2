/* Cross-check of `qada bench`'s read-bandwidth probe in C: the same loop (a wrapping sum of
 * 64-bit words over 512 MiB, every thread a contiguous share, best of 5 passes).
 *
 *   gcc -O3 -march=native -fopenmp scripts/read_bandwidth.c -o /tmp/read_bandwidth
 *   OMP_NUM_THREADS=2 /tmp/read_bandwidth
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    const size_t n = (size_t)64 << 20; /* 64 Mi words = 512 MiB */
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "read_bandwidth: cannot allocate 512 MiB\n");
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e37;
    double best = 0.0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = omp_get_wtime();
        uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += buf[i];
        double secs = omp_get_wtime() - t0;
        sink ^= s;
        double bw = (double)(n * sizeof *buf) / secs;
        if (bw > best) best = bw;
    }
    printf("read bandwidth %.1f GB/s (%d threads; checksum %llu)\n", best / 1e9,
           omp_get_max_threads(), (unsigned long long)sink);
    free(buf);
    return 0;
}
