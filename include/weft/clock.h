/* SPDX-License-Identifier: Apache-2.0 */
/* weft/clock.h: the one clock weft uses. */
#ifndef WEFT_CLOCK_H
#define WEFT_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Nanoseconds on CLOCK_MONOTONIC (since an arbitrary point, never jumps with
 * wall-clock changes). Timer deadlines and busy-poll windows use this clock.
 * Any thread; read through the vDSO, no system call (its cost:
 * docs/benchmarks.md).
 */
uint64_t weft_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CLOCK_H */
