/* SPDX-License-Identifier: Apache-2.0 */
/* The io_uring TCP transport ("uring").
 *
 * Per loop, one ring (IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN |
 * TASKRUN_FLAG where the kernel has them, else COOP_TASKRUN, else none;
 * probed once and cached) and one provided buffer ring that every channel of
 * the loop receives into. The ring is the loop's weft_source:
 *
 *   poll    one io_uring_enter at most, for everything: it submits the SQEs
 *           queued since the last poll (flushes, re-arms, closes) and, under
 *           DEFER_TASKRUN, runs the deferred completions (GETEVENTS). It is
 *           skipped when nothing is queued and the kernel's IORING_SQ_TASKRUN
 *           flag says no completion work waits, so a busy-polling idle loop
 *           makes no system call. Then the CQ is reaped from shared memory.
 *   arm     enables the registered eventfd (disabled while busy polling, so
 *           the kernel does not signal it per completion), then re-checks the
 *           SQ, the TASKRUN flag and the CQ: > 0 if anything is pending.
 *   wakeup  reads the eventfd.
 *   sleep   (the ring alone on its loop, IORING_FEAT_EXT_ARG) the loop's
 *           sleep in one io_uring_enter: submits what is queued and waits
 *           for a completion, a one-shot poll of the loop's epoll fd, or
 *           the timeout; arm and the eventfd are not used then.
 *
 * SQEs are only queued by the channel ops; they reach the kernel in the next
 * poll (or earlier when the SQ is full), so all submissions of one loop
 * iteration share one io_uring_enter.
 *
 * Receiving: one multishot recv per channel selects buffers from the loop's
 * provided buffer ring. Each completion becomes a weft_buf wrapping the ring
 * slot (weft_buf_wrap); its free callback puts the slot back into the ring.
 * When handlers hold every slot, the multishot recv ends with ENOBUFS; the
 * bytes stay in the socket and the channel continues with single recvs into
 * pool memory until slots are back, then re-arms the multishot recv. No byte
 * is lost and a slow handler cannot stall the other channels for good.
 *
 * Every channel that got data in one reap gets one channel_read_complete
 * after the whole batch is dispatched (as tcp fires one per up to 16
 * reads), so an echo flushes once per batch, not once per recv CQE.
 *
 * Sending: at most one send in flight per channel keeps the byte order; it
 * gathers up to UR_MAX_IOV flushed buffers in one sendmsg (send for one),
 * from a send context taken from a per-loop cache (an idle channel holds
 * none). The buffers are retained while the kernel may read them: a close
 * fails the outbound queue at once, but the memory lives until the CQE. Sends
 * of at least send_zc_min bytes ([transport.uring]) use SENDMSG_ZC; their
 * buffers are held until the notification CQE, and their bytes count as
 * pinned (weft_outbound_pinned) until then, against the channel's
 * watermarks and output limit. When a notification reports that
 * the kernel copied anyway (loopback, or a device without scatter-gather), the
 * channel stops using zero copy: the copy plus the notification cost more.
 *
 * connect and close go through the ring (the output's shutdown is a plain
 * shutdown(2): see send.c's shutdown_now). Every request with a
 * CQE still to come holds a channel reference, so the channel's memory
 * outlives its requests; a close cancels them all (ASYNC_CANCEL by fd). A
 * channel closed while the kernel still holds zero-copy buffers keeps its
 * socket (output shut down, so the peer sees the same FIN) until the last
 * notification: a closed socket would live on as an orphan the loop could
 * not abort. Loop stop resets such sockets (SO_LINGER 0), which frees the
 * buffers at once, then cancels and reaps every request left, so it ends
 * in bounded time with every buffer back.
 *
 * Accepting at the fd limit: the multishot accept ends with EMFILE; the
 * accept guard (transport_plugin.h) closes the waiting connection with its
 * spare descriptor, and the listener polls for the next one before it
 * accepts again (accept fails at the limit even on an empty backlog).
 *
 * Where io_uring cannot run, the probe says why and names transport=tcp;
 * with `[transport.uring] fallback = tcp` the registry hands out the "tcp"
 * transport for uring:// endpoints instead (this plugin knows no other).
 *
 * liburing 2.3 (Debian 12) lacks io_uring_setup_buf_ring and the SEND_ZC
 * usage report flags; both are written here.
 */

