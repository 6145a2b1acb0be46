/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/wire.c: what the peer controls, checked before use. The
 * hello of the handshake (credits and receive size) and, per received
 * message, its imm_data (flags and returned credits), its length and its
 * kind, against the channel's credit books; and how many credits go back,
 * from the books and the slots the channel holds. Pure functions of bytes
 * and books, no device: connect.c, recv.c and send.c call them, and the
 * fuzz target tests/fuzz/fuzz_verbs_header.c runs them on arbitrary input.
 * The wire formats are in verbs_internal.h, the rules under "Flow control"
 * there.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <weft/error.h>

#include "transports/verbs/verbs_internal.h"

/* ---- the hello ---- */

void weft__verbs_hello_fill(verbs_hello *h) {
  *h = (verbs_hello){.magic = htons(VERBS_HELLO_MAGIC),
                     .version = VERBS_HELLO_VERSION,
                     .credits = htons(VERBS_CREDITS),
                     .recv_size = htonl(VERBS_SLOT_SIZE)};
}

/* Formats the reason into `why` and returns WEFT_EPROTO. */
__attribute__((format(printf, 3, 4))) static int
violation(char *why, size_t why_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
  return WEFT_EPROTO;
}

int weft__verbs_hello_parse(const void *data, size_t len, verbs_peer *out,
                            char *why, size_t why_len) {
  verbs_hello h;
  if (data == NULL || len < sizeof h)
    return violation(why, why_len,
                     "verbs: the peer's hello has %zu bytes, weft's has %zu "
                     "(not a weft peer)",
                     data == NULL ? (size_t)0 : len, sizeof h);
  memcpy(&h, data, sizeof h);
  if (ntohs(h.magic) != VERBS_HELLO_MAGIC)
    return violation(why, why_len,
                     "verbs: the peer's hello has magic 0x%04x, not weft's "
                     "0x%04x",
                     ntohs(h.magic), VERBS_HELLO_MAGIC);
  if (h.version != VERBS_HELLO_VERSION)
    return violation(why, why_len,
                     "verbs: the peer speaks version %u, this side %u",
                     h.version, VERBS_HELLO_VERSION);
  uint16_t credits = ntohs(h.credits);
  if (credits == 0 || credits > VERBS_CREDITS)
    return violation(why, why_len,
                     "verbs: the peer grants %u credits, not 1 .. %u", credits,
                     VERBS_CREDITS);
  uint32_t recv_size = ntohl(h.recv_size);
  if (recv_size == 0 || recv_size > VERBS_MAX_RECV_SIZE)
    return violation(why, why_len,
                     "verbs: the peer's receive size %" PRIu32
                     " is not 1 .. %u bytes",
                     recv_size, VERBS_MAX_RECV_SIZE);
  *out = (verbs_peer){.credits = credits, .recv_size = recv_size};
  return 0;
}

/* ---- the peer's messages ---- */

/* The form of a message, before any credit is looked at. */
static int rx_form(const verbs_flow *f, const verbs_rx *m, char *why,
                   size_t why_len) {
  if (m->rdma_write)
    return violation(why, why_len,
                     "verbs: peer sent an RDMA write; weft peers only send");
  if (!m->with_imm)
    return violation(why, why_len,
                     "verbs: peer sent a message without imm_data");
  uint32_t unknown = m->imm & VERBS_IMM_FLAGS & ~VERBS_IMM_FIN;
  if (unknown != 0)
    return violation(
        why, why_len,
        "verbs: peer set unknown flags 0x%08" PRIx32 " in imm_data", unknown);
  if (f->fin)
    return violation(why, why_len, "verbs: peer sent a message after its FIN");
  if (m->len > VERBS_SLOT_SIZE)
    return violation(why, why_len,
                     "verbs: peer sent %" PRIu32
                     " bytes, more than the %u a message may hold",
                     m->len, VERBS_SLOT_SIZE);
  return 0;
}

/* The credits the message spends and returns. */
static int rx_credits(const verbs_flow *f, const verbs_rx *m, char *why,
                      size_t why_len) {
  uint32_t returned = m->imm & VERBS_IMM_CREDITS;
  if (m->len > 0 && f->granted == 0)
    return violation(why, why_len,
                     "verbs: peer sent a message beyond the %u credits "
                     "granted (it ignores credits)",
                     VERBS_CREDITS);
  /* Our data messages whose credits the peer still holds. */
  uint32_t unreturned = f->credits >= 0 && (uint32_t)f->credits <= f->window
                            ? f->window - (uint32_t)f->credits
                            : 0;
  if (returned > unreturned)
    return violation(why, why_len,
                     "verbs: peer returned %" PRIu32
                     " credits, but only %" PRIu32 " of the %" PRIu32
                     " it granted are in use",
                     returned, unreturned, f->window);
  /* A credit message rides on the reserve, not on a credit; returning at
   * least a threshold's worth bounds how many a peer can send. */
  if (m->len == 0 && !(m->imm & VERBS_IMM_FIN) &&
      returned < VERBS_CREDIT_THRESHOLD)
    return violation(why, why_len,
                     "verbs: peer sent a credit message returning %" PRIu32
                     " credits; one returns at least %u",
                     returned, VERBS_CREDIT_THRESHOLD);
  return 0;
}

int weft__verbs_rx_check(verbs_flow *f, const verbs_rx *m, char *why,
                         size_t why_len) {
  int err = rx_form(f, m, why, why_len);
  if (err == 0)
    err = rx_credits(f, m, why, why_len);
  if (err < 0)
    return err;
  if (m->len > 0)
    f->granted--;
  f->credits += (int32_t)(m->imm & VERBS_IMM_CREDITS);
  if (m->imm & VERBS_IMM_FIN)
    f->fin = true;
  return 0;
}

/* ---- credits going back ---- */

uint32_t weft__verbs_returnable(const verbs_flow *f, uint32_t in_use) {
  uint32_t used = f->granted + in_use;
  return used < VERBS_CREDITS ? VERBS_CREDITS - used : 0;
}
