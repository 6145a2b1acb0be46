/* The raw ibverbs RC transport ("verbs"): reliable-connected queue pairs,
 * set up with rdma_cm (IP:port addressing, RoCE and InfiniBand alike).
 *
 * Per loop:
 *   - one rdma_cm event channel; its fd is a weft_source (connection setup,
 *     accept, disconnects);
 *   - per device (normally one): a PD, a CQ with a completion channel whose
 *     fd is a weft_source, an SRQ shared by every QP of the loop, and a
 *     registered slab of fixed-size receive slots. The loop's buffer pool
 *     registers every slab with the PD once (weft_pool_add_slab_hook), so a
 *     send from pool memory needs no registration on the data path.
 * Per channel: one RC QP (send queue of its own, receives from the SRQ).
 *
 * Receive path: after each CQ poll batch the SRQ is refilled at once with
 * exactly as many receives as were consumed, in one chained post, before
 * any handler runs. A received message goes up as a weft_buf wrapping its
 * slot; the slot returns to the free set when the buffer is released (the
 * refill takes fresh slots, so a held buffer never starves the SRQ until
 * the spare slots are all held; then credits stop, see below).
 *
 * Send path: flush gathers the flushed outbound buffers into SEND_WITH_IMM
 * work requests of at most the peer's receive size (up to VERBS_MAX_SGE
 * buffers each), inline up to the device's max_inline_data, otherwise
 * straight from registered memory (a buffer outside registered memory is
 * copied into a pool buffer), chained into one ibv_post_send. Only the last
 * work request of a post (and one every half send queue) is signaled; a
 * signaled completion retires every earlier one, so the send queue never
 * overflows and the CQ gets one completion per post.
 *
 * Flow control (credits, counted in messages): the handshake's private data
 * gives each side VERBS_CREDITS credits for the peer. A data message costs
 * one. A credit comes back once the receive it used is delivered to the
 * handlers and reposted; returned credits ride in imm_data of any message,
 * or in a zero-length credit message once VERBS_CREDIT_THRESHOLD of them
 * wait and no data is going out. Credit messages and the close message
 * (FIN) need no credit: the SRQ keeps VERBS_CTRL_RESERVE receives per
 * channel for them (a side sends at most one credit message per
 * VERBS_CREDIT_THRESHOLD data messages it received, so the reserve covers
 * them). The SRQ is sized for every channel's credits plus reserve, so a
 * receive is always posted for what arrives: no RNR in normal operation.
 * While the slab has no free slot for a refill, no credit is returned.
 *
 * Closing: an orderly close sends FIN after the data already posted, waits
 * for its completion (at most VERBS_LINGER_NS), then disconnects. A peer
 * that disconnects without FIN, a QP error or a transport timeout closes
 * the channel with exception_caught.
 *
 * This plugin uses the public headers only, as an out-of-tree plugin would.
 */

/* transports/verbs/verbs_internal.h: what the files of the verbs plugin
 * share: the tuning constants and wire formats, the state of a loop, a
 * device, a channel and a listener, and the functions one file calls in
 * another. The files, one concern each:
 *
 *   device.c   the probe; per device: PD, CQ, SRQ and receive slab
 *   loop.c     the per-loop instance; the QP number -> channel map
 *   connect.c  connection setup (rdma_cm events), accept, listeners
 *   send.c     gathering, posting and credits going out
 *   recv.c     CQ polling, delivery and credits coming back
 *   channel.c  teardown, options and addresses, the ops struct
 *
 * Everything runs on the loop thread of the loop the object belongs to,
 * except the probe (any thread, serialised by the registry) and discard
 * (any loop).
 */
#ifndef WEFT_TRANSPORTS_VERBS_VERBS_INTERNAL_H
#define WEFT_TRANSPORTS_VERBS_VERBS_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/verbs/verbs.h"

/* ---- tuning ---- */