/* transports/uring/uring_internal.h: what the files of the uring plugin
 * share: the per-loop and per-channel types, the tuning constants, a few
 * small inline helpers, and the weft__uring_* functions that one file
 * defines and another calls. uring.h stays the plugin's exported header
 * (the ops struct and the counters for tests). The files:
 *
 *   probe.c    [transport.uring] settings, the probe, ring creation
 *   loop.c     per-loop state: the ring as the loop's source (poll, arm,
 *              wakeup), the provided buffer ring, loop start and stop, and
 *              the dispatch of completions to the files below
 *   listen.c   listeners: the multishot accept
 *   recv.c     receiving: multishot recv on the buffer ring, plain recv
 *   send.c     sending: send, sendmsg, SENDMSG_ZC; output shutdown
 *   channel.c  socket options, connecting, channel lifecycle, the ops
 */
#ifndef WEFT_TRANSPORTS_URING_URING_INTERNAL_H
#define WEFT_TRANSPORTS_URING_URING_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <liburing.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring.h"

/* ---- liburing 2.3 compatibility (constants from Linux 6.2 uapi) ---- */

#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3) /* sqe->ioprio of SEND_ZC */
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31) /* res of the notif CQE */
#endif

/* ---- tuning ---- */

#define UR_SQ_ENTRIES 1024
#define UR_CQ_ENTRIES 8192 /* multishot recvs make many CQEs per SQE */
#define UR_MAX_IOV 256     /* buffers gathered per sendmsg (IOV_MAX 1024) */
#define UR_SMALL_IOV 4     /* buffers of a small send context */
#define UR_SEND_CACHE 16   /* idle full (UR_MAX_IOV) send contexts per loop */
#define UR_SEND_CACHE_SMALL                                                    \
  256 /* idle small send contexts per loop (~220 B each): one per channel      \
         with a send in flight, for up to 256 such channels, so a server's     \
         replies (one or two buffers per send) reuse them instead of a         \
         malloc and free per send */
#define UR_REAP_MAX 256 /* CQEs copied out per poll, at most */
#define UR_BGID 0       /* the provided buffer group of every loop */
#define UR_BUF_COUNT_DEFAULT 256u
#define UR_BUF_SIZE_DEFAULT 16384u
#define UR_SEND_ZC_MIN_DEFAULT 65536u
#define UR_PLAIN_RECV_SIZE 16384u /* single recv while the ring is empty */
#define UR_FINI_WAIT_NS (2000u * 1000u * 1000u) /* drain at loop stop */
#define UR_LINGER_TIMEOUT_MS 60000 /* TCP_USER_TIMEOUT while lingering */

/* ---- conversions at the edge ---- */

static inline int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- settings: [transport.uring] (probe.c) ---- */

/* Read at loop start; written by weft__uring_config_set, which the registry
 * serialises and which happens before the loops that use it start. */
typedef struct ur_settings {
  unsigned buf_count;   /* provided buffers per loop, a power of two */
  unsigned buf_size;    /* bytes each */
  unsigned send_zc_min; /* bytes; 0 = never zero copy */
} ur_settings;

/** The settings in force; loops copy them at loop start. */
extern ur_settings weft__uring_settings;

/** The ops' config_keys: buf_count, buf_size, send_zc_min. */
extern const weft_transport_key weft__uring_keys[];

/**
 * The ops' config_set: sets one of weft__uring_keys from `value`. Returns 0, or
 * WEFT_EINVAL with the valid values in `why`. Any thread; the registry
 * serialises the calls, which come before the loops that use them start.
 */
int weft__uring_config_set(const char *key, const char *value, char *why,
                           size_t why_len);

/* ---- the probe (probe.c) ---- */

/** SENDMSG_ZC is there (6.1): written by the probe, read after it. */
extern bool weft__uring_probed_send_zc;

/**
 * The ops' probe: checks on a thread of its own that io_uring runs here
 * (setup flags, opcodes, provided buffer rings). Returns 0, or an error
 * with a sentence in `why` naming the cause and transport=tcp. Any thread.
 */
int weft__uring_probe(char *why, size_t len);

