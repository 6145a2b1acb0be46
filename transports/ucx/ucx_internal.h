/* transports/ucx/ucx_internal.h: the UCX plugin's private header, which
 * each of its files includes: the design (below), tuning constants, the
 * wire header, the per-loop and per-channel state, and the weft__ucx_*
 * functions that cross files. The plugin's exported symbol is in ucx.h.
 *
 * The files:
 *   context.c  process-wide settings ([transport.ucx] keys), the UCP context
 *   loop.c     the per-loop instance: worker, poll and arm, drain at stop;
 *              the channel table, the pending list, requests in flight
 *   wire.c     what a peer may send: the handshake's check and the texts
 *              of broken rules (the per-message check is inline, below;
 *              pure: no UCX calls, fuzzed)
 *   send.c     the send path: DATA and control messages, flush, credit
 *   recv.c     the receive path: AM handler, reassembly queue, ep errors,
 *              the pending list's dispatch
 *   listen.c   listeners, the accept queue, connections held until their
 *              HELLO and redirected (ucx_preconn)
 *   route.c    the client's routes: the listener ports REDIRECTs taught
 *   channel.c  channel lifecycle, redirected connects, closing eps,
 *              keepalive, the ops table */

/* The UCX transport ("ucx"): channels over UCP active messages.
 *
 * Three levels, as the plugin interface has them:
 *
 *   process  one ucp_context (features AM | WAKEUP), shared by the workers
 *            of every loop (mt_workers_shared), created by the first
 *            loop_init and cleaned up with the last loop_fini;
 *   loop     one ucp_worker in single-thread mode per loop, never one per
 *            connection (hadroNIO's worker per connection made connection
 *            setup take seconds). Its event fd is the loop's source fd:
 *            poll runs ucp_worker_progress until it returns 0 (or the
 *            budget is spent), arm is ucp_worker_arm (UCS_ERR_BUSY = poll
 *            again); nothing here ever blocks in UCX. A server listens on
 *            every loop (WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP): a connection
 *            request is accepted on the worker whose listener took it
 *            (UCX 1.13 aborts when a request moves to another worker), and
 *            connections are spread by a redirect in the handshake: the
 *            listener on the server's address holds each connection until
 *            its HELLO, keeps one in N and sends the others' clients to
 *            loop j's listener (REDIRECT, with every listener's port); a
 *            client remembers the ports (route.c) and goes straight to
 *            them afterwards, saying so in its HELLO (ROUTED);
 *   channel  one ucp_ep (sockaddr client-server flow, peer error handling),
 *            and a slot in the loop's channel table whose index and
 *            generation the peer puts in every message header.
 *
 * Wire protocol: one AM id; the header (ucx_hdr) says what a message is.
 *
 *   HELLO      client -> server, sent with UCP_AM_SEND_FLAG_REPLY so the
 *              server finds the channel by its reply ep; carries the wire
 *              version, the client's slot and receive window, and (8 bytes
 *              of data) the largest DATA message it accepts and its flags
 *              (ROUTED: it came to a listener a REDIRECT named).
 *   HELLO_ACK  server -> client: the same of the server, and (in its data)
 *              the server's id; the client's connect completes here.
 *   REDIRECT   server -> client, instead of HELLO_ACK: the wire version,
 *              and in its data the server's id, the index of the listener
 *              to use and the ports of all the server's listeners (one per
 *              loop, on the same host); the client closes this ep and
 *              connects there (once per connect).
 *   DATA       bytes, with a per-channel sequence number and piggy-backed
 *              credit (bytes the sender consumed since its last grant).
 *   CREDIT     credit alone, when there is no data to carry it.
 *   FIN        orderly close; sequenced like DATA, so the peer sees EOF
 *              after the last byte.
 *   PING, PONG keepalive: a channel that heard nothing for keepalive_ms
 *              sends PING, which the peer answers with PONG; one that hears
 *              nothing for UCX_KEEPALIVE_PROBES more intervals
 *              (UCX_KEEPALIVE_BUSY_PROBES with data in flight) closes.
 *
 * Order: AMs on one ep are handled in send order, but the data of a
 * rendezvous message arrives later (ucp_am_recv_data_nbx), so every DATA and
 * FIN enters a per-channel reassembly queue ordered by sequence number and
 * reaches the pipeline only from its head, once complete.
 *
 * Flow control (hadroNIO's lesson: without it UCX's unexpected-message
 * memory grows without bound): a byte window per channel. A sender sends at
 * most the credit its peer granted; the receiver grants bytes back only
 * when they reached the pipeline. A reader that stops reading (auto-read
 * off) thus holds at most one window of data, the sender's bytes stay in
 * its outbound queue, and its watermarks make it unwritable. Each DATA
 * message costs its bytes plus UCX_MSG_COST of credit, so that the window
 * also bounds the reassembly queue's entries, not only its bytes.
 *
 * Hostile peers: nothing in a message is trusted. weft__ucx_hdr_check
 * (below, and wire.c) checks every header against the channel's wire state
 * (type, handshake order, wire version, sequence, message size, credit taken
 * and granted) before the receive path allocates anything for it; a message
 * that breaks a rule closes its channel alone, with the rule in the
 * reason, and the rest of the channel's messages are dropped.
 *
 * Send path: the flushed buffers are merged into one contiguous send of at
 * most min(credit - UCX_MSG_COST, either side's max_message) bytes
 * (hadroNIO: gathering writes only paid off once merged into one UCX
 * send). Up to UCX_IMM_MAX bytes are first tried as an immediate send from
 * the stack (send_imm); otherwise a single large buffer is sent in place
 * (retained until UCX completes it) and smaller ones are merged into a
 * pool buffer. Send contexts and queue entries are recycled through
 * bounded per-loop free lists. Receive path: eager data UCX lets us keep
 * (UCP_AM_RECV_ATTR_FLAG_DATA) of UCX_WRAP_MIN bytes or more is wrapped in
 * a weft_buf without a copy and handed back with ucp_am_data_release when
 * the last reference goes; other eager data is copied into a pool buffer;
 * rendezvous data is received straight into a pool buffer.
 *
 * Close: requests in flight outlive their channel, and its ep stays open
 * until they ended (see ucx_epr); loop_fini waits for them, bounded, before
 * it destroys the worker and the loop destroys its pool
 * (docs/transports/ucx.md).
 *
 * Callbacks from UCX (AM handler, send/receive completions, ep errors,
 * connection requests) only record what happened and put the channel on
 * the loop's pending list (a request on the loop's accept queue); the
 * pipeline and the core's accept run from poll, after ucp_worker_progress
 * returned, so user handlers never run inside UCX (asserted in debug
 * builds where the core calls in: adopt, flush, close).
 *
 * This plugin uses the public headers only, as an out-of-tree plugin would.
 */
