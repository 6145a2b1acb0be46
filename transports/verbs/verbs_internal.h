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
 * except the probe (any thread, serialised by the registry).
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
  bool in_flush;                  /* send_pending is on the stack */
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
  int refs; /* the loop, each pool slab MR, each held receive slot */
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

/* ---- receive slots (device.c) ---- */

static inline uint8_t *slot_ptr(const verbs_dev *d, uint32_t i) {
  return d->slab + (size_t)i * VERBS_SLOT_SIZE;
}

static inline void slot_put(verbs_dev *d, uint32_t i) {
  d->free_slots[d->n_free++] = i;
}

/* ---- credits and the send queue (send.c) ---- */

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

#endif