/**
 * Creates `ring` (`entries` SQEs; `cq` CQEs when > 0) with the best setup
 * flags this kernel takes, stored in `*flags_out`. Returns 0 or
 * io_uring_setup's negative errno (EPERM, ENOSYS, ENOMEM, ...). The calling
 * thread is the ring's single issuer from then on.
 */
int weft__uring_ring_create(struct io_uring *ring, unsigned entries,
                            unsigned cq, unsigned *flags_out);

/**
 * Ends `ring` (io_uring_queue_exit), telling ThreadSanitizer builds that
 * this thread's accesses to its memory come before any later ring's mapped
 * at the same address (liburing maps rings with raw system calls, which
 * TSan does not see). The thread that used the ring.
 */
void weft__uring_ring_exit(struct io_uring *ring);

/**
 * Registers a provided buffer ring of `entries` slots as group `bgid` of
 * `ring` (liburing 2.4's io_uring_setup_buf_ring); `*out` is freed by the
 * caller after unregistering. Returns 0, WEFT_ENOMEM or the kernel's
 * error. The ring's thread.
 */
int weft__uring_buf_ring_setup(struct io_uring *ring, unsigned entries,
                               int bgid, struct io_uring_buf_ring **out);

/* ---- per-loop state ---- */

/* What a CQE's user_data points at. */
enum ur_kind {
  UR_OP_ACCEPT = 1,
  UR_OP_ACCEPT_POLL, /* a listener at the fd limit waits for a connection */
  UR_OP_RECV,
  UR_OP_PLAIN_RECV,
  UR_OP_SEND,
  UR_OP_SEND_ZC,
  UR_OP_CONNECT,
  UR_OP_MISC,  /* cancel, close, nop: only counted */
  UR_OP_EPOLL, /* the poll of the loop's epoll fd while asleep in the ring */
};

typedef struct ur_op {
  uint8_t kind;
} ur_op;

typedef struct ur_listener ur_listener;
typedef struct ur_channel ur_channel;
typedef struct ur_send ur_send;

typedef struct ur_loop {
  weft_loop *loop;
  weft_source source;
  struct io_uring ring;
  unsigned setup_flags;
  int efd;           /* registered eventfd: in the loop's epoll set */
  bool evfd_on;      /* the kernel signals efd (only while arming/asleep) */
  bool stopping;     /* loop_fini is draining */
  ur_op op_misc;     /* the user_data of every UR_OP_MISC request */
  ur_op op_epoll;    /* UR_OP_EPOLL: the loop's epoll fd, polled by the ring */
  bool epoll_polled; /* that poll is in the kernel (one-shot) */
  /* the provided buffer ring */
  struct io_uring_buf_ring *br;
  uint8_t *bufs; /* buf_count * buf_size bytes */
  unsigned buf_count, buf_size, buf_mask;
  unsigned bufs_out; /* slots held by pipelines (wrapped weft_bufs) */
  /* Slots received while their channel did not read, by slot id: the
   * wrapped buffer and the next held slot of the same channel (recv.c,
   * "Reads that arrive while reading is off"). buf_count entries each. */
  weft_buf **held_buf;
  uint16_t *held_next;
  bool orphaned; /* the ring is gone: the last slot back frees this */
  unsigned send_zc_min;
  uint64_t inflight; /* requests whose CQE is still to come */
  ur_listener *listeners;
  ur_channel *lingering; /* closed, zero-copy notifications to come */
  /* channels that got data in this reap: read_complete fires after it */
  ur_channel *rc_head, *rc_tail;
  /* The read budget (recv.c, "The read budget"): polls so far, the epoch
   * of every channel's count, and the channels that spent theirs, whose
   * held reads the next poll delivers first (each holds a reference). */
  uint32_t epoch;
  ur_channel *yield_head, *yield_tail;
  /* cached send contexts by class (UR_SEND_SMALL, UR_SEND_FULL) */
  ur_send *send_free[2];
  unsigned send_free_n[2];
  weft__uring_stats stats;
} ur_loop;

struct ur_listener {
  ur_op op;      /* UR_OP_ACCEPT */
  ur_op op_poll; /* UR_OP_ACCEPT_POLL */
  weft_listener *l;
  ur_loop *ul;
  int fd;
  bool armed;              /* the multishot accept is in the kernel */
  bool polling;            /* the poll for a connection is in the kernel */
  bool closing;            /* freed when neither is */
  weft_accept_guard guard; /* closes new connections at the fd limit */
  weft_timer backoff;
  ur_listener *prev, *next;
};

