/* transports/uring/uring.h: the io_uring TCP transport's exported symbol
 * and its internal counters (for tests and benchmarks; not public API).
 *
 * Settings, read from the environment (documented in docs/transport-uring.md):
 *
 *   WEFT_URING_FALLBACK=tcp   where io_uring cannot run (seccomp EPERM,
 *                             ENOSYS, memlock limit), "uring" logs why once
 *                             and runs every uring:// channel over the epoll
 *                             "tcp" transport instead of failing
 *   WEFT_URING_BUF_COUNT=N    provided receive buffers per loop (power of
 *                             two, 1..32768; default 256), read at loop start
 *   WEFT_URING_BUF_SIZE=B     bytes per provided buffer (default 16384)
 *   WEFT_URING_SEND_ZC_MIN=B  sends of at least B bytes use SEND_ZC
 *                             (default 65536; 0 = never)
 */
#ifndef WEFT_TRANSPORTS_URING_URING_H
#define WEFT_TRANSPORTS_URING_URING_H

#include <stdint.h>

#include <weft/loop.h>
#include <weft/transport.h>

/** The "uring" transport (io_uring, provided buffer ring); see uring.c. */
extern const weft_transport_ops weft__transport_uring;

/** Counters of one loop's uring instance (all since loop start). */
typedef struct weft__uring_stats {
  uint64_t enters;      /* io_uring_enter calls made by poll and arm */
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
 * WEFT_ENOENT when the loop has no uring instance (or runs the tcp
 * fallback). Loop thread.
 */
int weft__uring_stats_get(weft_loop *loop, weft__uring_stats *out);

#endif
