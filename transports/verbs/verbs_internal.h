/* SPDX-License-Identifier: Apache-2.0 */
/* The raw ibverbs RC transport ("verbs"): reliable-connected queue pairs,
 * set up with rdma_cm (IP:port addressing, RoCE and InfiniBand alike).
 *
 * Per loop:
 *   - one rdma_cm event channel; its fd is a weft_source (connection setup,
 *     accept, disconnects);
 *   - per device (normally one): a PD; a completion channel whose fd is a
 *     weft_source; groups of channels, each with a CQ and an SRQ of its
 *     own, sized from the channels it holds; and a slab of fixed-size
 *     receive slots, address space reserved once and registered a chunk at
 *     a time as channels come. The loop's buffer pool registers every pool
 *     slab with the PD once (weft_pool_add_slab_hook), so a send from pool
 *     memory needs no registration on the data path.
 * Per channel: one RC QP (send queue of its own, receives from its group's
 * SRQ, completions on its group's CQ).
 *
 * Sizing from the connection count (group.c): a channel brings
 * VERBS_SHARE receives (its credits plus the control reserve) to its
 * group's SRQ and VERBS_SHARE + VERBS_SQ_DEPTH entries to its CQ, so that
 * neither can overflow whatever the peers do. A group starts with room for
 * VERBS_GROUP_STEP channels and doubles (ibv_resize_cq, ibv_modify_srq) up
 * to what the device allows (VERBS_GROUP_MAX at most); past that, or when
 * the device cannot resize, a new group opens. The loop's source polls
 * every group's CQ; one completion channel serves them all. Slots are
 * registered for the most channels each group ever had, so the memory of a
 * loop follows its high-water mark of connections (receives once posted
 * cannot be taken back from an SRQ).
 *
 * Receive path: after each CQ poll batch the group's SRQ is refilled at
 * once, in one chained post, before any handler runs: up to its channels'
 * shares less the slots they hold. A received message goes up as a
 * weft_buf wrapping its slot; the slot returns to the free set when the
 * buffer is released.
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
 * Flow control (credits, counted in messages, per channel): the
 * handshake's private data gives each side VERBS_CREDITS credits for the
 * peer. A data message costs one. A credit comes back once the slot of the
 * message it paid for is free again, or is copied out: a channel never
 * holds more slots than the credits it granted (granted + in_use <=
 * VERBS_CREDITS), whether the messages wait in held[] (auto-read off, flow
 * control paused) or sit with its handlers. Handlers may keep up to
 * VERBS_ZC_MAX received buffers zero-copy; beyond that a delivery is
 * copied into a pool buffer and its slot freed at once, so a handler that
 * keeps buffers (an echo queued behind a peer that does not read) narrows
 * its own window to no less than VERBS_CREDITS - VERBS_ZC_MAX and never
 * deadlocks. What one channel holds is thus bounded by its own share, and
 * no channel's credits or refills wait for another's. Returned credits
 * ride in imm_data of any message, or in a zero-length credit message once
 * VERBS_CREDIT_THRESHOLD of them wait and no data is going out. Credit
 * messages and the close message (FIN) need no credit: each channel's
 * share keeps VERBS_CTRL_RESERVE receives for them (a side sends at most
 * one credit message per VERBS_CREDIT_THRESHOLD data messages it received,
 * so the reserve covers them). Credits are returned only after the group's
 * SRQ was refilled, so a receive is always posted for what arrives: no RNR
 * in normal operation. Were a refill ever short (no slot could be
 * registered), the group's channels would return no credit until it caught
 * up.
 *
 * Trusting nothing the peer sends: its hello (weft__verbs_hello_parse) and
 * every message it sends (weft__verbs_rx_check) are checked against what
 * this side granted and expects before anything is used: a data message
 * needs a credit the peer holds, returned credits must be for messages we
 * sent, a credit message returns at least VERBS_CREDIT_THRESHOLD, no
 * unknown flag, nothing after FIN. A violation closes that channel only,
 * with the reason logged and in exception_caught (WEFT_EPROTO); since a
 * data message is held only on a credit, at most VERBS_CREDITS are held.
 *
 * Closing: an orderly close sends FIN after the data already posted, waits
 * for its completion (at most VERBS_LINGER_NS), then disconnects. A peer
 * that disconnects without FIN, a QP error or a transport timeout closes
 * the channel with exception_caught. Slots its handlers still hold after
 * the teardown count as orphans (the slab keeps room for them) and keep
 * the channel's memory until they are released.
 *
 * This plugin uses the public headers only, as an out-of-tree plugin would.
 */

