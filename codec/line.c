/* SPDX-License-Identifier: Apache-2.0 */
/* Line-based frame decoder (Netty's LineBasedFrameDecoder). */
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/frame.h>

#include <weft/decoder.h>

#include "codec/codec_internal.h"

typedef struct line_decoder {
  weft_decoder base;
  weft_line_options o;
  size_t scanned; /* bytes after the reader index known to hold no '\n',
                     so a line arriving a byte at a time is scanned once */
} line_decoder;

void weft_line_options_init(weft_line_options *o) {
  *o = (weft_line_options){.max_length = 8192, .strip_delimiter = true};
}

static int line_too_long(weft_decoder *d, size_t len, size_t max) {
  return weft_decoder_fail(d, WEFT_ETOOLONG,
                           "line decoder: line of %zu bytes or more, "
                           "maximum %zu",
                           len, max);
}

static int line_decode(weft_decoder *d, weft_buf *in, void **out) {
  line_decoder *s = (line_decoder *)d;
  size_t readable = weft_buf_readable(in);
  const uint8_t *p = weft_buf_rptr(in);
  const uint8_t *nl = memchr(p + s->scanned, '\n', readable - s->scanned);
  if (nl == NULL) {
    s->scanned = readable;
    /* max_length bytes and a '\r' may wait for their '\n'. */
    if (readable > s->o.max_length + 1)
      return line_too_long(d, readable, s->o.max_length);
    return 0;
  }
  size_t eol = (size_t)(nl - p);
  size_t delim = eol > 0 && p[eol - 1] == '\r' ? 2 : 1;
  size_t line_len = eol + 1 - delim;
  s->scanned = 0;
  if (line_len > s->o.max_length)
    return line_too_long(d, line_len, s->o.max_length);
  weft_buf *frame =
      weft_buf_read_slice(in, s->o.strip_delimiter ? line_len : eol + 1);
  if (frame == NULL)
    return weft_decoder_fail(d, WEFT_ENOMEM, "line decoder: slice");
  if (s->o.strip_delimiter)
    in->reader_index += delim;
  *out = frame;
  return 1;
}

static void line_free(weft_decoder *d) { free(d); }

static const weft_handler line_handler = {.name = "line_decoder",
                                          WEFT__DECODER_OPS};

int weft_line_decoder_add_last(weft_pipeline *p, const char *name,
                               const weft_line_options *opts) {
  line_decoder *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  weft_decoder_init(&s->base, line_decode, line_free);
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_line_options_init);
  if (s->o.max_length == 0 || s->o.max_length > SIZE_MAX / 2) {
    free(s);
    return WEFT_EINVAL;
  }
  return weft_decoder_add_last(p, name, &line_handler, &s->base);
}