#define VERBS_SLOT_SIZE 8192u    /* bytes per receive slot = max message */
#define VERBS_SRQ_DEPTH 3072u    /* receives posted per loop and device */
#define VERBS_SPARE_SLOTS 1024   /* slots for buffers handlers still hold */
#define VERBS_CREDITS 16         /* messages a peer may have in flight */
#define VERBS_CREDIT_THRESHOLD 8 /* returned credits worth a message */
#define VERBS_CTRL_RESERVE (VERBS_CREDITS / VERBS_CREDIT_THRESHOLD + 2)
#define VERBS_SQ_DEPTH 64     /* send work requests per QP */
#define VERBS_MAX_SGE 4       /* buffers gathered per work request */
#define VERBS_POST_BATCH 16   /* work requests per ibv_post_send */
#define VERBS_POLL_BATCH 32   /* completions per ibv_poll_cq */
#define VERBS_INLINE_WANT 256 /* inline bytes asked for (device may cut) */
#define VERBS_CQ_ACK_BATCH 64 /* CQ events acknowledged together */
#define VERBS_MAX_DEVICES 4
#define VERBS_HASH_BUCKETS 256
#define VERBS_RESOLVE_MS 2000 /* address and route resolution timeouts */
#define VERBS_LINGER_NS (2000ull * 1000u * 1000u) /* FIN completion wait */
#define VERBS_HELLO_MAGIC 0x5776u                 /* "Wv" */
#define VERBS_HELLO_VERSION 1

/* imm_data (network order on the wire): flags in the top byte, returned
 * credits in the low 24 bits. */
#define VERBS_IMM_FIN 0x80000000u
#define VERBS_IMM_CREDITS 0x00ffffffu

/* The handshake's private data (REQ and REP), in network order. */
typedef struct verbs_hello {
  uint16_t magic;
  uint8_t version;
  uint8_t pad;
  uint16_t credits; /* messages the sender of this hello can receive */
  uint16_t pad2;
  uint32_t recv_size; /* bytes per message the sender can receive */
} verbs_hello;

/* ---- conversions at the edge ---- */

static inline int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- state ---- */

enum verbs_kind { KIND_CHANNEL = 1, KIND_LISTENER = 2 };

typedef struct verbs_loop verbs_loop;
typedef struct verbs_dev verbs_dev;
typedef struct verbs_chan verbs_chan;

/* Buffers one send work request holds until a signaled completion at or
 * after it: pool buffers sent without a copy, or the copy. */
typedef struct send_rec {
  weft_buf *bufs[VERBS_MAX_SGE];
  uint8_t n;
} send_rec;

enum vc_state {
  VC_IDLE = 0,    /* no id yet */
  VC_RESOLVING,   /* address / route resolution */
  VC_CONNECTING,  /* rdma_connect or rdma_accept sent */
  VC_ESTABLISHED, /* data flows */
  VC_LINGER,      /* closed by the core; FIN posted, waiting for it */
  VC_DONE         /* torn down */
};

struct verbs_chan {
  enum verbs_kind kind; /* first: rdma_cm contexts are tagged */
  weft_channel *ch;
  verbs_loop *vl;
  verbs_dev *dev; /* once the QP exists */
  struct rdma_cm_id *id;
  struct ibv_qp *qp;
  uint32_t qp_num;
  enum vc_state state;
  bool passive;
  bool reading;                   /* auto-read: deliver received messages */
  bool in_flush;                  /* weft__verbs_send_pending is on the stack */
  bool reserved;                  /* holds its share of the SRQ */
  bool fin_received, fin_pending; /* FIN seen; waits behind held data */
  bool errored;                   /* the QP failed: no FIN, no more posts */
  bool touched;                   /* in the device's batch list */
  bool got_data;                  /* channel_read fired in this batch */
  bool in_deliver;                /* in the device's deliver list */
  uint32_t peer_recv_size;        /* bytes per message the peer takes */
  int32_t credits;                /* data messages we may still send */
  uint32_t granted;               /* credits the peer holds or used, unseen */
  uint64_t sq_head, sq_tail;      /* send records [head, tail) are posted */
  uint64_t last_signaled;
  uint64_t fin_seq;
  send_rec recs[VERBS_SQ_DEPTH];
  weft_buf *held[VERBS_CREDITS + 1]; /* received, not yet delivered */
  uint32_t held_head, n_held;
  weft_timer linger;
  verbs_chan *hash_next;
  verbs_chan *prev, *next; /* the loop's channels with an id */
  verbs_chan *deliver_next;
};

