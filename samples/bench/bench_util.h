/* bench_util.h: the small helpers every benchmark program here needs (the
 * clock, CPU pinning, sorting samples). They use no weft, so weft-ucx-peer,
 * which measures UCX without weft, shares them too. Any thread. */
#ifndef WEFT_BENCH_UTIL_H
#define WEFT_BENCH_UTIL_H

#include <stdint.h>

/** CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/**
 * Pins the calling thread to CPU `cpu` modulo the CPUs online (0 if that
 * count is unknown). A failure is ignored: the thread then runs unpinned.
 */
void bench_pin_self(int cpu);

/** qsort comparator for uint64_t, ascending. */
int bench_cmp_u64(const void *a, const void *b);

#endif
