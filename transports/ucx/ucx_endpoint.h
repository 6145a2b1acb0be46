/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_endpoint.h: the UCX plugin's per-channel level:
 * the channel's state (ucx_channel) around its ucp_ep, the ep's record
 * that outlives the channel (ucx_epr), where a connect goes (ucx_dial),
 * the reassembly queue's entries, sends in flight, and the functions of
 * the send path (send.c), the receive path (recv.c) and the channel's
 * lifecycle (channel.c).
 *
 * Separate from the worker header because this is one connection's state
 * and data path, from the flush to the AM handler, while the worker
 * header holds what the loop keeps for all of them. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_ENDPOINT_H
#define WEFT_TRANSPORTS_UCX_UCX_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_wire.h"
#include "transports/ucx/ucx_worker.h"

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
struct ucx_epr {
  ucp_ep_h ep;
  ucx_channel *uc;           /* its open channel; NULL once that closed */
  ucx_preconn *pc;           /* or the held connection it is (listen.c) */
  struct ucx_epr *hash_next; /* in the loop's ep index (ep_buckets) */
  bool indexed;              /* in that index */
  size_t n_ops;              /* requests on it whose callbacks did not run */
  bool force;                /* close by force (peer error handling only) */
  bool keep;                 /* not closed: ucp_worker_destroy releases it */
  bool peer_left;            /* the ep's error came: the peer disconnected */
  uint64_t close_by;         /* lingering: close even with requests, in ns */
  struct ucx_epr *next;      /* on the loop's lingering list */
};

/* One message waiting in a channel's reassembly queue. */
struct rq_entry {
  ucx_op op; /* a rendezvous receive in flight */
  struct rq_entry *next;
  ucx_channel *uc; /* NULL once the channel closed (rendezvous in flight) */
  weft_buf *b;     /* NULL for FIN */
  uint32_t cost; /* credit granted back once delivered: bytes + UCX_MSG_COST */
  bool ready;    /* all bytes are here */
};

/* Work a UCX callback left for poll. */
enum {
  PEND_DELIVER = 1u,   /* the queue head is ready */
  PEND_FLUSH = 2u,     /* credit arrived or the peer became known */
  PEND_CONNECTED = 4u, /* HELLO_ACK arrived */
  PEND_ERROR = 8u,     /* the ep failed: uc->err */
  PEND_REDIRECT = 16u  /* REDIRECT arrived: connect to w.redirect_port */
};

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
  uint32_t send_seq;     /* next DATA/FIN sequence to send (from a random
                            start: ucx_wire.h, UCX_WIRE_VERSION) */
  bool heard;            /* keepalive: a message came since the last tick */
  bool pong_inflight;    /* a PONG is queued in UCX: no second one */
  uint8_t silent;        /* keepalive: ticks without a message since */
  uint64_t hello_by;     /* accepted: closed without HELLO by then (ns);
                            0 once it came (or never awaited) */
  uint32_t server_id;    /* accepting side: its server's, for HELLO_ACK */
  struct ucx_dial *dial; /* connecting side, until connected (malloc'd) */
  ucx_wire w;
  rq_entry *rq_head, *rq_tail;
  ucx_channel *pend_next;
  /* The read budget (recv.c, "The read budget"), per poll of the loop. */
  weft_read_meter rb;
  /* The peer broke the protocol (PEND_ERROR with `err`): why, for the log
   * and the close's reason. Its messages are dropped from then on. */
  char violation[120];
};

/* Where a connecting channel goes: the server's address the application
 * named (`primary`, the route's key) and the listener it dials now. */
typedef struct ucx_dial {
  struct sockaddr_storage primary, dest;
  uint32_t expect_id; /* the server id a route or REDIRECT promised; 0 */
  bool routed;        /* dest came from a route or REDIRECT: HELLO says so */
  bool retried;       /* a stale route was dropped for the primary once */
} ucx_dial;

/* A send in flight: the header must live until UCX completes it, and so
 * must the data (`hold`). */
struct ucx_send {
  ucx_op op;
  ucx_hdr hdr;
  uint32_t ctrl_data[3]; /* HELLO: max_message, flags; HELLO_ACK:
                            max_message, server id; both: the first
                            sequence number */
  weft_buf *hold;
};

/* The plugin's state of channel `ch`. */
static inline ucx_channel *weft__ucx_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

/* Whether channel `uc` has a slot and the core sees it active. */
static inline bool weft__ucx_channel_active(const ucx_channel *uc) {
  return uc->has_slot && weft_channel_is_active(uc->ch);
}

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

/* One message as UCX handed it to the AM handler: the ep it came on
 * (reply_ep, if the sender said UCP_AM_SEND_FLAG_REPLY), weft's header
 * and the data (its length only, for a rendezvous). */
typedef struct ucx_recv_msg {
  bool has_ep; /* UCP_AM_RECV_ATTR_FIELD_REPLY_EP */
  ucp_ep_h ep;
  const void *header;
  size_t header_len;
  const void *data;
  size_t len;
  bool rndv;
} ucx_recv_msg;

/* What the receive path does with a message (weft__ucx_recv_route). */
typedef enum ucx_recv_action {
  UCX_RECV_DROP,      /* not weft's, or its ep's channel closed (closing) */
  UCX_RECV_HELD,      /* the first message of held connection r->pc */
  UCX_RECV_VIOLATION, /* broke a rule (err, why): channel uc closes */
  UCX_RECV_TAKE       /* uc's wire state took it: act on `type` */
} ucx_recv_action;

typedef struct ucx_recv_verdict {
  ucx_recv_action action;
  ucx_epr *r;       /* the record of the ep it came on, if any */
  ucx_channel *uc;  /* that ep's channel (VIOLATION, TAKE) */
  uint32_t type;    /* TAKE: its type (UMSG_*) */
  int err;          /* VIOLATION: WEFT_EPROTO or WEFT_EMSGSIZE */
  bool credit_came; /* TAKE: the peer granted credit: flush */
  char why[112];    /* VIOLATION: the rule broken */
} ucx_recv_verdict;

/**
 * The receive path's decision for message `m` on loop `tl`, into `v` (and
 * returned): whose it is (the channel or held connection of the ep it came
 * on, found in the loop's ep index; never the slot it names) and whether
 * it passes weft__ucx_hdr_check against that channel's wire state, which
 * takes it in (sequence, credit both ways, handshake). No UCX call and no
 * pipeline event: the AM handler acts on the verdict, and
 * tests/fuzz/fuzz_ucx_recv.c drives this with several eps. Inside progress
 * (or a fuzz target).
 */
ucx_recv_action weft__ucx_recv_route(ucx_loop *tl, const ucx_recv_msg *m,
                                     ucx_recv_verdict *v);

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

/** Accepted channel `uc`'s HELLO came (or it closed): it no longer waits
 *  for it (hello_timeout_ms). Also inside progress. */
void weft__ucx_hello_came(ucx_channel *uc);

/** Starts the loop's tick (keepalive, lingering eps, held connections'
 *  deadlines) unless it runs. */
void weft__ucx_tick_start(ucx_loop *tl);

#endif