#ifndef WEFT_TRANSPORTS_UCX_UCX_INTERNAL_H
#define WEFT_TRANSPORTS_UCX_UCX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/source.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx.h"

/* ---- tuning ---- */

#define UCX_AM_ID 0x77u             /* the one AM id weft uses */
#define UCX_MAX_IOV 64              /* buffers merged per send */
#define UCX_SENDS_PER_FLUSH 64      /* sends before yielding */
#define UCX_ZCOPY_MIN (16u * 1024u) /* below: merge by copying */
/* Bytes first tried as an immediate send: UCX tries only its short
 * protocol then, whose limit on the shared-memory lane is 100 B with
 * UCX's 8 B and weft's 12 B headers (80 B of data); above it every try
 * would fail and cost a second gather. Over tcp the short limit is higher
 * but a message costs microseconds there anyway. */
#define UCX_IMM_MAX 64u
#define UCX_DEFAULT_WINDOW (1024u * 1024u) /* bytes in flight per channel */
#define UCX_DEFAULT_MAX_MESSAGE                                                \
  (64u * 1024u) /* bytes per DATA message: one                                 \
                   pool size class */
/* Limits of the [transport.ucx] settings, which a peer's HELLO or
 * HELLO_ACK must respect too. Credit travels in 32 bits (ucx_hdr). */
#define UCX_WINDOW_MIN 4096u
#define UCX_WINDOW_MAX (1u << 30)
#define UCX_MAX_MESSAGE_MIN 1024u
#define UCX_MAX_MESSAGE_MAX (1u << 26)
/* Credit each DATA message costs on top of its bytes: about what it takes
 * at the receiver while queued (an 80 B rq_entry, a 120 B weft_buf, a 64 B
 * block at least). With it the window bounds the reassembly queue's
 * entries (window / (UCX_MSG_COST + 1)), not only its bytes: a peer that
 * sends 1-byte messages to a reader that does not read cannot queue a
 * million of them. Both ends must use the same value (UCX_WIRE_VERSION). */
#define UCX_MSG_COST 256u
/* Eager data UCX lets us keep (UCP_AM_RECV_ATTR_FLAG_DATA, which UCX 1.13
 * sets on its shared-memory lanes, not over tcp) is wrapped without a copy
 * from this size on; smaller messages are copied, so that small messages
 * queued for a reader that does not read do not pin UCX's receive
 * descriptors: 20000 queued 100 B messages grew the server's peak RSS by
 * 86 MiB that way (4.4 KiB each; test_ucx_shm's small-message liar on the
 * code before this limit and UCX_MSG_COST). */
#define UCX_WRAP_MIN 4096u
#define UCX_CLOSE_WAIT_NS (2000000000ull) /* an ep lingers (ucx_epr) */
/* A connection the listener on the server's address holds (ucx_preconn)
 * waits this long for its HELLO (a client's connect times out after 10 s
 * by default), then its ep is closed. */
#define UCX_HELLO_WAIT_NS (10000000000ull)
/* Routes (servers' listener ports) a client process remembers. */
#define UCX_ROUTES 32u
/* Keepalive: the default interval, its limits, and the intervals after a
 * PING without any message from the peer before the channel closes. */
#define UCX_DEFAULT_KEEPALIVE_MS 5000u
#define UCX_KEEPALIVE_MIN_MS 10u
#define UCX_KEEPALIVE_MAX_MS 3600000u
#define UCX_KEEPALIVE_PROBES 3u
/* The same for a channel with data of its own in flight (sent, not yet
 * credited back): the peer's PONG then waits behind the peer's own data in
 * UCX, and a loaded peer (a sanitizer build with 100 busy channels on a
 * loop) was seen silent for over 8 s while alive. */
#define UCX_KEEPALIVE_BUSY_PROBES 12u
/* The housekeeping tick (lingering eps, redirects) without keepalive. */
#define UCX_TICK_MS 1000u
#define UCX_FREE_LIST_MAX 64    /* send contexts and queue entries kept */
#define UCX_PROGRESS_SAMPLE 16u /* polls per timed empty progress */
#define UCX_PROGRESS_SAMPLES 8u /* timed ones per empty_progress_ns */
/* An empty progress at least this long (ns) is a system call's: poll
 * delivers before progressing again. */
#define UCX_COSTLY_PROGRESS_NS 250u

/* ---- process-wide settings ---- */

typedef struct ucx_settings {
  char tls[128];         /* UCX_TLS; empty = UCX's default */
  char devices[128];     /* UCX_NET_DEVICES; empty = all */
  char rndv_thresh[32];  /* UCX_RNDV_THRESH; empty = auto */
  size_t window;         /* bytes */
  size_t max_message;    /* bytes */
  bool err_mode_none;    /* error_mode = none: no peer failure detection,
                            but shared memory transports become usable */
  uint32_t keepalive_ms; /* PING a silent channel this often; 0 = off */
  bool spread;           /* a server listens on every loop and redirects */
  bool spread_set;       /* spread was configured (else: auto, see
                            context.c's spread_safe) */
} ucx_settings;

/* ---- wire header ---- */

enum ucx_msg {
  UMSG_HELLO = 1,
  UMSG_HELLO_ACK,
  UMSG_DATA,
  UMSG_CREDIT,
  UMSG_FIN,
  UMSG_REDIRECT,
  UMSG_PING,
  UMSG_PONG
};

/* The wire version, in the type bits of HELLO's, HELLO_ACK's and
 * REDIRECT's `seq`: 2 since a server spreads connections with REDIRECT
 * and channels keep alive with PING and PONG; 1 since DATA messages cost
 * UCX_MSG_COST of credit and the handshake carries max_message (0 before:
 * that weft put nothing there). */
