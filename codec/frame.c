/* SPDX-License-Identifier: Apache-2.0 */
/* Length-field frame decoder and prepender (Netty's
 * LengthFieldBasedFrameDecoder and LengthFieldPrepender). */
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/frame.h>
#include <weft/loop.h>

#include <weft/decoder.h>

#include "codec/codec_internal.h"

/* Frames up to this many bytes are copied with their length field into one
 * buffer: a small copy is cheaper than a second buffer and iovec. */
#define PREPEND_COPY_MAX 512

void weft_length_field_options_init(weft_length_field_options *o) {
  *o = (weft_length_field_options){.max_frame_length = 1024 * 1024,
                                   .length_field_length = 4,
                                   .fail_fast = true};
}

static bool field_length_ok(int n) {
  return n == 1 || n == 2 || n == 4 || n == 8;
}

static uint64_t get_field(const uint8_t *p, int n, bool little_endian) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) {
    int shift = 8 * (little_endian ? i : n - 1 - i);
    v |= (uint64_t)p[i] << shift;
  }
  return v;
}

static void put_field(uint8_t *p, int n, bool little_endian, uint64_t v) {
  for (int i = 0; i < n; i++) {
    int shift = 8 * (little_endian ? i : n - 1 - i);
    p[i] = (uint8_t)(v >> shift);
  }
}

/* ---- decoder ---- */

typedef struct lf_decoder {
  weft_decoder base;
  weft_length_field_options o;
  size_t end_offset; /* offset + length of the field */
  uint64_t discard;  /* bytes of an oversized frame still to skip */
  __int128 too_long; /* its length, for the late (non fail-fast) error */
} lf_decoder;

static int too_long(lf_decoder *s, __int128 len) {
  s->base.resync = true; /* the frame's bytes are skipped, then go on */
  return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                           "length-field decoder: frame of %lld bytes, "
                           "maximum %zu",
                           (long long)(len > INT64_MAX ? INT64_MAX : len),
                           s->o.max_frame_length);
}

/* Skips bytes of an oversized frame; reports it at the end if not yet. */
static int skip_discarded(lf_decoder *s, weft_buf *in) {
  size_t n = weft_buf_readable(in);
  if (n > s->discard)
    n = (size_t)s->discard;
  in->reader_index += n;
  s->discard -= n;
  if (s->discard == 0 && !s->o.fail_fast)
    return too_long(s, s->too_long);
  return 1;
}

static int start_discarding(lf_decoder *s, weft_buf *in, __int128 len) {
  s->discard = len > UINT64_MAX ? UINT64_MAX : (uint64_t)len;
  s->too_long = len;
  if (s->o.fail_fast) {
    skip_discarded(s, in);
    return too_long(s, len);
  }
  return skip_discarded(s, in);
}

static int lf_decode(weft_decoder *d, weft_buf *in, void **out) {
  lf_decoder *s = (lf_decoder *)d;
  if (s->discard > 0)
    return skip_discarded(s, in);
  size_t readable = weft_buf_readable(in);
  if (readable < s->end_offset) {
    d->need = s->end_offset;
    return 0;
  }
  uint64_t value = get_field(weft_buf_rptr(in) + s->o.length_field_offset,
                             s->o.length_field_length, s->o.little_endian);
  __int128 len = (__int128)s->end_offset + value + s->o.length_adjustment;
  if (len < (__int128)s->end_offset)
    return weft_decoder_fail(d, WEFT_EBADFRAME,
                             "length-field decoder: field value %llu gives "
                             "frame length %lld, less than the field's end "
                             "%zu",
                             (unsigned long long)value, (long long)len,
                             s->end_offset);
  if (len > (__int128)s->o.max_frame_length)
    return start_discarding(s, in, len);
  size_t frame_len = (size_t)len;
  if (s->o.initial_bytes_to_strip > frame_len)
    return weft_decoder_fail(d, WEFT_EBADFRAME,
                             "length-field decoder: frame of %zu bytes is "
                             "shorter than the %zu bytes to strip",
                             frame_len, s->o.initial_bytes_to_strip);
  if (readable < frame_len) {
    d->need = frame_len;
    return 0;
  }
  in->reader_index += s->o.initial_bytes_to_strip;
  weft_buf *frame =
      weft_buf_read_slice(in, frame_len - s->o.initial_bytes_to_strip);
  if (frame == NULL)
    return weft_decoder_fail(d, WEFT_ENOMEM, "length-field decoder: slice");
  *out = frame;
  return 1;
}

