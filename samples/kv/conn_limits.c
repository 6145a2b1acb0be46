/* SPDX-License-Identifier: Apache-2.0 */
/* What a KV connection may make the server hold (conn_limits.h): the
 * limits before AUTH, and the bounds on partial commands, which the
 * decoders report through weft_decoder_watch. */
#include "server_internal.h"

#define COMMAND_SLACK                                                          \
  (128 * 1024) /* bytes of a command beyond its largest value: the key and     \
                  the other arguments (SET k v EX ...) */

size_t kv_client_query_default(size_t max_value_bytes) {
  return 2 * (max_value_bytes + COMMAND_SLACK);
}

void kv_conn_limits_init(kv_conn_limits *l, size_t max_value_bytes,
                         uint64_t auth_timeout_ms, uint64_t command_timeout_ms,
                         size_t client_query_max, size_t query_max,
                         int64_t output_limit) {
  *l = (kv_conn_limits){.auth_timeout_ns = auth_timeout_ms * 1000000u,
                        .command_timeout_ns = command_timeout_ms * 1000000u,
                        .client_query_max =
                            client_query_max != 0
                                ? client_query_max
                                : kv_client_query_default(max_value_bytes),
                        .query_max = query_max,
                        .output_limit = output_limit,
                        .auth_timeout_log = WEFT_LOG_LIMIT_INIT(1000000000u)};
  weft_resp_options_init(&l->resp);
  l->resp.max_args = KV_RESP_MAX_ARGS;
  /* A SET of the largest value must fit, with room for the key; and a
   * command may take half the query buffer limit (a cumulation growing
   * by doubling may hold twice it), which bounds what a command of many
   * arguments holds: each takes at least 6 bytes ("$0\r\n\r\n"). */
  l->resp.max_bulk = max_value_bytes;
  l->resp.max_command = max_value_bytes + COMMAND_SLACK;
  if (l->client_query_max / 2 > l->resp.max_command)
    l->resp.max_command = l->client_query_max / 2;
  /* Before AUTH, Redis' limits; the whole command and an inline line are
   * bounded by them too, so nothing larger is ever buffered. */
  l->resp_unauth = l->resp;
  l->resp_unauth.unauthenticated = true;
  l->resp_unauth.max_args = KV_UNAUTH_MAX_ARGS;
  l->resp_unauth.max_bulk = KV_UNAUTH_MAX_BULK;
  l->resp_unauth.max_command = KV_UNAUTH_MAX_ARGS * (KV_UNAUTH_MAX_BULK + 32);
  l->resp_unauth.max_inline = KV_UNAUTH_MAX_BULK;
  weft_rpc_codec_options_init(&l->rpc);
  l->rpc.max_payload = max_value_bytes + COMMAND_SLACK;
  l->rpc_unauth = l->rpc;
  l->rpc_unauth.max_payload = KV_UNAUTH_MAX_ARGS * (KV_UNAUTH_MAX_BULK + 32);
}

/* The watch of a decoder's cumulation: every change goes into the
 * server's total, and growth past either bound fails the decoder, which
 * closes the connection with the reason (the growing one: the others'
 * commands go on). */
static int query_watch(weft_decoder *d, size_t was, size_t held, void *arg) {
  kv_conn_limits *l = arg;
  if (held < was) {
    atomic_fetch_sub(&l->query_bytes, was - held);
    return 0;
  }
  size_t total = atomic_fetch_add(&l->query_bytes, held - was) + (held - was);
  if (held > l->client_query_max) {
    atomic_fetch_add(&l->query_closed, 1);
    return weft_decoder_fail(d, WEFT_ENOBUFS,
                             "query buffer of %zu bytes over [kv] "
                             "client_query_buffer_limit (%zu bytes)",
                             held, l->client_query_max);
  }
  if (l->query_max != 0 && total > l->query_max) {
    atomic_fetch_add(&l->query_closed, 1);
    return weft_decoder_fail(d, WEFT_ENOBUFS,
                             "partial commands of all connections would hold "
                             "%zu bytes, over [kv] query_buffers_max (%zu "
                             "bytes): this connection's grew last",
                             total, l->query_max);
  }
  return 0;
}

int kv_conn_limits_watch(kv_conn_limits *l, weft_channel *ch,
                         const char *decoder) {
  weft_decoder *d = weft_decoder_of(weft_channel_pipeline(ch), decoder);
  if (d == NULL)
    return WEFT_ENOENT;
  weft_decoder_watch(d, query_watch, l);
  d->frame_timeout_ns = l->command_timeout_ns;
  return 0;
}

void kv_conn_limits_unauthenticated(const kv_conn_limits *l, weft_channel *ch) {
  if (l->output_limit == 0 || l->output_limit > KV_UNAUTH_OUTPUT_LIMIT)
    weft_channel_set_option(ch, WEFT_OPT_OUTPUT_LIMIT, KV_UNAUTH_OUTPUT_LIMIT);
}

void kv_conn_limits_authenticated(const kv_conn_limits *l, weft_channel *ch,
                                  bool rpc) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (rpc)
    weft_rpc_codec_set_options(p, "rpc", &l->rpc);
  else
    weft_resp_decoder_set_options(p, "resp", &l->resp);
  if (l->output_limit >= 0)
    weft_channel_set_option(ch, WEFT_OPT_OUTPUT_LIMIT, l->output_limit);
}