#define UCX_WIRE_VERSION 2u
/* Bytes of data a HELLO carries: the client's max_message and its flags
 * (uint32_t each, host byte order). */
#define UCX_HELLO_DATA 8u
#define UCX_HELLO_ROUTED                                                       \
  1u /* HELLO flag: this listener was named by a                               \
        REDIRECT; do not redirect again */
/* Bytes of data a HELLO_ACK carries: the server's max_message and its id
 * (weft_listener_server_id; uint32_t each, host byte order). */
#define UCX_HELLO_ACK_DATA 8u
/* A REDIRECT's data: the server's id, the index of the listener to use
 * (1 .. n-1), the number n of listeners (2 .. UCX_MAX_LISTENERS), then n
 * ports (1 .. 65535); uint32_t each, host byte order. */
#define UCX_REDIRECT_HEAD 12u
#define UCX_MAX_LISTENERS 64u

/* The header of every message: 12 bytes, host byte order (both ends run
 * this code on the same kind of host; UCX itself does not mix endianness
 * either). It is this small because on UCX 1.13's shared-memory lanes a
 * 16 B message round trip took 0.84 us with a header of up to 12 B and
 * 1.0 us from 16 B on (weft-ucx-peer, docs/benchmarks.md): a user header
 * plus data of at most 28 B is cheaper to move, and every byte of header
 * rides on every message anyway. */
typedef struct ucx_hdr {
  uint32_t to;     /* type and the receiver's slot: weft__ucx_slot_ref() */
  uint32_t seq;    /* DATA, FIN: order in the channel; HELLO, HELLO_ACK:
                      the sender's slot, weft__ucx_slot_ref() with type 0 */
  uint32_t credit; /* bytes granted to the receiver of this message
                      (HELLO, HELLO_ACK: the whole window) */
} ucx_hdr;

/* A slot reference packs a message type (4 bits; in HELLO's and
 * HELLO_ACK's `seq`, the wire version), a slot generation (the
 * low 8 bits) and a slot index (20 bits) into 32. Freed slots are reused
 * last (a FIFO) and only while UCX_MIN_FREE_SLOTS are free
 * (weft__ucx_slot_take). */
#define UCX_SLOT_BITS 20u
#define UCX_MAX_SLOTS (1u << UCX_SLOT_BITS) /* channels per loop */
#define UCX_GEN_MASK 0xffu
#define UCX_MIN_FREE_SLOTS 1024u

static inline uint32_t weft__ucx_slot_ref(uint32_t type, uint32_t id,
                                          uint32_t gen) {
  return type << 28 | (gen & UCX_GEN_MASK) << UCX_SLOT_BITS | id;
}

static inline uint32_t weft__ucx_ref_type(uint32_t ref) { return ref >> 28; }
static inline uint32_t weft__ucx_ref_id(uint32_t ref) {
  return ref & (UCX_MAX_SLOTS - 1);
}
static inline uint32_t weft__ucx_ref_gen(uint32_t ref) {
  return (ref >> UCX_SLOT_BITS) & UCX_GEN_MASK;
}

/* ---- per-loop and per-channel state ---- */

typedef struct ucx_loop ucx_loop;
typedef struct ucx_channel ucx_channel;

/* A channel's ep and the count of requests in flight on it; it outlives
 * the channel. Closing an ep does not end its requests: UCX 1.13 cannot
 * cancel a send, refuses a forced close without peer error handling, and
 * completes a flush-mode close while a rendezvous send still waits for the
 * peer's acknowledgement (ATS, on the data lane; the close completes on the
 * connection manager's). An ATS handled after the close then reads the
 * destroyed ep (SIGSEGV in ucp_rndv_ats_handler, seen here), and one that
 * never comes leaves the send's buffer held past the pool. So a closed
 * channel's ep lingers, still open, until its requests ended or
 * UCX_CLOSE_WAIT_NS passed, and only then is closed. */
typedef struct ucx_epr {
  ucp_ep_h ep;
  ucx_channel *uc;      /* its open channel; NULL once that closed */
  size_t n_ops;         /* requests on it whose callbacks did not run */
  bool force;           /* close by force (peer error handling only) */
  bool keep;            /* not closed: ucp_worker_destroy releases it */
  bool peer_left;       /* the ep's error came: the peer disconnected */
  uint64_t close_by;    /* lingering: close even with requests, in ns */
  struct ucx_epr *next; /* on the loop's lingering list */
} ucx_epr;

/* A UCX request whose callback has not run yet (a send, or a rendezvous
 * receive) and the pool buffer it reads or writes. The loop lists them all,
 * so that loop_fini can wait for them before it destroys the worker, and
 * give back the buffers of those that never end. First member of the
 * struct it is part of (ucx_send, rq_entry). */
typedef struct ucx_op {
  struct ucx_op *prev, *next;
  ucx_loop *tl;
  ucx_epr *epr;  /* its ep; NULL once that was closed */
  void *req;     /* NULL: not listed (completed at once, or not sent yet) */
  weft_buf **bp; /* the buffer to give back if the request never ends */
} ucx_op;

/* One message waiting in a channel's reassembly queue. */
typedef struct rq_entry {
  ucx_op op; /* a rendezvous receive in flight */
  struct rq_entry *next;
  ucx_channel *uc; /* NULL once the channel closed (rendezvous in flight) */
  weft_buf *b;     /* NULL for FIN */
  uint32_t cost; /* credit granted back once delivered: bytes + UCX_MSG_COST */
  bool ready;    /* all bytes are here */
} rq_entry;

/* Work a UCX callback left for poll. */
enum {
  PEND_DELIVER = 1u,   /* the queue head is ready */
  PEND_FLUSH = 2u,     /* credit arrived or the peer became known */
  PEND_CONNECTED = 4u, /* HELLO_ACK arrived */
  PEND_ERROR = 8u,     /* the ep failed: uc->err */
  PEND_REDIRECT = 16u  /* REDIRECT arrived: connect to w.redirect_port */
};

/* What a channel's side of the wire protocol knows and has promised: the
 * state weft__ucx_hdr_check checks a peer's header against and updates.
 * Credit counts bytes plus UCX_MSG_COST per DATA message. Kept apart from
 * ucx_channel so that the check needs nothing of UCX (fuzz_ucx_header). */