enum ur_recv_state {
  UR_RECV_IDLE,       /* nothing in the kernel */
  UR_RECV_ARMED,      /* multishot recv on the buffer ring */
  UR_RECV_CANCELLING, /* multishot recv, cancel requested */
  UR_RECV_PLAIN,      /* single recv into plain_buf */
};

/* The two sizes of send context: UR_SMALL_IOV or UR_MAX_IOV entries. */
enum { UR_SEND_SMALL = 0, UR_SEND_FULL = 1 };

/* Entries of iov and bufs in a send context of class `cls`. */
static inline int ur_send_cap(int cls) {
  return cls == UR_SEND_SMALL ? UR_SMALL_IOV : UR_MAX_IOV;
}

/* One send in flight: what the kernel reads (msg, iov) and the buffers
 * retained until its CQE (for SENDMSG_ZC, until the notification CQE).
 * Taken from a per-loop cache, so an idle channel holds none. Two sizes,
 * so that the common send of a few buffers takes ~220 bytes, not the
 * ~6 KiB of UR_MAX_IOV entries, and the loop can cache one per channel
 * sending. */
typedef struct ur_send {
  ur_op op; /* UR_OP_SEND or UR_OP_SEND_ZC */
  weft_channel *ch;
  int n;         /* entries of iov and bufs in use */
  int cls;       /* UR_SEND_SMALL or UR_SEND_FULL: ur_send_cap entries */
  size_t pinned; /* bytes sent that wait for the notification (zero copy) */
  struct msghdr msg;
  struct iovec *iov; /* ur_send_cap(cls), in the same allocation */
  weft_buf **bufs;   /* ur_send_cap(cls), in the same allocation */
  struct ur_send *next_free;
} ur_send;

/* Per-channel state (channel_priv_size bytes, zeroed by the core). */
struct ur_channel {
  weft_channel *ch;
  ur_loop *ul;
  int fd; /* -1 once closed */
  bool has_fd;
  bool reading;
  bool connecting;
  bool send_inflight;
  bool in_consume; /* weft_outbound_consumed on the stack */
  bool shutdown_pending;
  bool output_shut;
  bool zc_off;         /* the kernel copied a zero-copy send: stop trying */
  bool rc_pending;     /* on the loop's read_complete list (holds a ref) */
  bool lingering;      /* closed; the socket waits for zc_pending to reach 0 */
  unsigned zc_pending; /* SENDMSG_ZC notifications still to come */
  int linger_fd;       /* the socket while lingering */
  ur_channel *linger_prev, *linger_next;
  uint8_t recv_state;
  weft_sockopts opts; /* set before the socket existed, applied after */
  ur_op op_recv, op_plain, op_connect;
  weft_buf *plain_buf;
  /* What arrived while the channel did not read, delivered when it reads
   * again (recv.c): a FIFO of ring slots, or one plain recv's buffer. */
  unsigned held_n;               /* slots held */
  uint16_t held_head, held_tail; /* slot ids, while held_n > 0 */
  weft_buf *held_plain;
  bool deliver_queued; /* weft__uring_recv_resume's task is queued */
  /* The read budget of this iteration (recv.c), per epoch of the loop */
  bool yielded;  /* spent: on the loop's yield list, completions held */
  bool eof_held; /* the peer's EOF came behind held reads: after them */
  weft_read_meter rb;
  ur_channel *yield_next;
  struct sockaddr_storage peer; /* connect's address */
  socklen_t peer_len;
  ur_channel *rc_next;
};

#define container_of(p, type, member)                                          \
  ((type *)(void *)((char *)(p)-offsetof(type, member)))

static inline ur_channel *ur_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

static inline ur_loop *loop_state_of(weft_loop *loop, int *err) {
  return weft_transport_loop_state(&weft__transport_uring, loop, err);
}

/* ---- helpers for channel requests ---- */

static inline bool channel_open(const ur_channel *uc) {
  return uc->fd >= 0 && weft_channel_state_of(uc->ch) == WEFT_CHANNEL_ACTIVE;
}

