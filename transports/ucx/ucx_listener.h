/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_listener.h: the UCX plugin's server side and the
 * client's routes: UCP listeners, the accept queue of connection requests,
 * the connections the listener on the server's address holds until their
 * HELLO (ucx_preconn) and redirects (listen.c), and the listener ports a
 * client learnt from REDIRECTs (route.c).
 *
 * Separate because it is the one part of the plugin that spans loops (a
 * server listens on every loop and spreads its connections by REDIRECT)
 * and process-wide client memory (routes), apart from one channel's data
 * path. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_LISTENER_H
#define WEFT_TRANSPORTS_UCX_UCX_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_endpoint.h"

struct ucx_listener {
  ucp_listener_h ul;
  weft_listener *l;
  ucx_loop *tl;
  int next_loop;           /* the server's address: the loop the next connection
                              goes to (round-robin; 0 keeps it here) */
  unsigned n_held;         /* its connections held for their HELLO */
  uint64_t refused;        /* connections refused since the last log line */
  uint64_t refused_log_ns; /* when that line was logged */
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
  uint32_t data[3];
  size_t len; /* of the HELLO's data (more than 12 B: kept as 13) */
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

/* -- listen.c: listeners and redirects -- */

/** Hands the connection requests queued by the listeners' handler to the
 *  core (weft_listener_accepted), oldest first, or to a redirect (the
 *  listener on the server's address, when another loop's turn has come).
 *  Returns how many. From poll, outside progress. */
int weft__ucx_accept_pending(ucx_loop *tl);

/**
 * Records the client's first message, which must be its HELLO, on held
 * connection `pc` (`header` of
 * `header_len` bytes, `len` bytes of data at `data` unless `rndv`) for
 * poll, which checks it and keeps or redirects the connection
 * (weft__ucx_preconn_dispatch). Inside progress.
 */
void weft__ucx_preconn_hello(ucx_preconn *pc, const void *header,
                             size_t header_len, const void *data, size_t len,
                             bool rndv);

/** An ep error on held connection `pc`'s ep: its client left, and it is
 *  closed. Inside progress. */
void weft__ucx_preconn_error(ucx_preconn *pc);

/**
 * Decides the held connections whose HELLO came: a HELLO that breaks a
 * rule is refused (logged); a ROUTED one, or one whose turn it is, is
 * handed to the core (kept on this loop); the others are answered with
 * REDIRECT. Those that waited hello_timeout_ms (all of them if `all`) are
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

#endif
