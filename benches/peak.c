/* The machine's peak rate of single-precision fused multiply-adds, for the roofline figures of
   docs/performance.md ("How close the products run to the machine's peak").

   Each thread runs 16 independent chains of vector fused multiply-adds (enough to cover the
   latency of the two FMA units of a core), 2^29 vector multiply-adds a thread, with no loads
   or stores; the rate is printed per run, five runs.

     cc -O2 -march=native -fopenmp benches/peak.c -o /tmp/peak
     OMP_NUM_THREADS=1 /tmp/peak; OMP_NUM_THREADS=2 /tmp/peak

   Vectors are written with GCC's vector extensions, 64 bytes wide: on a machine without
   AVX-512 the compiler splits them into two or four narrower operations, and the figure is
   that machine's peak at its own width. */
#include <omp.h>
#include <stdio.h>
#include <time.h>

typedef float vf __attribute__((vector_size(64)));

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const long steps = 1L << 25; /* 16 chains x 2^25 steps = 2^29 vector multiply-adds */
  for (int run = 0; run < 5; run++) {
    double t0 = now(), sink = 0.0;
    int threads = 1;
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
      threads = omp_get_num_threads();
      const vf b = (vf){0} + 1.0000001f, c = (vf){0} + 1e-9f;
      /* Sixteen chains in named variables, so that they live in registers. */
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define INIT(i) vf a##i = (vf){0} + (float)i;
#define STEP(i) a##i = a##i * b + c;
#define SUM(i) s += a##i;
      CHAINS(INIT)
      for (long n = 0; n < steps; n++) {
        CHAINS(STEP)
      }
      vf s = (vf){0};
      CHAINS(SUM)
      for (int l = 0; l < 16; l++) sink += s[l];
    }
    double dt = now() - t0;
    double flops = (double)threads * steps * 16 * 16 * 2;
    printf("%d thread(s): %.1f GFLOP/s (%.3f s, checksum %g)\n", threads, flops / dt / 1e9, dt, sink);
  }
  return 0;
}
