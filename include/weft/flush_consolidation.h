/* SPDX-License-Identifier: Apache-2.0 */
/* weft/flush_consolidation.h: fewer flushes under load (Netty's
 * FlushConsolidationHandler).
 *
 * A flush costs a system call or a doorbell. While the channel is reading
 * (between channel_read and channel_read_complete), flushes that pass this
 * handler are held back and sent as one at channel_read_complete, so a
 * handler answering each request of a pipelined batch with write_and_flush
 * causes one flush per batch. Every `explicit_flush_after_flushes` held
 * flushes one goes through anyway, so a long read burst does not queue
 * without bound. Outside a read a flush goes through at once (no added
 * latency when idle), unless consolidate_when_no_read is set: then flushes
 * are gathered into one task run on the channel's loop after the current
 * one (Netty's consolidateWhenNoReadInProgress). Held flushes also go
 * through before a close and when the handler is removed. Put it next to
 * the head (add it first). Loop thread.
 */
#ifndef WEFT_FLUSH_CONSOLIDATION_H
#define WEFT_FLUSH_CONSOLIDATION_H

#include <stdbool.h>

#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Options. Initialise with weft_flush_consolidation_options_init(). */
typedef struct weft_flush_consolidation_options {
  int explicit_flush_after_flushes; /* held flushes before one goes through;
                                       default 256, must be > 0 */
  bool consolidate_when_no_read;    /* default false */
} weft_flush_consolidation_options;

/** Fills `o` with the defaults documented on each field. */
void weft_flush_consolidation_options_init(weft_flush_consolidation_options *o);

/**
 * Adds the handler at the tail end of `p`. `opts` may be NULL. Returns 0,
 * WEFT_EINVAL, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_flush_consolidation_add_last(
    weft_pipeline *p, const char *name,
    const weft_flush_consolidation_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_FLUSH_CONSOLIDATION_H */
