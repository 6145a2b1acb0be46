/* SPDX-License-Identifier: Apache-2.0 */
/* The RPC message codec (layout in docs/protocol.md). */
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/rpc.h>

#include <weft/decoder.h>

#include "codec/codec_internal.h"

/* Header field offsets. */
#define OFF_VERSION 0
#define OFF_TYPE 1
#define OFF_METHOD 2
#define OFF_STATUS 4
#define OFF_REQUEST_ID 8
#define OFF_LENGTH 16

static void rpc_msg_release(void *msg) { weft_rpc_msg_release(msg); }

const weft_msg_type weft_rpc_msg_type = {.name = "weft_rpc_msg",
                                         .release = rpc_msg_release};

weft_rpc_msg *weft_rpc_msg_new(weft_rpc_type type, uint16_t method,
                               uint64_t request_id, int32_t status,
                               weft_buf *payload) {
  weft_rpc_msg *m = malloc(sizeof *m);
  if (m == NULL) {
    weft_buf_release(payload);
    return NULL;
  }
  *m = (weft_rpc_msg){.msg = {&weft_rpc_msg_type},
                      .type = (uint8_t)type,
                      .method = method,
                      .status = status,
                      .request_id = request_id,
                      .payload = payload};
  return m;
}

void weft_rpc_msg_release(weft_rpc_msg *m) {
  if (m == NULL)
    return;
  weft_buf_release(m->payload);
  free(m);
}

static bool type_ok(unsigned type) {
  return type >= WEFT_RPC_REQUEST && type <= WEFT_RPC_ERROR;
}

/* Writes the header of `m` with a payload of `len` bytes at `b`'s writer
 * index (the caller made room). */
static void put_header(weft_buf *b, const weft_rpc_msg *m, size_t len) {
  size_t at = b->writer_index;
  weft_buf_set_u8(b, at + OFF_VERSION, WEFT_RPC_VERSION);
  weft_buf_set_u8(b, at + OFF_TYPE, m->type);
  weft_buf_set_u16be(b, at + OFF_METHOD, m->method);
  weft_buf_set_u32be(b, at + OFF_STATUS, (uint32_t)m->status);
  weft_buf_set_u64be(b, at + OFF_REQUEST_ID, m->request_id);
  weft_buf_set_u32be(b, at + OFF_LENGTH, (uint32_t)len);
  b->writer_index += WEFT_RPC_HEADER_BYTES;
}

/* Allocates a buffer holding the header and, when `with_payload`, the
 * payload of `m`. */
static int encode_into(weft_pool *pool, const weft_rpc_msg *m,
                       bool with_payload, weft_buf **out) {
  size_t len = weft_rpc_payload_len(m);
  if (len > UINT32_MAX)
    return WEFT_EMSGSIZE;
  if (!type_ok(m->type))
    return WEFT_EINVAL;
  weft_buf *b =
      weft_buf_alloc(pool, WEFT_RPC_HEADER_BYTES + (with_payload ? len : 0));
  if (b == NULL)
    return WEFT_ENOMEM;
  put_header(b, m, len);
  if (with_payload && len > 0)
    weft_buf_write_bytes(b, weft_buf_rptr(m->payload), len);
  *out = b;
  return 0;
}

int weft_rpc_encode(weft_pool *pool, const weft_rpc_msg *m, weft_buf **out) {
  return encode_into(pool, m, true, out);
}

