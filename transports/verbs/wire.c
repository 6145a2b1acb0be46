/* transports/verbs/wire.c: what the peer controls, checked before use:
 * the hello of the handshake (credits and receive size). Pure functions
 * of bytes, no device: connect.c calls them. The wire format is in
 * verbs_internal.h.
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