/* A request that reports back holds the channel until its last CQE. */
static inline void request_started(ur_channel *uc) {
  weft_channel_retain(uc->ch);
  uc->ul->inflight++;
}

static inline void request_ended(ur_loop *ul, weft_channel *ch) {
  ul->inflight--;
  weft_channel_release(ch);
}

/* A request whose result does not matter (cancel, close, nop):
 * only counted, so that loop stop waits for it too. */
static inline void request_misc(ur_loop *ul, struct io_uring_sqe *sqe) {
  io_uring_sqe_set_data(sqe, &ul->op_misc);
  ul->inflight++;
}

/* ---- the loop (loop.c) ---- */

/**
 * An SQE of `ul`'s ring, submitting what is queued when the SQ is full.
 * NULL when the kernel refuses SQEs. Loop thread.
 */
struct io_uring_sqe *weft__uring_get_sqe(ur_loop *ul);

/**
 * Queues a cancel of every request on socket `fd`, hard-linked to the SQE it
 * returns, which the caller fills (the close): it runs after the
 * cancel. NULL when the ring gives no SQE (the caller then acts at once).
 * Loop thread.
 */
struct io_uring_sqe *weft__uring_cancel_linked(ur_loop *ul, int fd);

/**
 * Cancels every request on socket `fd` and closes it, both through the ring
 * (the close hard-linked after the cancel); closes it at once when the ring
 * gives no SQE. Loop thread.
 */
void weft__uring_cancel_and_close(ur_loop *ul, int fd);

/** Puts slot `bid` back into `ul`'s provided buffer ring. Loop thread. */
void weft__uring_buf_ring_put(ur_loop *ul, unsigned bid);

/**
 * weft_buf free callback of a wrapped ring slot (`arg` is the ur_loop):
 * the slot goes back to the ring; after loop_fini, the last slot back
 * frees the loop state. Loop thread (the pool routes remote releases).
 */
void weft__uring_slot_returned(void *base, size_t capacity, void *arg);

/**
 * The ops' loop_init: the ring, its eventfd and the provided buffer ring,
 * added to `loop` as a source. Returns 0, or the error (logged, naming
 * transport=tcp). Loop thread.
 */
int weft__uring_loop_init(weft_loop *loop, void **loop_state);

/**
 * The ops' loop_fini: closes the listeners, cancels and drains what is in
 * the kernel, ends the ring; the state goes now or with the last slot a
 * pipeline still holds. Loop thread, after the core closed the channels.
 */
void weft__uring_loop_fini(weft_loop *loop, void *loop_state);

/* ---- listeners (listen.c) ---- */

/**
 * A CQE of `ln`'s multishot accept: hands the socket to the listener; when
 * the multishot ended, re-arms it, frees a closing listener, or, at the fd
 * limit, closes the waiting connection and polls for the next (EMFILE,
 * ENFILE), or pauses accepting (kernel memory short). Loop thread.
 */
void weft__uring_accept_done(ur_listener *ln, int32_t res, uint32_t flags);

/**
 * The CQE of `ln`'s poll at the fd limit: a connection waits, so the
 * multishot accept is armed again (it accepts, or ends with EMFILE once
 * more); a closing listener is freed. Loop thread.
 */
void weft__uring_accept_poll_done(ur_listener *ln, int32_t res);

/**
 * The ops' listen: listens on `ep` and arms a multishot accept. Returns 0,
 * WEFT_ENOMEM, or the error of weft_socket_listen. The listener's loop.
 */
int weft__uring_listen(weft_listener *l, const weft_endpoint *ep, int backlog);

/**
 * Unlinks `ln`, cancels its accept and closes its socket through the ring;
 * the memory goes with the accept's last CQE, or now. Loop thread.
 */
void weft__uring_listener_close(ur_listener *ln);

/** The ops' listen_close: nothing if loop_fini closed it first. */
void weft__uring_listen_close(weft_listener *l);

/**
 * The ops' listen_address: the bound address into `buf`. Returns 0,
 * WEFT_ECLOSED, or weft_socket_address's error. Loop thread.
 */
int weft__uring_listen_address(weft_listener *l, char *buf, size_t len);

/* ---- receiving (recv.c) ---- */

