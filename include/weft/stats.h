/* SPDX-License-Identifier: Apache-2.0 */
/* weft/stats.h: the stats handler: bytes and messages in and out.
 *
 * Counts what passes it: inbound channel_read messages and, for weft_bufs,
 * their readable bytes; outbound writes likewise, file regions
 * (weft/file_region.h) with their bytes left, which it passes on as they
 * are (counted when the write passes, i.e. queued, not yet sent). Placed next
 * to the head it counts wire bytes; above a codec it counts messages. The
 * counters live in a weft_stats the caller owns, so one weft_stats can sum many
 * channels, on any loops: updates are relaxed atomic additions and any thread
 * may read them (weft_stats_get).
 */
#ifndef WEFT_STATS_H
#define WEFT_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Counters. Zero-initialise (or weft_stats_reset()); fields private. */
typedef struct weft_stats {
  _Atomic uint64_t bytes_in, bytes_out; /* weft_buf readable bytes */
  _Atomic uint64_t msgs_in, msgs_out;   /* messages of any type */
} weft_stats;

/** A plain copy of the counters. */
typedef struct weft_stats_snapshot {
  uint64_t bytes_in, bytes_out, msgs_in, msgs_out; /* as in weft_stats */
} weft_stats_snapshot;

/** Zeroes the counters. Any thread (not atomic as a whole). */
void weft_stats_reset(weft_stats *s);

/** Reads the counters (each read whole; not a consistent cut). Any thread. */
void weft_stats_get(const weft_stats *s, weft_stats_snapshot *out);

/**
 * Adds the stats handler at the tail end of `p`, counting into `stats`,
 * which must outlive the channel. Returns 0, WEFT_EINVAL (NULL stats),
 * WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_stats_add_last(weft_pipeline *p, const char *name, weft_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_STATS_H */