typedef struct ucx_wire {
  /* this side's settings, fixed at channel start */
  uint32_t window;      /* credit granted in this side's HELLO / HELLO_ACK */
  uint32_t max_message; /* the largest DATA this side takes */
  bool client;          /* this side connected: sent HELLO, awaits HELLO_ACK */
  /* the peer, from its HELLO or HELLO_ACK */
  bool peer_known;
  bool fin_received;       /* the peer's FIN was taken: nothing may follow */
  bool redirected;         /* this connect took a REDIRECT: no second one */
  uint32_t redirect_port;  /* the port that REDIRECT named */
  uint32_t peer_flags;     /* from its HELLO (UCX_HELLO_ROUTED) */
  uint32_t peer_server_id; /* from its HELLO_ACK, or the REDIRECT's */
  uint32_t peer_id, peer_gen;
  uint32_t peer_max_message; /* the largest DATA the peer takes */
  /* receiving */
  uint32_t recv_seq;    /* the sequence the peer's next DATA or FIN carries */
  uint64_t recv_credit; /* credit the peer has left: granted, not used */
  /* sending */
  uint64_t send_credit;  /* credit this side has left */
  uint64_t send_unacked; /* credit this side used, not granted back yet */
} ucx_wire;

struct ucx_channel {
  weft_channel *ch;
  ucx_loop *tl;
  ucp_ep_h ep;
  ucx_epr *epr;     /* the ep's record, handed to the lingering list at close */
  uint32_t id, gen; /* our slot */
  bool has_slot;
  bool connecting;
  bool reading;
  bool ep_failed;
  bool in_flush;
  bool listed; /* on the loop's pending list */
  unsigned pend;
  int err;               /* PEND_ERROR's error */
  uint64_t err_drain;    /* tl->drains when the ep failed */
  uint64_t credit_owed;  /* credit delivered, not granted back yet */
  uint32_t send_seq;     /* next DATA/FIN sequence to send */
  bool heard;            /* keepalive: a message came since the last tick */
  bool pong_inflight;    /* a PONG is queued in UCX: no second one */
  uint8_t silent;        /* keepalive: ticks without a message since */
  uint32_t server_id;    /* accepting side: its server's, for HELLO_ACK */
  struct ucx_dial *dial; /* connecting side, until connected (malloc'd) */
  ucx_wire w;
  rq_entry *rq_head, *rq_tail;
  ucx_channel *pend_next;
  /* The peer broke the protocol (PEND_ERROR with `err`): why, for the log
   * and the close's reason. Its messages are dropped from then on. */
  char violation[120];
};

typedef struct ucx_slot {
  ucx_channel *uc; /* NULL = free */
  uint32_t gen;
  uint32_t next_free;
} ucx_slot;

typedef struct ucx_listener ucx_listener;
typedef struct ucx_preconn ucx_preconn;

/* Where a connecting channel goes: the server's address the application
 * named (`primary`, the route's key) and the listener it dials now. */
typedef struct ucx_dial {
  struct sockaddr_storage primary, dest;
  uint32_t expect_id; /* the server id a route or REDIRECT promised; 0 */
  bool routed;        /* dest came from a route or REDIRECT: HELLO says so */
  bool retried;       /* a stale route was dropped for the primary once */
} ucx_dial;

struct ucx_loop {
  weft_loop *loop;
  weft_source source;
  ucp_worker_h worker;
  ucx_settings cfg;
  ucx_slot *slots;
  uint32_t n_slots;
  uint32_t free_head, free_tail; /* FIFO of free slots; UINT32_MAX = none */
  uint32_t n_free;
  ucx_channel *pend_head, *pend_tail;
  size_t n_pend;
  void **closing; /* ucp_ep_close_nbx requests in flight */
  size_t n_closing, cap_closing;
  ucx_listener *listeners;
  ucx_op *ops; /* requests in flight */
  size_t n_ops;
  ucx_epr *lingering;    /* closed channels' eps with requests in flight, or
                            waiting for the peer's disconnect */
  ucx_preconn *preconns; /* held by a listener until their HELLO */
  size_t n_preconns;
  bool preconn_hello; /* a HELLO arrived for one of them */
  weft_timer tick;    /* keepalive, lingering and redirect deadlines */
  size_t live_wraps;  /* UCX receive descriptors held by weft_bufs */
  uint64_t drains;    /* polls whose progress ran until nothing was left */
  /* What a ucp_worker_progress that found nothing costs, in ns: the
   * least of UCX_PROGRESS_SAMPLES timed ones, one poll in
   * UCX_PROGRESS_SAMPLE timed. Over tcp lanes it is an epoll_wait (poll
   * then delivers before progressing again), over shared memory a few
   * loads (poll progresses until nothing is left, which delivers bigger
   * batches). 0 until measured. */
  uint64_t empty_progress_ns;
  uint64_t sample_min_ns; /* the least of this round's samples so far */
  uint32_t n_samples;     /* samples in this round */
  uint32_t polls;         /* polls so far, for the sampling */
  bool warned_header;     /* logged a message of another wire format */
  bool in_progress;       /* inside ucp_worker_progress: UCX callbacks may run,
                             the core must not (asserted where it calls in) */
  /* Connection requests conn_handler queued for poll: entries
   * [accept_head, n_accepts); a closed listener's have uln == NULL. */
  struct ucx_accept *accepts;
  size_t accept_head, n_accepts, cap_accepts;
  /* Recycled send contexts and queue entries (linked by op.next): every
   * message needs one of each, and a ping pong pays each malloc in its
   * round trip. */
  ucx_op *free_sends, *free_entries;
  size_t n_free_sends, n_free_entries;
};

struct ucx_listener {
  ucp_listener_h ul;
  weft_listener *l;
  ucx_loop *tl;
  int next_loop; /* the server's address: the loop the next connection
                    goes to (round-robin; 0 keeps it here) */
  ucx_listener *prev, *next;
};

/* A connection the listener on the server's address (of a server with
 * several loops) accepted and holds until the client's HELLO: then poll
 * checks the HELLO and either keeps the connection (the core adopts this
 * ep as a channel on this loop, replaying the HELLO) or answers REDIRECT
 * and closes it. */
