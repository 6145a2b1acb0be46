/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/uring.h: the io_uring TCP transport's exported symbol
 * and its internal counters (for tests and benchmarks; not public API).
 *
 * Settings: [transport.uring] buf_count, buf_size and send_zc_min, and the
 * registry's fallback (docs/transports/uring.md).
 */
#ifndef WEFT_TRANSPORTS_URING_URING_H
#define WEFT_TRANSPORTS_URING_URING_H

#include <stdint.h>

#include <weft/loop.h>
#include <weft/transport_plugin.h>

/**
 * The "uring" transport (io_uring, provided buffer ring); see
 * uring_internal.h.
 */
extern const weft_transport_ops weft__transport_uring;

/** Counters of one loop's uring instance (all since loop start). */
typedef struct weft__uring_stats {
  uint64_t enters;      /* io_uring_enter calls made by poll and sleep */
  uint64_t sleeps;      /* of those, the loop's sleeps in the ring */
  uint64_t cqes;        /* completions reaped */
  uint64_t recv_bufs;   /* provided buffers delivered to pipelines */
  uint64_t enobufs;     /* multishot recvs ended by an empty buffer ring */
  uint64_t plain_recvs; /* single recvs into pool memory (ring empty) */
  uint64_t sends;       /* send/sendmsg submitted */
  uint64_t zc_sends;    /* SENDMSG_ZC submitted */
  uint64_t zc_copied;   /* zero-copy sends the kernel had to copy */
  uint32_t buf_count;   /* provided buffers in the ring */
  uint32_t buf_size;    /* bytes each */
  uint32_t bufs_out;    /* provided buffers held by pipelines now */
  uint32_t setup_flags; /* IORING_SETUP_* the ring was created with */
} weft__uring_stats;

/**
 * Copies the counters of `loop`'s uring instance into `*out`. Returns 0, or
 * WEFT_ENOENT when the loop has no uring instance (as where the registry
 * handed out the tcp fallback). Loop thread.
 */
int weft__uring_stats_get(weft_loop *loop, weft__uring_stats *out);

#endif
