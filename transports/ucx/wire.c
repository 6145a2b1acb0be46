/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/wire.c: the rules of the UCX transport's wire protocol,
 * as a receiver enforces them (weft__ucx_hdr_check, inline in
 * ucx_wire.h because it runs for every message, and its rare parts
 * here: the handshake and the texts of broken rules). Every value in a
 * message comes from the peer: its type, the slot it names (its ep's
 * channel's own, or the message is refused: recv.c finds the channel by
 * the ep), the handshake's version, slot, window and
 * max_message, a REDIRECT's port, the sequence number, the data's length
 * and the credit it grants. Each is checked against the channel's wire state
 * before the receive path takes the message in or allocates anything for it;
 * the state is updated only for a message that passes every check. Pure
 * functions (no UCX call), so that tests/fuzz/fuzz_ucx_header.c can drive
 * them. */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <weft/error.h>

#include "transports/ucx/ucx_internal.h"

void weft__ucx_wire_init(ucx_wire *w, uint32_t window, uint32_t max_message,
                         bool client) {
  *w = (ucx_wire){.window = window,
                  .max_message = max_message,
                  .client = client,
                  .recv_credit = window};
}

const char *weft__ucx_msg_name(uint32_t type) {
  static const char *const names[] = {"?",        "HELLO",  "HELLO_ACK",
                                      "DATA",     "CREDIT", "FIN",
                                      "REDIRECT", "PING",   "PONG"};
  return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

int weft__ucx_wire_broken(int err, char *why, size_t why_len, const char *fmt,
                          ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why_len > 0)
    vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
  return err;
}

/* HELLO, HELLO_ACK and REDIRECT carry the sender's wire version in the
 * seq field; a peer of another version is refused with why. */
static bool version_ok(const ucx_hdr *h, char *why, size_t why_len) {
  uint32_t version = weft__ucx_ref_type(h->seq);
  if (version == UCX_WIRE_VERSION)
    return true;
  weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                        "peer speaks UCX wire version %u, this weft %u (a "
                        "weft build from another time?)",
                        version, UCX_WIRE_VERSION);
  return false;
}

/* HELLO or HELLO_ACK: the peer's version, slot, window and max_message. */
int weft__ucx_hdr_check_hello(ucx_wire *w, const ucx_hdr *h, uint32_t type,
                              const void *data, size_t len, bool rndv,
                              char *why, size_t why_len) {
  const char *name = weft__ucx_msg_name(type);
  if (type == UMSG_HELLO && w->client)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent HELLO to the side that connected");
  if (type == UMSG_HELLO_ACK && !w->client)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent HELLO_ACK to the side that accepted");
  if (w->peer_known)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a second %s", name);
  if (!version_ok(h, why, why_len))
    return WEFT_EPROTO;
  unsigned want = type == UMSG_HELLO ? UCX_HELLO_DATA : UCX_HELLO_ACK_DATA;
  if (rndv || len != want)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent %s with %zu B of %s data, expected %u B eager", name, len,
        rndv ? "rendezvous" : "eager", want);
  uint32_t v[3]; /* max_message; HELLO: flags, HELLO_ACK: server id; the
                    first sequence number */
  memcpy(v, data, sizeof v);
  uint32_t max_message = v[0];
  if (type == UMSG_HELLO && (v[1] & ~UCX_HELLO_ROUTED) != 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent HELLO with unknown flags 0x%x",
                                 v[1]);
  if (type == UMSG_HELLO_ACK && v[1] == 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent HELLO_ACK with server id 0");
  if (h->credit < UCX_WINDOW_MIN || h->credit > UCX_WINDOW_MAX)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer announced a window of %u B, the limits are %u .. %u", h->credit,
        UCX_WINDOW_MIN, UCX_WINDOW_MAX);
  if (max_message < UCX_MAX_MESSAGE_MIN || max_message > UCX_MAX_MESSAGE_MAX)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer announced max_message %u, the limits are %u .. %u", max_message,
        UCX_MAX_MESSAGE_MIN, UCX_MAX_MESSAGE_MAX);
  w->peer_known = true;
  w->peer_id = weft__ucx_ref_id(h->seq);
  w->peer_gen = weft__ucx_ref_gen(h->seq);
  w->peer_max_message = max_message;
  if (type == UMSG_HELLO)
    w->peer_flags = v[1];
  else
    w->peer_server_id = v[1];
  w->recv_seq = v[2];
  w->send_credit = h->credit; /* nothing was sent before */
  w->send_unacked = 0;
  return 0;
}

/* REDIRECT: the ports of the server's listeners and which one to use,
 * instead of HELLO_ACK, once per connect. */
int weft__ucx_hdr_check_redirect(ucx_wire *w, const ucx_hdr *h,
                                 const void *data, size_t len, bool rndv,
                                 char *why, size_t why_len) {
  if (!w->client)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent REDIRECT to the side that accepted");
  if (w->peer_known)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent REDIRECT after HELLO_ACK");
  if (w->redirected)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent a second REDIRECT");
  if (!version_ok(h, why, why_len))
    return WEFT_EPROTO;
  if (rndv || len < UCX_REDIRECT_HEAD)
    return weft__ucx_wire_broken(
        WEFT_EPROTO, why, why_len,
        "peer sent REDIRECT with %zu B of %s data, expected %u B and 4 per "
        "listener, eager",
        len, rndv ? "rendezvous" : "eager", UCX_REDIRECT_HEAD);
  if (h->credit != 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer granted %u B of credit in a REDIRECT",
                                 h->credit);
  uint32_t head[3]; /* server id, index, n */
  memcpy(head, data, sizeof head);
  uint32_t n = head[2];
  if (n < 2 || n > UCX_MAX_LISTENERS ||
      len != UCX_REDIRECT_HEAD + (size_t)n * 4u)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent REDIRECT for %u listeners in %zu B",
                                 n, len);
  if (head[1] == 0 || head[1] >= n)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer redirected to listener %u of %u",
                                 head[1], n);
  if (head[0] == 0)
    return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                 "peer sent REDIRECT with server id 0");
  uint32_t chosen = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t port;
    memcpy(&port, (const char *)data + UCX_REDIRECT_HEAD + 4u * i, sizeof port);
    if (port == 0 || port > 65535)
      return weft__ucx_wire_broken(WEFT_EPROTO, why, why_len,
                                   "peer sent REDIRECT with port %u", port);
    if (i == head[1])
      chosen = port;
  }
  w->redirected = true;
  w->redirect_port = chosen;
  w->peer_server_id = head[0];
  return 0;
}