/* transports/verbs/verbs_internal.h: what the files of the verbs plugin
 * share: the tuning constants and wire formats, the state of a loop, a
 * device, a channel and a listener, and the functions one file calls in
 * another. The files, one concern each:
 *
 *   wire.c     the hello and the checks of the peer's messages (pure)
 *   device.c   the probe; per device: PD, completion channel, pool hook
 *   group.c    CQ + SRQ groups and the receive slab, sized from the
 *              channel count; the slots' accounting
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
#define VERBS_CREDITS 16         /* messages a peer may have in flight */
#define VERBS_CREDIT_THRESHOLD 8 /* returned credits worth a message */
#define VERBS_CTRL_RESERVE (VERBS_CREDITS / VERBS_CREDIT_THRESHOLD + 2)
/* Receives a channel brings to its group's SRQ, and the slots it uses. */
#define VERBS_SHARE (VERBS_CREDITS + VERBS_CTRL_RESERVE)
/* Received buffers a channel's handlers may keep zero-copy; further
 * deliveries are copied, so a channel's window never shrinks below
 * VERBS_CREDITS - VERBS_ZC_MAX because of them. */
#define VERBS_ZC_MAX (VERBS_CREDITS / 2)
/* Send work requests per QP: room for the peer's 16 credits of data, the
 * control messages, and completions not yet polled. 31, not 32: rxe (and
 * others) round a queue's n + 1 entries up to a power of two, so 31 keeps
 * its ring at 32 entries. */
#define VERBS_SQ_DEPTH 31
#define VERBS_CQ_PER_CHANNEL (VERBS_SHARE + VERBS_SQ_DEPTH)
#define VERBS_GROUP_STEP 32     /* channels a group starts with */
#define VERBS_GROUP_MAX 512     /* channels per CQ + SRQ at most */
#define VERBS_MAX_CHANNELS 8192 /* per loop and device */
#define VERBS_CHUNK_SLOTS 256   /* slots registered at once (2 MiB) */
/* Slots reserved per loop and device: every channel's share, and room for
 * a batch per group and for orphans (slots handlers hold after the
 * channel ended). Address space only, until registered. */
#define VERBS_MAX_SLOTS                                                        \
  ((VERBS_MAX_CHANNELS * VERBS_SHARE / VERBS_CHUNK_SLOTS + 64) *               \
   VERBS_CHUNK_SLOTS)
#define VERBS_MAX_SGE 4       /* buffers gathered per work request */
#define VERBS_POST_BATCH 16   /* work requests per ibv_post_send */
#define VERBS_POLL_BATCH 32   /* completions per ibv_poll_cq */
#define VERBS_INLINE_WANT 256 /* inline bytes asked for (device may cut) */
#define VERBS_CQ_ACK_BATCH 64 /* CQ events acknowledged together */
#define VERBS_MAX_DEVICES 4
#define VERBS_HASH_MIN 64     /* buckets of the QP map at first; it doubles */
#define VERBS_RESOLVE_MS 2000 /* address and route resolution timeouts */
#define VERBS_LINGER_NS (2000ull * 1000u * 1000u) /* FIN completion wait */
#define VERBS_HELLO_MAGIC 0x5776u                 /* "Wv" */
#define VERBS_HELLO_VERSION 1
/* The largest receive size a peer's hello may claim: RC's smallest common
 * message limit (mlx5's max_msg_sz), far above any weft slot. */