struct ucx_preconn {
  ucx_loop *tl;
  ucx_listener *uln; /* NULL once the listener closed */
  ucx_epr *epr;      /* its ep (epr->uc is NULL) and requests */
  uint64_t hello_by; /* closed unanswered after this, ns */
  bool hello;        /* the HELLO below arrived */
  ucx_hdr hdr;       /* the HELLO */
  uint32_t data[2];
  size_t len; /* of the HELLO's data (more than 8 B: kept as 9) */
  bool rndv;  /* it came as a rendezvous (a broken rule) */
  ucx_preconn *next;
};

/* What the core carries from weft_listener_accepted to adopt (or discard):
 * a connection request, or a connection held until its HELLO. */
typedef struct ucx_handle {
  ucp_conn_request_h req; /* or NULL: */
  ucx_preconn *pc;
  uint32_t server_id;
} ucx_handle;

/* A connection request waiting for poll to hand it to the core. */
typedef struct ucx_accept {
  ucx_listener *uln;
  ucp_conn_request_h req;
} ucx_accept;

/* A send in flight: the header must live until UCX completes it, and so
 * must the data (`hold`). */
typedef struct ucx_send {
  ucx_op op;
  ucx_hdr hdr;
  uint32_t ctrl_data[2]; /* HELLO: max_message, flags; HELLO_ACK:
                            max_message, server id */
  weft_buf *hold;
} ucx_send;

/* The plugin's state of channel `ch`. */
static inline ucx_channel *weft__ucx_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

/* Whether channel `uc` has a slot and the core sees it active. */
static inline bool weft__ucx_channel_active(const ucx_channel *uc) {
  return uc->has_slot && weft_channel_is_active(uc->ch);
}

/* ---- functions shared by the plugin's files ----
 *
 * Thread: every function here runs on the thread of the loop whose
 * instance (ucx_loop) it is given, unless its comment says otherwise. Those
 * marked "inside progress" run from UCX callbacks, inside
 * ucp_worker_progress: they only record work for poll, and no user handler
 * runs there. */

/* -- context.c: process-wide settings and the context -- */

/** The process's UCP context while a reference is held
 *  (weft__ucx_ctx_acquire), NULL otherwise. Written under the context's
 *  lock; a loop reads it while it holds a reference. */
extern ucp_context_h weft__ucx_ctx;

/** The [transport.ucx] keys, for the ops' config_keys. */
extern const weft_transport_key weft__ucx_keys[];

/**
 * The weft error for UCX status `st`: 0 for UCS_OK, WEFT_EIO for a status
 * without a closer match. Any thread.
 */
int weft__ucx_status_to_weft(ucs_status_t st);

/**
 * Takes a reference on the process's UCP context, creating it on the first
 * (from the [transport.ucx] settings, which the UCX_* variables override),
 * and copies the settings in effect to `*out` unless it is NULL. Returns 0,
 * or the UCX error mapped with a sentence in `why` (the context then is
 * not referenced). Any thread.
 */
int weft__ucx_ctx_acquire(ucx_settings *out, char *why, size_t why_len);

/** Drops a reference weft__ucx_ctx_acquire took; the last one cleans the
 *  context up. Any thread. */
void weft__ucx_ctx_release(void);

/**
 * The ops' config_set: sets one [transport.ucx] key for contexts created
 * afterwards. Returns 0, WEFT_EINVAL with the valid values in `why`, or
 * WEFT_ENOENT for a key it does not know. Any thread.
 */
int weft__ucx_config_set(const char *key, const char *value, char *why,
                         size_t why_len);

/* -- wire.c: what a peer may send -- */

/**
 * Starts channel state `w` with this side's `window` (credit it grants in
 * its HELLO or HELLO_ACK) and `max_message`; `client` when this side
 * connects (sends HELLO). Any thread.
 */
void weft__ucx_wire_init(ucx_wire *w, uint32_t window, uint32_t max_message,
                         bool client);

/** weft__ucx_hdr_check's answer for a header that is not weft's (another
 *  size): drop the message, nobody to blame. */
#define UCX_HDR_FOREIGN 1

/** The name of message type `type` ("DATA"), "?" for one weft does not
 *  know. Any thread. */
const char *weft__ucx_msg_name(uint32_t type);

/** Formats the rule a peer broke into `why` (`why_len` bytes, nothing if
 *  0) and returns `err`: weft__ucx_hdr_check's way out. Any thread. */
__attribute__((cold, format(printf, 4, 5))) int
weft__ucx_wire_broken(int err, char *why, size_t why_len, const char *fmt, ...);

/** weft__ucx_hdr_check for a HELLO or HELLO_ACK (`h`, of type `type`):
 *  rare, so out of line. Any thread. */
int weft__ucx_hdr_check_hello(ucx_wire *w, const ucx_hdr *h, uint32_t type,
                              const void *data, size_t len, bool rndv,
                              char *why, size_t why_len);

/** weft__ucx_hdr_check for a REDIRECT (`h`): only to the side that
 *  connects, before HELLO_ACK, once per connect, with UCX_WIRE_VERSION, no
 *  credit, eager data of UCX_REDIRECT_HEAD bytes plus 4 per listener (2 ..
 *  UCX_MAX_LISTENERS of them, a server id not 0, an index 1 .. n-1, ports
 *  1 .. 65535); the chosen port goes to w->redirect_port, the id to
 *  w->peer_server_id. Any thread. */
int weft__ucx_hdr_check_redirect(ucx_wire *w, const ucx_hdr *h,
                                 const void *data, size_t len, bool rndv,
                                 char *why, size_t why_len);

/**
 * Checks one message a peer sent on a channel whose wire state is `w`:
 * `header` (`header_len` bytes, UCX's user header), and `len` bytes of
 * data, at `data` unless `rndv` (a rendezvous: only its length is known
 * yet). Nothing is trusted: the type must be known and come in handshake
 * order (HELLO on the accepting side, HELLO_ACK on the connecting side,
 * once, with UCX_WIRE_VERSION, a window and max_message within the
 * settings' limits, as eager data of UCX_HELLO_DATA (HELLO, flags known) or
 * UCX_HELLO_ACK_DATA (HELLO_ACK, a server id not 0) bytes; REDIRECT:
 * weft__ucx_hdr_check_redirect); DATA, CREDIT, FIN, PING and PONG only
 * after the handshake and before the peer's FIN; DATA and FIN with the
 * next sequence number; DATA of 1 .. max_message bytes within the credit
 * left (bytes + UCX_MSG_COST); CREDIT, FIN, PING and PONG eager and empty;
 * a credit grant no larger than the credit used and not yet granted back
 * (a CREDIT message's not 0). Takes a valid message into `w` (handshake
 * fields, sequence, credit both ways) and returns 0; returns
 * UCX_HDR_FOREIGN for a header of another size (`w` untouched); else, with
 * `w` untouched and a sentence in `why` (`why_len` bytes, "peer sent ..."),
 * WEFT_EMSGSIZE for DATA over max_message or WEFT_EPROTO for any other
 * broken rule. Pure: no UCX call, no allocation; any thread. Inline: it
 * runs for every message (the rules' texts are out of line, in wire.c).
 */