int weft_rpc_decode(weft_buf *in, size_t max_payload, weft_rpc_msg **out,
                    size_t *need, const char **reason) {
  if (need != NULL)
    *need = 0;
  size_t readable = weft_buf_readable(in);
  if (readable < WEFT_RPC_HEADER_BYTES)
    return 0;
  size_t at = in->reader_index;
  uint8_t version = weft_buf_get_u8(in, at + OFF_VERSION);
  uint8_t type = weft_buf_get_u8(in, at + OFF_TYPE);
  uint32_t len = weft_buf_get_u32be(in, at + OFF_LENGTH);
  if (version != WEFT_RPC_VERSION) {
    *reason = "rpc decoder: unknown protocol version";
    return WEFT_EBADFRAME;
  }
  if (!type_ok(type)) {
    *reason = "rpc decoder: unknown message type";
    return WEFT_EBADFRAME;
  }
  if (len > max_payload) {
    *reason = "rpc decoder: payload longer than the maximum";
    return WEFT_ETOOLONG;
  }
  if (readable < WEFT_RPC_HEADER_BYTES + (size_t)len) {
    if (need != NULL)
      *need = WEFT_RPC_HEADER_BYTES + (size_t)len;
    return 0;
  }
  weft_buf *payload = NULL;
  if (len > 0) {
    payload = weft_buf_slice(in, at + WEFT_RPC_HEADER_BYTES, len);
    if (payload == NULL)
      goto failed_nomem;
  }
  weft_rpc_msg *m = weft_rpc_msg_new(
      type, weft_buf_get_u16be(in, at + OFF_METHOD),
      weft_buf_get_u64be(in, at + OFF_REQUEST_ID),
      (int32_t)weft_buf_get_u32be(in, at + OFF_STATUS), payload);
  if (m == NULL)
    goto failed_nomem;
  in->reader_index += WEFT_RPC_HEADER_BYTES + (size_t)len;
  *out = m;
  return 1;
failed_nomem:
  *reason = "rpc decoder: out of memory";
  return WEFT_ENOMEM;
}

/* ---- the codec handler ---- */

typedef struct rpc_codec {
  weft_decoder base;
  weft_rpc_codec_options o;
} rpc_codec;

void weft_rpc_codec_options_init(weft_rpc_codec_options *o) {
  *o = (weft_rpc_codec_options){.max_payload = WEFT_RPC_MAX_PAYLOAD_DEFAULT,
                                .copy_threshold = 1024};
}

static int codec_decode(weft_decoder *d, weft_buf *in, void **out) {
  rpc_codec *s = (rpc_codec *)d;
  weft_rpc_msg *m = NULL;
  int rc = weft_rpc_decode(in, s->o.max_payload, &m, &d->need, &d->reason);
  if (rc == WEFT_ETOOLONG)
    return weft_decoder_fail(
        d, rc, "rpc decoder: payload of %u bytes, maximum %zu",
        weft_buf_get_u32be(in, in->reader_index + OFF_LENGTH),
        s->o.max_payload);
  *out = m;
  return rc;
}

/* Small payloads are copied behind the header; large ones follow it as a
 * buffer of their own (a gathered write, no copy). */
static void codec_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  rpc_codec *s = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_rpc_msg_type)) {
    weft_ctx_write(ctx, msg, promise);
    return;
  }
  weft_rpc_msg *m = msg;
  bool copy = weft_rpc_payload_len(m) <= s->o.copy_threshold;
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  weft_buf *hdr = NULL;
  int rc = encode_into(pool, m, copy, &hdr);
  if (rc < 0) {
    weft_rpc_msg_release(m);
    weft_promise_complete(promise, rc);
    return;
  }
  if (copy || m->payload == NULL) {
    weft_rpc_msg_release(m);
    weft_ctx_write(ctx, hdr, promise);
    return;
  }
  weft_buf *payload = m->payload;
  m->payload = NULL;
  weft_rpc_msg_release(m);
  weft_ctx_write(ctx, hdr, WEFT_PROMISE_NONE);
  weft_ctx_write(ctx, payload, promise);
}

static void codec_free(weft_decoder *d) { free(d); }

static const weft_handler codec_handler = {
    .name = "rpc_codec", .write = codec_write, WEFT__DECODER_OPS};

int weft_rpc_codec_add_last(weft_pipeline *p, const char *name,
                            const weft_rpc_codec_options *opts) {
  rpc_codec *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  weft_decoder_init(&s->base, codec_decode, codec_free);
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_rpc_codec_options_init);
  return weft_decoder_add_last(p, name, &codec_handler, &s->base);
}

int weft_rpc_codec_set_options(weft_pipeline *p, const char *name,
                               const weft_rpc_codec_options *opts) {
  weft_ctx *ctx = weft_pipeline_context(p, name);
  if (ctx == NULL || weft_ctx_handler(ctx) != &codec_handler)
    return WEFT_ENOENT;
  ((rpc_codec *)weft_ctx_state(ctx))->o = *opts;
  return 0;
}