#define VERBS_MAX_RECV_SIZE (1u << 30)
/* Tags a receive's wr_id (the slot) apart from a send's (its sequence
 * number): a failed completion's opcode is undefined (ibv_poll_cq(3)). */
#define VERBS_WR_RECV (1ull << 63)

/* imm_data (network order on the wire): flags in the top byte, returned
 * credits in the low 24 bits. */
#define VERBS_IMM_FIN 0x80000000u
#define VERBS_IMM_CREDITS 0x00ffffffu
#define VERBS_IMM_FLAGS (~VERBS_IMM_CREDITS) /* FIN and, reserved, the rest */

/* The handshake's private data (REQ and REP), in network order. */
typedef struct verbs_hello {
  uint16_t magic;
  uint8_t version;
  uint8_t pad;
  uint16_t credits; /* messages the sender of this hello can receive */
  uint16_t pad2;
  uint32_t recv_size; /* bytes per message the sender can receive */
} verbs_hello;

/* What a peer's hello says, checked (weft__verbs_hello_parse). */
typedef struct verbs_peer {
  uint16_t credits;   /* 1 .. VERBS_CREDITS: our send window */
  uint32_t recv_size; /* 1 .. VERBS_MAX_RECV_SIZE bytes per message */
} verbs_peer;

/* One received message as its work completion shows it: all of it is the
 * peer's to choose. */
typedef struct verbs_rx {
  bool rdma_write; /* IBV_WC_RECV_RDMA_WITH_IMM, not a send */
  bool with_imm;   /* IBV_WC_WITH_IMM */
  uint32_t imm;    /* host order */
  uint32_t len;    /* bytes received */
} verbs_rx;

/* A channel's credit books, both ways. Every message of the peer is
 * checked against them before use (weft__verbs_rx_check). Invariants,
 * with in_use the receive slots the channel holds (held, or with its
 * handlers): granted + in_use <= VERBS_CREDITS; 0 <= credits <= window. */
typedef struct verbs_flow {
  uint32_t granted; /* credits the peer holds: data messages it may send */
  int32_t credits;  /* data messages we may still send */
  uint32_t window;  /* the peer's grant (its hello); 0 before it came */
  bool fin;         /* the peer's FIN came: nothing may follow it */
} verbs_flow;

/* ---- conversions at the edge ---- */

static inline int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- state ---- */

enum verbs_kind { KIND_CHANNEL = 1, KIND_LISTENER = 2 };

typedef struct verbs_loop verbs_loop;
typedef struct verbs_dev verbs_dev;
typedef struct verbs_group verbs_group;
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
  verbs_dev *dev;   /* once the QP exists */
  verbs_group *grp; /* while it holds its share of a group */
  struct rdma_cm_id *id;
  struct ibv_qp *qp;
  uint32_t qp_num;
  enum vc_state state;
  bool passive;
  bool reading;              /* auto-read: deliver received messages */
  bool in_flush;             /* weft__verbs_send_pending is on the stack */
  bool fin_pending;          /* the peer's FIN, no data held: EOF */
  bool errored;              /* the QP failed: no FIN, no more posts */
  bool touched;              /* in the device's batch list */
  bool got_data;             /* channel_read fired in this batch */
  bool in_deliver;           /* in the device's deliver list */
  bool orphaned;             /* torn down, slots still out: holds `ch` */
  uint32_t peer_recv_size;   /* bytes per message the peer takes */
  uint32_t in_use;           /* slots it holds: held[] and its handlers' */
  verbs_flow flow;           /* credits both ways, the peer's FIN */
  uint64_t sq_head, sq_tail; /* send records [head, tail) are posted */
  uint64_t last_signaled;
  uint64_t fin_seq;
  send_rec recs[VERBS_SQ_DEPTH];
  weft_buf *held[VERBS_CREDITS]; /* received, not yet delivered */
  uint32_t held_head, n_held;
  weft_timer linger;
  verbs_chan *hash_next;
  verbs_chan *prev, *next; /* the loop's channels with an id */
  verbs_chan *deliver_next;
  /* The read budget (recv.c), per poll of the device. */
  weft_read_meter rb;
};

