/* SPDX-License-Identifier: Apache-2.0 */
/* bench_util.h: the small helpers every benchmark program here needs (the
 * clock, CPU pinning, sorting samples). They use no weft, so weft-ucx-peer,
 * which measures UCX without weft, shares them too. Any thread. */
#ifndef WEFT_BENCH_UTIL_H
#define WEFT_BENCH_UTIL_H

#include <stdbool.h>
#include <stdint.h>

/** CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/**
 * Pins the calling thread to CPU `cpu` modulo the CPUs online (0 if that
 * count is unknown). A failure is ignored: the thread then runs unpinned.
 */
void bench_pin_self(int cpu);

/**
 * Turns bench_pin_self on (the default) or off, for the whole process.
 * Off: every thread stays where the scheduler puts it (--no-pin). On a
 * shared machine a pinned thread cannot leave a CPU that another
 * session's task holds, and waited 0.3-0.9 s there
 * (docs/journal/2026-11-22-ucx.md, UCX, "The 1 MiB stall"). Main thread, before
 * any thread pins itself.
 */
void bench_pin_enable(bool on);

/** qsort comparator for uint64_t, ascending. */
int bench_cmp_u64(const void *a, const void *b);

#endif