/**
 * Starts `uc`'s recv when it reads, none is in the kernel and nothing is
 * held unread: multishot on the buffer ring, or one recv into pool memory
 * while the ring is empty.
 * Loop thread; a failure (no SQE, no memory) closes the channel.
 */
void weft__uring_recv_arm(ur_channel *uc);

/**
 * Fires channel_read_complete for each channel that got data in this reap
 * and drops the list's references. Loop thread, after a reap's dispatch.
 */
void weft__uring_fire_read_completes(ur_loop *ul);

/**
 * A CQE of `uc`'s multishot recv: the bytes to the pipeline; at its end,
 * EOF, error or re-arm. Loop thread; an error closes the channel.
 */
void weft__uring_recv_done(ur_channel *uc, int32_t res, uint32_t flags);

/** The CQE of `uc`'s single recv into pool memory, as weft__uring_recv_done. */
void weft__uring_plain_recv_done(ur_channel *uc, int32_t res);

/**
 * Reading turned on: arms the next recv, or, when something arrived while
 * reading was off, queues a task that delivers it first (each buffer to
 * channel_read, then one channel_read_complete), stopping if reading turns
 * off again, and arms once nothing is held. A task, so that what a decoder
 * kept from before goes first: the core fires weft_event_read_resumed
 * right after set_read(true), and a decoder that pauses again on its own
 * cumulation then gets nothing more, as over tcp (decoder.h). Loop thread.
 */
void weft__uring_recv_resume(ur_channel *uc);

/** Releases what `uc` holds unread (the channel is closing). Loop thread. */
void weft__uring_recv_drop_held(ur_channel *uc);

/**
 * Cancels `uc`'s multishot recv when it is armed; the completions already
 * on their way are held (recv.c). Returns 0 or WEFT_EIO (no SQE). Loop
 * thread.
 */
int weft__uring_recv_cancel(ur_channel *uc);

/**
 * The start of a poll: a new iteration's read budgets, and the channels
 * that spent theirs in the last one get their held reads first, up to the
 * new budget each. Returns the reads delivered plus the channels served
 * (work for the selector). Loop thread.
 */
int weft__uring_recv_yielded(ur_loop *ul);

/** Drops the yield list's references (loop stop). Loop thread. */
void weft__uring_recv_fini(ur_loop *ul);

/* ---- sending (send.c) ---- */

/**
 * The CQE of send or sendmsg `s`: releases its buffers, consumes the bytes
 * sent, starts the next send. Loop thread; an error closes the channel.
 */
void weft__uring_send_done(ur_loop *ul, ur_send *s, int32_t res);

/**
 * A CQE of SENDMSG_ZC `s`: the bytes, as weft__uring_send_done, then the
 * notification that releases the buffers (and turns zero copy off for the
 * channel when the kernel copied). Loop thread; an error closes the channel.
 */
void weft__uring_send_zc_done(ur_loop *ul, ur_send *s, int32_t res,
                              uint32_t flags);

/**
 * The ops' flush: starts a send unless one is in flight. Returns 0; a
 * failure closes the channel. Loop thread.
 */
int weft__uring_flush(weft_channel *ch);

/**
 * The ops' shutdown_output, after the last queued byte. Returns 0, or
 * WEFT_ENOTCONN without a socket. Loop thread.
 */
int weft__uring_shutdown_output(weft_channel *ch);

/* ---- channels (channel.c) ---- */

/**
 * Closes `uc`'s channel with `err`, the reason naming `what` and the error;
 * nothing if it is no longer open. Loop thread.
 */
void weft__uring_channel_failed(ur_channel *uc, const char *what, int err);

/**
 * The CQE of `uc`'s connect: arms the recv on success, reports the result
 * to the core, drops the request's reference. Loop thread.
 */
void weft__uring_connect_done(ur_channel *uc, int32_t res);

/**
 * One of `uc`'s zero-copy sends is done with its buffers (the notification
 * came, or none will): closes the socket of a lingering channel after the
 * last. Loop thread.
 */
void weft__uring_zc_released(ur_channel *uc);

/**
 * Loop stop: resets (SO_LINGER 0) and closes the socket of every lingering
 * channel, so the kernel drops the unacknowledged bytes and sends the
 * notifications that free their buffers. Loop thread.
 */
void weft__uring_abort_lingering(ur_loop *ul);

#endif