/* Channels that share one CQ and one SRQ (group.c). The CQ holds every
 * completion its channels' QPs can have outstanding: the receives posted
 * in the SRQ and each QP's send queue. */
struct verbs_group {
  verbs_dev *dev;
  struct ibv_cq *cq;
  struct ibv_srq *srq;
  uint32_t cap;        /* channels the CQ and SRQ are sized for now */
  uint32_t max;        /* channels it may grow to (device limits) */
  uint32_t n_channels; /* channels holding a share now */
  uint32_t hw;         /* the most it ever had: slots are registered so */
  uint32_t posted;     /* receives in the SRQ, completions not yet polled */
  uint32_t in_use;     /* slots its channels hold (sum of their in_use) */
  unsigned cq_unacked; /* CQ events not yet acknowledged */
  bool armed;          /* a CQ event was requested and has not come */
  bool short_logged;   /* a short refill was logged */
};

struct verbs_dev {
  verbs_loop *vl;          /* NULL once the loop finished (memory still held) */
  struct ibv_context *ctx; /* rdma_cm's; not ours to close */
  struct ibv_pd *pd;
  struct ibv_comp_channel *cc; /* every group's CQ reports here */
  weft_source source;
  bool source_added;
  int refs; /* the loop, the pool hook (until the pool is freed), each
               pool slab MR, each held receive slot */
  uint32_t max_inline;
  int max_sge;
  uint32_t group_max;  /* channels per group the device allows */
  uint32_t max_groups; /* groups the device allows (its CQs and SRQs) */
  verbs_group **groups;
  uint32_t n_groups, groups_len, next_poll;
  uint32_t n_channels; /* holding a share, in every group */
  uint32_t hw_sum;     /* the groups' hw, summed */
  uint32_t orphans;    /* slots held by handlers of ended channels */
  /* The receive slab: VERBS_MAX_SLOTS slots of address space, registered
   * VERBS_CHUNK_SLOTS at a time (chunk i has MR chunk_mr[i]). */
  uint8_t *slab;
  size_t slab_reserved; /* bytes of address space */
  struct ibv_mr **chunk_mr;
  uint32_t n_chunks;
  uint32_t n_slots, n_free; /* registered slots; free ones */
  uint32_t *free_slots;
  int pool_hook;
  verbs_chan **hash; /* QP number -> channel, chained */
  uint32_t hash_mask, hash_count;
  verbs_chan *touched[2 * VERBS_POLL_BATCH];
  int n_touched;
  verbs_chan *deliver; /* channels whose held messages or credits can go */
  uint64_t epoch;      /* polls so far: a channel's read budget is per poll */
  bool taking_in;      /* in arm's poll or weft__verbs_dev_take_in:
                          nothing is delivered (recv.c) */
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

/* ---- wire.c: the hello and the peer's messages, checked (pure) ---- */

/** Fills `h` with this side's hello (credits and receive size). Any
 *  thread. No errors. */
void weft__verbs_hello_fill(verbs_hello *h);

/**
 * Parses and checks a peer's hello, `len` bytes at `data` (the handshake's
 * private data; NULL or short when the peer sent none): weft's magic and
 * version, 1 .. VERBS_CREDITS credits (the SRQ's reserve for the peer's
 * credit messages is sized for no more), a receive size of 1 ..
 * VERBS_MAX_RECV_SIZE. Reserved bytes and padding after the hello are
 * ignored. Returns 0 with the values in `*out`, or WEFT_EPROTO with the
 * reason in `why` (`*out` untouched). Any thread; no device needed.
 */
int weft__verbs_hello_parse(const void *data, size_t len, verbs_peer *out,
                            char *why, size_t why_len);

/**
 * Checks one message of the peer against the books `f` before anything of
 * it is used, then books it: a send (no RDMA write) with imm_data, no
 * reserved flag, nothing after FIN, at most VERBS_SLOT_SIZE bytes; a data
 * message spends a credit the peer holds (granted); returned credits are
 * for data messages we sent (credits + returned <= window); a zero-length
 * message without FIN returns at least VERBS_CREDIT_THRESHOLD. Returns 0
 * with `f` updated (granted, credits, fin), or WEFT_EPROTO with the reason
 * in `why` and `f` unchanged. Any thread; no device needed.
 */
int weft__verbs_rx_check(verbs_flow *f, const verbs_rx *m, char *why,
                         size_t why_len);

/**
 * The credits a channel with books `f`, holding `in_use` receive slots
 * (held, or with its handlers), can hand back now: VERBS_CREDITS less the
 * credits the peer holds and the slots in use, so granted + in_use never
 * exceeds VERBS_CREDITS. No errors. Any thread; no device needed.
 */
uint32_t weft__verbs_returnable(const verbs_flow *f, uint32_t in_use);

/* ---- device.c: the probe; devices (PD, completion channel) ---- */

/**
 * The probe op: an RDMA device and rdma_cm (/dev/infiniband/rdma_cm) must
 * be there. Returns 0, or WEFT_ENODEV with the cause and what to do in
 * `why`. Any thread (the registry serialises probes).
 */
int weft__verbs_probe(char *why, size_t why_len);

/** Drops one reference to `d`; the last frees its memory. Loop thread. */
void weft__verbs_dev_unref(verbs_dev *d);

/**
 * The loop's device for rdma_cm's context `ctx`, opened on first use (PD,
 * slab address space, completion channel, pool hook, CQ source; groups
 * open with the channels). Returns 0 with it in `*out`, WEFT_ENOSPC past
 * VERBS_MAX_DEVICES, or the error of the step that failed (logged). Loop
 * thread.
 */
int weft__verbs_dev_get(verbs_loop *vl, struct ibv_context *ctx,
                        verbs_dev **out);

/**
 * Ends a device with its loop, once no channel uses it: removes the CQ
 * source, closes its groups and the completion channel, and drops the
 * loop's reference (the memory stays while pool slabs or held buffers use
 * it). Loop thread. No errors.
 */
void weft__verbs_dev_close(verbs_dev *d);

/* ---- group.c: CQ + SRQ groups and the receive slab ---- */

/* Slot `i` of the receive slab; slot_put returns one to the free set. */
static inline uint8_t *slot_ptr(const verbs_dev *d, uint32_t i) {
  return d->slab + (size_t)i * VERBS_SLOT_SIZE;
}

static inline void slot_put(verbs_dev *d, uint32_t i) {
  d->free_slots[d->n_free++] = i;
}

/* The lkey of registered slab memory at `p`, or false outside the slab. */
static inline bool slab_lkey(const verbs_dev *d, const uint8_t *p,
                             uint32_t *lkey) {
  if (p < d->slab || p >= d->slab + (size_t)d->n_slots * VERBS_SLOT_SIZE)
    return false;
  size_t chunk =
      (size_t)(p - d->slab) / ((size_t)VERBS_CHUNK_SLOTS * VERBS_SLOT_SIZE);
  *lkey = d->chunk_mr[chunk]->lkey;
  return true;
}

/* Receives the group's SRQ should hold: its channels' shares less the
 * slots they hold. */
static inline uint32_t group_want(const verbs_group *g) {
  uint32_t share = g->n_channels * VERBS_SHARE;
  return share > g->in_use ? share - g->in_use : 0;
}

/**
 * Reserves the slab's address space (VERBS_MAX_SLOTS slots, nothing
 * registered yet) and its free set. Returns 0 or WEFT_ENOMEM. Loop thread.
 */
int weft__verbs_slab_init(verbs_dev *d);

/** Frees what weft__verbs_slab_init and the chunks took. No errors. */
void weft__verbs_slab_fini(verbs_dev *d);

/**
 * Finds room for one more channel on `d` and takes it: a group with a free
 * place, else one grown (its CQ resized, its SRQ's max_wr raised, where
 * the device allows), else a new group; then slots registered for it and
 * its share of receives posted. Returns 0 with the group in `*out`,
 * WEFT_ENOBUFS at a limit (logged), or the error of the step that failed.
 * Loop thread.
 */
int weft__verbs_group_join(verbs_dev *d, verbs_group **out);

/**
 * Gives back `vc`'s share of its group: slots its handlers still hold
 * become orphans (vc->orphaned, with a reference on the channel until the
 * last comes back). Loop thread. No errors.
 */
void weft__verbs_group_leave(verbs_chan *vc);

/**
 * Posts receives until the group's SRQ holds group_want(g), in chained
 * posts, as far as free slots allow (registering another chunk if it must).
 * Returns true when the SRQ holds what it should, false when it is short
 * (logged once). Loop thread.
 */
bool weft__verbs_group_refill(verbs_group *g);

/**
 * Closes a group with its device: acknowledges its CQ events, destroys the
 * SRQ and the CQ, frees it. Loop thread. No errors.
 */
void weft__verbs_group_close(verbs_group *g);

/**
 * Frees a received buffer's slot (weft_buf_wrap's release, `arg` the
 * channel it came for): back to the free set unless the loop has finished;
 * the channel's and its group's count goes down, and a channel with
 * credits to return again is queued for the next poll; an orphan's last
 * slot releases the channel. The buffer's device reference goes (the last
 * one frees the device's memory). Loop thread. No errors.
 */
void weft__verbs_slot_release(void *base, size_t capacity, void *arg);

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

/* Credits we can hand back now: for slots the channel no longer holds,
 * once its group's SRQ holds what it should. None while that refill is
 * short, or before the channel has its share. */
static inline uint32_t returnable(const verbs_chan *vc) {
  if (vc->grp == NULL || vc->grp->posted < group_want(vc->grp))
    return 0;
  return weft__verbs_returnable(&vc->flow, vc->in_use);
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
 * Delivers the channel's held messages (channel_read) while it reads and
 * its read budget of this poll lasts (else it is queued for the next
 * poll: weft__verbs_queue_deliver), and marks the peer's FIN pending once
 * none is held. A message goes up in
 * its slot while the handlers hold fewer than VERBS_ZC_MAX slots, else as
 * a copy (its slot freed at once; the slot if no memory for the copy).
 * Returns how many went up. Loop thread; the caller holds a channel
 * reference (a handler may close the channel).
 */
int weft__verbs_deliver_held(verbs_chan *vc);

/* What the receive path does with one work completion
 * (weft__verbs_recv_route). */
typedef enum verbs_recv_action {
  VERBS_RECV_SEND,      /* a send completion: its channel's send records */
  VERBS_RECV_BAD_SLOT,  /* a receive naming no slot of ours: ignored */
  VERBS_RECV_DROP,      /* for no channel, or one gone or closing: the slot
                           goes back */
  VERBS_RECV_FAILED,    /* the receive failed (err, why): the channel fails */
  VERBS_RECV_VIOLATION, /* the peer broke a rule (why): the channel closes */
  VERBS_RECV_DATA,      /* a data message of `len` bytes, booked */
  VERBS_RECV_CONTROL    /* credits or FIN only, booked */
} verbs_recv_action;

typedef struct verbs_recv_verdict {
  verbs_recv_action action;
  verbs_chan *vc; /* the channel of the completion's QP number, or NULL */
  uint32_t slot;  /* the receive's slot (UINT32_MAX for SEND, BAD_SLOT) */
  int err;        /* FAILED, VIOLATION */
  uint32_t len;   /* DATA */
  bool fin;       /* DATA, CONTROL: the peer's FIN came with it */
  char why[160];  /* FAILED, VIOLATION */
} verbs_recv_verdict;

/**
 * The receive path's decision for work completion `wc` of device `d`,
 * into `v` (and returned): whose it is (the channel of its QP number, in
 * the device's map: the QP is the connection, the peer cannot name
 * another), whether it is a send's, names a slot of ours, failed, and
 * whether the message passes weft__verbs_rx_check against that channel's
 * books, which take it in (credits both ways, FIN); a passive channel
 * still connecting becomes established. No device call, no pipeline
 * event: group_poll acts on the verdict, and tests/fuzz/fuzz_verbs_recv.c
 * drives this with several channels and reused QP numbers. Loop thread
 * (or a fuzz target).
 */
verbs_recv_action weft__verbs_recv_route(verbs_dev *d, const struct ibv_wc *wc,
                                         verbs_recv_verdict *v);

/**
 * Puts `vc` on its device's deliver list, unless it is on it: the next
 * poll delivers its held messages and sends the credits it may return.
 * Loop thread. No errors.
 */
void weft__verbs_queue_deliver(verbs_chan *vc);

/**
 * The poll of a device's CQ source: delivers what channels may take again
 * (or the credits they may return), then polls the groups' CQs in turn,
 * up to `budget` completions in all (VERBS_POLL_BATCH per batch): each
 * batch refills its group's SRQ before any handler runs, hands every
 * completion to its channel, then finishes (read_complete, EOF, sends the
 * new credits allow). Returns how many it handled. Loop thread; failures
 * close the channels concerned (an ibv_poll_cq failure is logged).
 */
int weft__verbs_dev_poll(weft_source *src, int budget);

/**
 * Takes in every completion `d`'s CQs hold, until they are empty, and
 * delivers no message: what a channel may read waits in its held[] for
 * the deliver list of the next poll, as with arm's poll. For rdma_cm's
 * DISCONNECTED, whose channel's FIN may still wait in a CQ (connect.c).
 * It is no poll of the loop's: each of the polls it made used to start a
 * new read budget, so a channel holding VERBS_CREDITS messages fired them
 * all in one loop iteration (test_read_budget's
 * read_budget_one_message_through_the_close). Loop thread.
 */
void weft__verbs_dev_take_in(verbs_dev *d);

/**
 * The arm of a device's CQ source: requests an event on every group's CQ
 * not armed yet, then polls once more (a completion between the last poll
 * and the arm raises no event).
 * Returns 0 when the loop may sleep, > 0 when work is pending. Loop thread;
 * an ibv_req_notify_cq failure is logged.
 */
int weft__verbs_dev_arm(weft_source *src);

/**
 * The wakeup of a device's CQ source: takes the CQ events off the
 * completion channel (each names its group's CQ) and acknowledges them in
 * batches. Loop thread.
 */
void weft__verbs_dev_wakeup(weft_source *src, uint32_t events);

/* ---- channel.c: teardown, options and addresses, the ops struct ---- */

/**
 * Releases the channel's QP (disconnecting), its rdma_cm id, every buffer
 * it holds and its share of its group (slots its handlers still hold
 * become orphans); a linger ends (its channel reference goes). Does
 * nothing the second time. Loop thread. No errors.
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

/**
 * The peer broke the protocol (`why`, from the checks of wire.c): logs the
 * reason with the peer's address (a handler may swallow the exception) and
 * fails the channel with WEFT_EPROTO, as weft__verbs_vc_fail does. Only
 * this channel closes. Loop thread.
 */
void weft__verbs_vc_violation(verbs_chan *vc, const char *why);

#endif