static void lf_free(weft_decoder *d) { free(d); }

static const weft_handler lf_handler = {.name = "length_field_decoder",
                                        WEFT__DECODER_OPS};

int weft_length_field_decoder_add_last(weft_pipeline *p, const char *name,
                                       const weft_length_field_options *opts) {
  weft_length_field_options o;
  WEFT__OPTIONS_OR_DEFAULTS(&o, opts, weft_length_field_options_init);
  if (!field_length_ok(o.length_field_length) || o.max_frame_length == 0 ||
      o.length_field_offset > SIZE_MAX / 2)
    return WEFT_EINVAL;
  lf_decoder *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  weft_decoder_init(&s->base, lf_decode, lf_free);
  s->o = o;
  s->end_offset = o.length_field_offset + (size_t)o.length_field_length;
  return weft_decoder_add_last(p, name, &lf_handler, &s->base);
}

/* ---- prepender ---- */

typedef struct prepender {
  weft_length_prepender_options o;
} prepender;

void weft_length_prepender_options_init(weft_length_prepender_options *o) {
  *o = (weft_length_prepender_options){.length_field_length = 4};
}

/* The value to write for a body of `len` bytes, or -1 if it does not fit. */
static int64_t field_value(const weft_length_prepender_options *o, size_t len) {
  __int128 v = (__int128)len + o->length_adjustment;
  if (o->length_includes_length_field)
    v += o->length_field_length;
  __int128 max = o->length_field_length == 8
                     ? (__int128)INT64_MAX
                     : ((__int128)1 << (8 * o->length_field_length)) - 1;
  return v < 0 || v > max ? -1 : (int64_t)v;
}

static void prepend_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  prepender *s = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_buf_msg_type)) {
    weft_ctx_write(ctx, msg, promise);
    return;
  }
  weft_buf *body = msg;
  size_t len = weft_buf_readable(body);
  int64_t value = field_value(&s->o, len);
  if (value < 0) {
    weft_buf_release(body);
    weft_promise_complete(promise, WEFT_EMSGSIZE);
    return;
  }
  int n = s->o.length_field_length;
  bool copy = len <= PREPEND_COPY_MAX;
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  weft_buf *hdr = weft_buf_alloc(pool, (size_t)n + (copy ? len : 0));
  if (hdr == NULL) {
    weft_buf_release(body);
    weft_promise_complete(promise, WEFT_ENOMEM);
    return;
  }
  put_field(weft_buf_wptr(hdr), n, s->o.little_endian, (uint64_t)value);
  hdr->writer_index += (size_t)n;
  if (copy) {
    weft_buf_write_bytes(hdr, weft_buf_rptr(body), len);
    weft_buf_release(body);
    weft_ctx_write(ctx, hdr, promise);
    return;
  }
  weft_ctx_write(ctx, hdr, WEFT_PROMISE_NONE);
  weft_ctx_write(ctx, body, promise);
}

static void prepend_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler prepender_handler = {.name = "length_prepender",
                                               .write = prepend_write,
                                               .handler_removed =
                                                   prepend_removed};

int weft_length_prepender_add_last(weft_pipeline *p, const char *name,
                                   const weft_length_prepender_options *opts) {
  prepender *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_length_prepender_options_init);
  int rc = field_length_ok(s->o.length_field_length) ? 0 : WEFT_EINVAL;
  if (rc == 0)
    rc = weft_pipeline_add_last(p, name, &prepender_handler, s);
  if (rc < 0)
    free(s);
  return rc;
}
