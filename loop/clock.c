/* SPDX-License-Identifier: Apache-2.0 */
/* The monotonic clock. */
#include <weft/clock.h>

#include <time.h>

uint64_t weft_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