static inline int weft__ucx_hdr_check(ucx_wire *w, const void *header,
                                      size_t header_len, const void *data,
                                      size_t len, bool rndv, char *why,
                                      size_t why_len) {
  ucx_hdr h;
  if (header_len != sizeof h)
    return UCX_HDR_FOREIGN;
  __builtin_memcpy(&h, header, sizeof h);
  uint32_t type = weft__ucx_ref_type(h.to);
  if (type < UMSG_HELLO || type > UMSG_PONG)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a message of unknown type %u",
                                 type);
  if (type == UMSG_HELLO || type == UMSG_HELLO_ACK)
    return weft__ucx_hdr_check_hello(w, &h, type, data, len, rndv, why,
                                     why_len);
  if (type == UMSG_REDIRECT)
    return weft__ucx_hdr_check_redirect(w, &h, data, len, rndv, why, why_len);
  if (!w->peer_known)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len, "peer sent %s before %s",
        weft__ucx_msg_name(type), w->client ? "HELLO_ACK" : "HELLO");
  if (w->fin_received)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent %s after its FIN",
                                 weft__ucx_msg_name(type));
  if (type == UMSG_DATA) {
    if (len == 0)
      return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                   "peer sent a DATA message without data");
    if (len > w->max_message)
      return weft__ucx_wire_broken(
          WEFT_EMSGSIZE, why, why_len,
          "peer sent %zu B in one message, max_message is %u", len,
          w->max_message);
  } else if (len > 0 || rndv) {
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent %s with %zu B of data",
                                 weft__ucx_msg_name(type), len);
  }
  bool sequenced = type == UMSG_DATA || type == UMSG_FIN;
  if (sequenced && h.seq != w->recv_seq)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %s with sequence number %u, expected %u",
        weft__ucx_msg_name(type), h.seq, w->recv_seq);
  uint64_t cost = type == UMSG_DATA ? len + UCX_MSG_COST : 0;
  if (cost > w->recv_credit)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %zu B beyond its credit window (%u B): it costs %llu B, "
        "%llu B are left",
        len, w->window, (unsigned long long)cost,
        (unsigned long long)w->recv_credit);
  if (h.credit > w->send_unacked)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer granted %u B of credit, only %llu B are outstanding", h.credit,
        (unsigned long long)w->send_unacked);
  if (type == UMSG_CREDIT && h.credit == 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a CREDIT of 0 B");

  w->send_unacked -= h.credit;
  w->send_credit += h.credit;
  if (!sequenced)
    return 0; /* CREDIT, PING, PONG */
  w->recv_seq++;
  w->recv_credit -= cost;
  if (type == UMSG_FIN)
    w->fin_received = true;
  return 0;
}

/** Records that this side grants `granted` credit back (a CREDIT message,
 *  or a DATA header: weft__ucx_wire_sent_data). Any thread. */
static inline void weft__ucx_wire_granted(ucx_wire *w, uint32_t granted) {
  w->recv_credit += granted;
}

/**
 * Records that this side sends a DATA message of `len` bytes, granting
 * `granted` credit back in its header: takes len + UCX_MSG_COST from the
 * send credit (the caller checked it is there: weft__ucx_wire_sendable)
 * and adds `granted` to the peer's. Any thread.
 */
static inline void weft__ucx_wire_sent_data(ucx_wire *w, size_t len,
                                            uint32_t granted) {
  uint64_t cost = len + UCX_MSG_COST;
  w->send_credit -= cost;
  w->send_unacked += cost;
  weft__ucx_wire_granted(w, granted);
}

/** The DATA bytes this side may send in one message now: what its credit
 *  allows after UCX_MSG_COST, at most the smaller max_message of the two
 *  sides; 0 while the peer is unknown. Any thread. */
static inline size_t weft__ucx_wire_sendable(const ucx_wire *w) {
  if (!w->peer_known || w->send_credit <= UCX_MSG_COST)
    return 0;
  uint64_t n = w->send_credit - UCX_MSG_COST;
  uint32_t max = w->max_message < w->peer_max_message ? w->max_message
                                                      : w->peer_max_message;
  return n < max ? (size_t)n : max;
}

/* -- loop.c: send contexts, queue entries, requests in flight -- */

/** A zeroed send context, from the loop's free list or malloc; NULL when
 *  out of memory. */
ucx_send *weft__ucx_send_get(ucx_loop *tl);

/** Gives a send context back to its loop's free list (freed once the list
 *  holds UCX_FREE_LIST_MAX). Also inside progress. */
void weft__ucx_send_put(ucx_send *s);

/** A zeroed reassembly queue entry, from the loop's free list or malloc;
 *  NULL when out of memory. Also inside progress. */
rq_entry *weft__ucx_entry_get(ucx_loop *tl);

/** Gives a queue entry back to its loop's free list (freed once the list
 *  holds UCX_FREE_LIST_MAX). Also inside progress. */
void weft__ucx_entry_put(rq_entry *e);

/**
 * Lists request `req`, which UCX returned for `op` on the ep of record
 * `r`, on loop `tl` (and counts it on `r`) until its callback runs; `bp` is
 * the buffer to give back if it never ends. Also inside progress.
 */
void weft__ucx_op_link(ucx_loop *tl, ucx_epr *r, ucx_op *op, weft_buf **bp,
                       void *req);

/** Takes `op` off the loop's list of requests, from its callback; nothing
 *  if it was not listed. Inside progress (or the worker's destruction). */
void weft__ucx_op_unlink(ucx_op *op);