struct verbs_dev {
  verbs_loop *vl;          /* NULL once the loop finished (memory still held) */
  struct ibv_context *ctx; /* rdma_cm's; not ours to close */
  struct ibv_pd *pd;
  struct ibv_comp_channel *cc;
  struct ibv_cq *cq;
  struct ibv_srq *srq;
  weft_source source;
  bool source_added;
  int refs; /* the loop, the pool hook (until the pool is freed), each
               pool slab MR, each held receive slot */
  unsigned cq_unacked;
  uint32_t max_inline;
  int max_sge;
  uint32_t srq_depth, max_channels, n_channels;
  uint8_t *slab;
  size_t slab_len;
  struct ibv_mr *slab_mr;
  uint32_t n_slots, n_free;
  uint32_t *free_slots;
  uint32_t owed; /* receives consumed and not yet reposted */
  bool starved;  /* a refill fell short: credits wait */
  int pool_hook;
  verbs_chan *hash[VERBS_HASH_BUCKETS];
  verbs_chan *touched[2 * VERBS_POLL_BATCH];
  int n_touched;
  verbs_chan *deliver; /* channels whose held messages can go up */
};

typedef struct verbs_listener {
  enum verbs_kind kind;
  weft_listener *l;
  verbs_loop *vl;
  struct rdma_cm_id *id;
  struct verbs_listener *prev, *next;
} verbs_listener;

struct verbs_loop {
  weft_loop *loop;
  struct rdma_event_channel *ec;
  weft_source cm_source;
  verbs_dev *devs[VERBS_MAX_DEVICES];
  int n_devs;
  verbs_chan *chans;
  verbs_listener *listeners;
};

static inline verbs_chan *vc_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

static inline bool vc_active(const verbs_chan *vc) {
  return vc->ch != NULL && weft_channel_state_of(vc->ch) == WEFT_CHANNEL_ACTIVE;
}

/* ---- device.c: the probe; devices (PD, CQ, SRQ, receive slab) ---- */

/**
 * The probe op: an RDMA device and rdma_cm (/dev/infiniband/rdma_cm) must
 * be there. Returns 0, or WEFT_ENODEV with the cause and what to do in
 * `why`. Any thread (the registry serialises probes).
 */
int weft__verbs_probe(char *why, size_t why_len);

/* Slot `i` of the receive slab; slot_put returns one to the free set. */
static inline uint8_t *slot_ptr(const verbs_dev *d, uint32_t i) {
  return d->slab + (size_t)i * VERBS_SLOT_SIZE;
}

static inline void slot_put(verbs_dev *d, uint32_t i) {
  d->free_slots[d->n_free++] = i;
}

/**
 * Frees a received buffer's slot (weft_buf_wrap's release, `arg` the
 * device): back to the free set unless the loop has finished, and the
 * buffer's device reference goes (the last one frees the device's memory).
 * Loop thread. No errors.
 */
void weft__verbs_slot_release(void *base, size_t capacity, void *arg);

/**
 * Reposts the receives the device owes (d->owed) in chained posts, as far
 * as free slots allow; what cannot be posted stays owed. Loop thread. A
 * failed post is logged and the rest stays owed.
 */
void weft__verbs_srq_refill(verbs_dev *d);

