/* SPDX-License-Identifier: Apache-2.0 */
#include "bench_util.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool pin_on = true;

void bench_pin_enable(bool on) { pin_on = on; }

void bench_pin_self(int cpu) {
  if (!pin_on)
    return;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(n > 0 ? cpu % (int)n : 0, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int bench_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