/** This plugin's instance on `loop`, created on first use; NULL with the
 *  error in `*err` if loop_init failed. */
ucx_loop *weft__ucx_loop_state_of(weft_loop *loop, int *err);

/* -- loop.c: the channel table -- */

/**
 * Gives channel `uc` a slot in the loop's table (its id and generation),
 * growing the table while fewer than UCX_MIN_FREE_SLOTS are free. Returns
 * 0, or WEFT_ENOMEM or WEFT_ENOBUFS (UCX_MAX_SLOTS channels) when no slot
 * is free.
 */
int weft__ucx_slot_take(ucx_loop *tl, ucx_channel *uc);

/** Frees channel `uc`'s slot; its generation moves on, so that messages
 *  still addressed to the channel are dropped. */
void weft__ucx_slot_free(ucx_loop *tl, ucx_channel *uc);

/** The channel slot reference `ref` names; NULL if the slot is free or of
 *  another generation. Inside progress. */
ucx_channel *weft__ucx_slot_find(ucx_loop *tl, uint32_t ref);

/** The open channel whose ep is `ep`, NULL if none (a scan of the table).
 *  Inside progress. */
ucx_channel *weft__ucx_slot_find_ep(ucx_loop *tl, ucp_ep_h ep);

/* -- loop.c: the pending list -- */

/** Records work `what` (PEND_*) for poll and lists the channel on the
 *  loop's pending list, taking a channel reference, unless it is listed
 *  already. Inside progress or outside it. */
void weft__ucx_pend_mark(ucx_channel *uc, unsigned what);

/** Takes the first channel off the pending list (NULL: empty); the caller
 *  releases the list's channel reference. */
ucx_channel *weft__ucx_pend_pop(ucx_loop *tl);

/** Takes a closing channel off the pending list, with its work. Returns
 *  true if it was listed: the caller then releases the list's channel
 *  reference. */
bool weft__ucx_pend_unlink(ucx_channel *uc);

/* -- loop.c: the per-loop instance -- */

/**
 * The ops' loop_init: takes a context reference, creates the loop's worker
 * (single-thread mode, the AM handler) and adds its event fd to the loop as
 * a source; stores the instance in `*loop_state`. Returns 0, or an error
 * (logged with its cause; nothing is left behind).
 */
int weft__ucx_loop_init(weft_loop *loop, void **loop_state);

/**
 * The ops' loop_fini, after the core closed every channel: closes the
 * listeners, waits (bounded) for requests in flight and ep closes, gives
 * back the buffers of requests that never end, destroys the worker and
 * drops the context reference; while received buffers are still held, the
 * worker, the reference and the instance are kept (logged).
 */
void weft__ucx_loop_fini(weft_loop *loop, void *loop_state);

/* -- send.c: sending -- */

/**
 * Sends control message `type` (UMSG_HELLO, HELLO_ACK, CREDIT or FIN; the
 * handshake's carry this side's max_message as data) eagerly on channel
 * `uc`'s ep, with UCP_AM_SEND_FLAG_* `flags`.
 * Returns 0 (sent, or queued by UCX), WEFT_ENOMEM, or UCX's error mapped.
 * Also inside progress (a HELLO_ACK).
 */
int weft__ucx_send_ctrl(ucx_channel *uc, uint32_t type, uint32_t flags);

/**
 * Sends channel `uc`'s flushed bytes as DATA messages while credit lasts,
 * at most UCX_SENDS_PER_FLUSH of them (then PEND_FLUSH goes on next poll).
 * Returns 0 or the first failed send's error. Outside progress; the caller
 * holds a channel reference (promise callbacks may close the channel).
 */
int weft__ucx_flush_now(ucx_channel *uc);

/** The ops' flush: weft__ucx_flush_now under a channel reference. Returns
 *  0 or an error (the core then closes the channel). Outside progress
 *  (asserted). */
int weft__ucx_flush(weft_channel *ch);

/**
 * Sends REDIRECT on the ep of record `r` (a held connection's, on loop
 * `tl`) to the client's slot `to` (a slot reference): server id `id`, the
 * listener `index` to use, and the `n` listeners' `ports`. Returns 0 (sent,
 * or queued by UCX), WEFT_ENOMEM, or UCX's error mapped. Outside progress.
 */
int weft__ucx_send_redirect(ucx_loop *tl, ucx_epr *r, uint32_t to, uint32_t id,
                            uint32_t index, uint32_t n, const uint32_t *ports);

/** Grants the bytes delivered to the pipeline back to the peer (CREDIT)
 *  once a quarter window is owed; a failed send marks PEND_ERROR. Outside
 *  progress. */
void weft__ucx_return_credit(ucx_channel *uc);

/* -- recv.c: receiving -- */

/** Marks PEND_DELIVER if channel `uc` reads and the head of its
 *  reassembly queue is complete. Also inside progress. */
void weft__ucx_rq_check_head(ucx_channel *uc);

/** Frees a closing channel's reassembly queue; an entry whose rendezvous
 *  receive is in flight is orphaned, and freed when it completes. */
void weft__ucx_rq_free(ucx_channel *uc);

/**
 * The worker's handler for UCX_AM_ID (`arg`: the ucx_loop): takes a HELLO,
 * HELLO_ACK, DATA, CREDIT or FIN into its channel's state once
 * weft__ucx_hdr_check passed it, and drops messages for closed channels,
 * of another header size, or for a channel whose peer broke the protocol
 * (which it marks for closing at the first). Returns UCS_INPROGRESS when
 * it keeps UCX's data descriptor; UCS_ERR_REJECTED for a rendezvous it
 * refuses (the sender's send ends with that); else UCS_OK. Inside
 * progress.
 */
ucs_status_t weft__ucx_am_recv(void *arg, const void *header, size_t header_len,
                               void *data, size_t len,
                               const ucp_am_recv_param_t *param);

/**
 * Runs the work UCX callbacks left for the channels listed when it starts
 * (connect outcome, flush, delivery, errors): pipeline events fire here.
 * Returns how many channels it ran. From poll, outside progress.
 */
int weft__ucx_dispatch_pending(ucx_loop *tl);

/**
 * The eps' error handler (peer error handling; `arg`: the ucx_loop): marks
 * the channel's ep failed and, unless a connected peer sent FIN first,
 * PEND_ERROR; or has a lingering ep closed by force. Inside progress.
 */