/**
 * The loop's device for rdma_cm's context `ctx`, opened on first use (PD,
 * receive slab, CQ, SRQ full of receives, pool hook, CQ source). Returns 0
 * with it in `*out`, WEFT_ENOSPC past VERBS_MAX_DEVICES, or the error of
 * the step that failed (logged). Loop thread.
 */
int weft__verbs_dev_get(verbs_loop *vl, struct ibv_context *ctx,
                        verbs_dev **out);

/**
 * Ends a device with its loop, once no channel uses it: removes the CQ
 * source, destroys the SRQ, CQ and completion channel, and drops the loop's
 * reference (the memory stays while pool slabs or held buffers use it).
 * Loop thread. No errors.
 */
void weft__verbs_dev_close(verbs_dev *d);

/* ---- loop.c: the per-loop instance; the QP number -> channel map ---- */

/**
 * The loop_init op: the loop's rdma_cm event channel, non-blocking, as a
 * weft_source (devices open with the first QP on them). Returns 0 with the
 * state in `*loop_state`, WEFT_ENOMEM, or the event channel's or the
 * loop's error (logged). Loop thread.
 */
int weft__verbs_loop_init(weft_loop *loop, void **loop_state);

/**
 * The loop_fini op: tears down the channels still lingering, frees the
 * listeners, closes the devices and the event channel. Loop thread.
 */
void weft__verbs_loop_fini(weft_loop *loop, void *loop_state);

/** Adds `vc` to `d`'s map under vc->qp_num. Loop thread. */
void weft__verbs_hash_add(verbs_dev *d, verbs_chan *vc);

/** Takes `vc` out of `d`'s map (nothing if it is not in). Loop thread. */
void weft__verbs_hash_del(verbs_dev *d, verbs_chan *vc);

/**
 * The channel of QP number `qp_num` on `d`, or NULL (its QP is gone: the
 * completion is for a channel torn down). Loop thread.
 */
verbs_chan *weft__verbs_hash_find(verbs_dev *d, uint32_t qp_num);

/* ---- connect.c: connection setup, accept, listeners ---- */

/**
 * The connect op: an rdma_cm id for `ch` and address resolution of `ep`'s
 * first address; route, QP and rdma_connect follow from the id's events.
 * Returns 0 if started, or the resolver's or rdma_cm's error (nothing is
 * left to clean up). Loop thread.
 */
int weft__verbs_connect(weft_channel *ch, const weft_endpoint *ep);

/**
 * The poll of the loop's rdma_cm event source: takes up to `budget` events
 * off the event channel, acknowledges each, then hands it to its channel or
 * listener. Returns how many it took (failures go to the channels). Loop
 * thread.
 */
int weft__verbs_cm_poll(weft_source *src, int budget);

/**
 * The discard op: rejects an accepted connection nobody adopts and frees
 * its handle. Any loop. No errors.
 */
void weft__verbs_discard(intptr_t handle);

/**
 * The adopt op: takes over accepted connection `handle` as `ch` (its
 * rdma_cm id moves to `ch`'s loop), creates its QP and accepts. Returns 0,
 * or an error with the connection rejected and the handle freed. Loop
 * thread of `ch`.
 */
int weft__verbs_adopt(weft_channel *ch, intptr_t handle);

/**
 * The listen op: an rdma_cm id bound to `ep`'s first address, listening
 * with `backlog`. Returns 0, or WEFT_ENOMEM, or the resolver's or rdma_cm's
 * error. Loop thread of the listener.
 */
int weft__verbs_listen(weft_listener *l, const weft_endpoint *ep, int backlog);

/**
 * Destroys a listener's id, unlinks it from its loop and frees it. Loop
 * thread. No errors.
 */
void weft__verbs_listener_free(verbs_listener *vls);

/** The listen_close op: frees the listener once. Loop thread. */
void weft__verbs_listen_close(weft_listener *l);

/**
 * The listen_address op: the bound address as text. Returns 0, WEFT_ECLOSED
 * once closed, or weft_sockaddr_format's error. Loop thread.
 */
int weft__verbs_listen_address(weft_listener *l, char *buf, size_t len);