void weft__ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status);

/* -- listen.c: listeners and redirects -- */

/** Hands the connection requests queued by the listeners' handler to the
 *  core (weft_listener_accepted), oldest first, or to a redirect (the
 *  listener on the server's address, when another loop's turn has come).
 *  Returns how many. From poll, outside progress. */
int weft__ucx_accept_pending(ucx_loop *tl);

/** The held connection whose ep is `ep`, NULL if none. Inside progress. */
ucx_preconn *weft__ucx_preconn_find(ucx_loop *tl, ucp_ep_h ep);

/**
 * Records the client's HELLO on held connection `pc` (`header` of
 * `header_len` bytes, `len` bytes of data at `data` unless `rndv`) for
 * poll, which checks it and keeps or redirects the connection
 * (weft__ucx_preconn_dispatch). Inside progress.
 */
void weft__ucx_preconn_hello(ucx_preconn *pc, const void *header,
                             size_t header_len, const void *data, size_t len,
                             bool rndv);

/** An ep error on `ep`: if it is a held connection's, its client left and
 *  it is closed. Inside progress. */
void weft__ucx_preconn_error(ucx_loop *tl, ucp_ep_h ep);

/**
 * Decides the held connections whose HELLO came: a HELLO that breaks a
 * rule is refused (logged); a ROUTED one, or one whose turn it is, is
 * handed to the core (kept on this loop); the others are answered with
 * REDIRECT. Those that waited UCX_HELLO_WAIT_NS (all of them if `all`) are
 * closed. Returns how many it handled. From poll or the tick.
 */
int weft__ucx_preconn_dispatch(ucx_loop *tl, bool all);

/**
 * Takes over held connection `pc` as channel `uc` (adopt; `uc` has its
 * slot and wire state): its ep and record, then its HELLO replayed through
 * weft__ucx_hdr_check and answered with HELLO_ACK. Frees `pc`. Returns 0
 * or an error (the channel's close then closes the ep).
 */
int weft__ucx_preconn_adopt(ucx_preconn *pc, ucx_channel *uc);

/** Closes held connection `pc`'s ep (by force where UCX allows) and frees
 *  it: a handle the core discards. */
void weft__ucx_preconn_drop(ucx_preconn *pc);

/* -- route.c: the client's routes -- */

/**
 * The route to the server at `primary` (its address as the application
 * named it), if a REDIRECT taught one: the next listener's port, round
 * robin over all of them, in `*port`, the server's id in `*server_id`.
 * Returns false when there is none. Any thread.
 */
bool weft__ucx_route_pick(const struct sockaddr_storage *primary,
                          uint16_t *port, uint32_t *server_id);

/**
 * Learns (or replaces) the route to the server at `primary`: id
 * `server_id`, the ports of its `n` listeners (`ports`, n uint32_t as a
 * REDIRECT carries them, checked by weft__ucx_hdr_check). The oldest route
 * makes room past UCX_ROUTES. Any thread.
 */
void weft__ucx_route_learn(const struct sockaddr_storage *primary,
                           uint32_t server_id, uint32_t n, const void *ports);

/** Forgets the route to `primary` unless its server id is `keep_id` (0:
 *  forget it whatever it is). Any thread. */
void weft__ucx_route_forget(const struct sockaddr_storage *primary,
                            uint32_t keep_id);

/**
 * The ops' listen: a UCP listener on the first address of `ep` (UCX has
 * no backlog). Returns 0, the loop instance's or the resolver's error,
 * WEFT_ENOMEM, or UCX's error mapped. The listener's loop.
 */
int weft__ucx_listen(weft_listener *l, const weft_endpoint *ep, int backlog);

/** Rejects a listener's queued connection requests, destroys its UCP
 *  listener and frees it. */
void weft__ucx_listener_free(ucx_listener *uln);

/** The ops' listen_close: frees the listener (nothing if it was freed
 *  already, by loop_fini). The listener's loop. */
void weft__ucx_listen_close(weft_listener *l);

/** The ops' listen_address: the listener's bound address as text. Returns
 *  0, WEFT_ECLOSED, UCX's error mapped or weft_sockaddr_format's. */
int weft__ucx_listen_address(weft_listener *l, char *buf, size_t len);

/* -- channel.c: closing eps -- */

/** CLOCK_MONOTONIC in nanoseconds. Any thread. */
uint64_t weft__ucx_now_ns(void);

/** Closes the lingering eps whose requests ended or whose time is up (all
 *  of them if `all`). From poll, the tick or loop_fini, outside progress. */
void weft__ucx_linger_check(ucx_loop *tl, bool all);

/**
 * Closes the ep of record `r`, whose channel let go of it (force and keep
 * set): at once when no request is in flight on it and we are not
 * `in_progress`, else it lingers (at most UCX_CLOSE_WAIT_NS) until
 * weft__ucx_linger_check closes it.
 */
void weft__ucx_epr_close(ucx_loop *tl, ucx_epr *r, bool in_progress);

/**
 * Connects channel `uc` again, to port `port` of the same host: after a
 * REDIRECT (`redirected`: w.redirect_port, a second REDIRECT is refused),
 * or to the server's own port after a stale route. Its ep is closed, it
 * takes a new slot and ep and says HELLO. Returns 0 or an error (the
 * connect then fails). From poll.
 */
int weft__ucx_reconnect(ucx_channel *uc, uint16_t port, bool redirected);

/**
 * A connect that went to a listener a route named failed: the route is
 * forgotten and the channel connects to the server's own address, once.
 * Returns true when it did (the connect goes on), false when it does not
 * apply or failed (uc->err then). From poll.
 */
bool weft__ucx_dial_retry(ucx_channel *uc);

/**
 * HELLO_ACK came: checks the server's id against the one a route or
 * REDIRECT promised; another server there (its port reused) makes the
 * route stale: weft__ucx_dial_retry. After a connect to the server's own
 * address, a route to another server id there is forgotten. Returns true
 * when the connect goes on elsewhere. From poll.
 */
bool weft__ucx_dial_check(ucx_channel *uc);

/** Starts the loop's tick (keepalive, lingering eps, held connections'
 *  deadlines) unless it runs. */
void weft__ucx_tick_start(ucx_loop *tl);

#endif