/* ---- send.c: gathering, posting, credits going out ---- */

/* Credits we can hand back now: receives the peer used that were delivered
 * (not held) and reposted. None while a refill is short. */
static inline uint32_t returnable(const verbs_chan *vc) {
  if (vc->dev == NULL || vc->dev->owed > 0)
    return 0;
  uint32_t used = vc->granted + vc->n_held;
  return used < VERBS_CREDITS ? VERBS_CREDITS - used : 0;
}

static inline bool sq_room(const verbs_chan *vc) {
  return vc->sq_tail - vc->sq_head < VERBS_SQ_DEPTH;
}

/**
 * Releases the buffers of the send records up to and including `seq`
 * (UINT64_MAX: all of them, once the QP is gone). Loop thread.
 */
void weft__verbs_retire_sends(verbs_chan *vc, uint64_t seq);

/**
 * Posts a zero-length message carrying the credits returnable now and
 * `flags` (VERBS_IMM_FIN) in imm_data; it needs no credit, only room in the
 * send queue (sq_room). Returns 0 or ibv_post_send's error. Loop thread.
 */
int weft__verbs_post_control(verbs_chan *vc, uint32_t flags);

/**
 * Sends what can go now: queued data as credits and the send queue allow,
 * then a credit message if enough credits wait and no data carried them.
 * Does nothing unless established and not errored, or when already on the
 * stack. Returns 0 or an error (the caller fails the channel). Loop
 * thread; the caller holds a channel reference (a promise may close it).
 */
int weft__verbs_send_pending(verbs_chan *vc);

/**
 * The flush op: weft__verbs_send_pending under a channel reference.
 * Returns 0 or an error (the core then closes the channel). Loop thread.
 */
int weft__verbs_flush(weft_channel *ch);

/* ---- recv.c: CQ polling, delivery, credits coming back ---- */

/**
 * Delivers the channel's held messages (channel_read) while it reads, and
 * marks the peer's FIN pending once none is held. Returns how many went
 * up. Loop thread; the caller holds a channel reference (a handler may
 * close the channel).
 */
int weft__verbs_deliver_held(verbs_chan *vc);

/**
 * The poll of a device's CQ source: refills the SRQ, delivers what channels
 * may take again, handles up to `budget` completions (at most
 * VERBS_POLL_BATCH, the SRQ refilled before any handler runs), then
 * finishes the batch (read_complete, EOF, sends the new credits allow).
 * Returns how many it handled. Loop thread; failures close the channels
 * concerned (an ibv_poll_cq failure is logged).
 */
int weft__verbs_dev_poll(weft_source *src, int budget);

/**
 * The arm of a device's CQ source: requests a CQ event, then polls once
 * more (a completion between the last poll and the arm raises no event).
 * Returns 0 when the loop may sleep, > 0 when work is pending. Loop thread;
 * an ibv_req_notify_cq failure is logged.
 */
int weft__verbs_dev_arm(weft_source *src);

/**
 * The wakeup of a device's CQ source: takes the CQ events off the
 * completion channel and acknowledges them in batches. Loop thread.
 */
void weft__verbs_dev_wakeup(weft_source *src, uint32_t events);

/* ---- channel.c: teardown, options and addresses, the ops struct ---- */

/**
 * Releases the channel's QP (disconnecting), its rdma_cm id, every buffer
 * it holds and its share of the SRQ; a linger ends (its channel reference
 * goes). Does nothing the second time. Loop thread. No errors.
 */
void weft__verbs_vc_teardown(verbs_chan *vc);

/**
 * Reports failure `err` on a live channel, with the reason formatted from
 * `fmt`: a connect in progress fails, an active channel closes with
 * exception_caught, and the core's close then tears it down. The QP counts
 * as errored from then on (no FIN, no more posts); a lingering channel is
 * torn down at once. Loop thread.
 */
void weft__verbs_vc_fail(verbs_chan *vc, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
