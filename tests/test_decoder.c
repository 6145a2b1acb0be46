/* SPDX-License-Identifier: Apache-2.0 */
/* The public decoder base (weft/decoder.h): a framing codec written the way
 * an application writes one, from the header's own example, decodes the
 * same frames whatever way the bytes are split. */
#include "codec_util.h"
#include "harness.h"

#include <stdlib.h>

#include <weft/weft.h>

/* One-byte-length-prefixed frames, as in weft/decoder.h. */
typedef struct u8_frames {
  weft_decoder base;
} u8_frames;

static int u8_decode(weft_decoder *d, weft_buf *in, void **out) {
  size_t have = weft_buf_readable(in);
  if (have < 1)
    return 0;
  size_t len = weft_buf_rptr(in)[0];
  if (have < 1 + len) {
    d->need = 1 + len;
    return 0;
  }
  in->reader_index += 1;
  *out = weft_buf_read_slice(in, len);
  return *out != NULL ? 1 : weft_decoder_fail(d, WEFT_ENOMEM, "u8: slice");
}

static void u8_free(weft_decoder *d) { free(d); }

static const weft_handler u8_handler = {
    .name = "u8-frames",
    .channel_read = weft_decoder_channel_read,
    .handler_removed = weft_decoder_handler_removed,
    .user_event = weft_decoder_user_event};

static void init_u8(weft_channel *ch, void *arg) {
  u8_frames *s = malloc(sizeof *s);
  ck_assert_ptr_nonnull(s);
  weft_decoder_init(&s->base, u8_decode, u8_free);
  ck_assert_int_eq(weft_decoder_add_last(weft_channel_pipeline(ch), "u8",
                                         &u8_handler, &s->base),
                   0);
}

START_TEST(decoder_user_codec_frames_any_split) {
  enum { FRAMES = 300 };
  static uint8_t wire[FRAMES * 256], want[FRAMES * 256], got[FRAMES * 256];
  size_t wlen = 0, want_len = 0;
  for (int i = 0; i < FRAMES; i++) {
    size_t len = (size_t)(i * 37 % 256);
    wire[wlen++] = (uint8_t)len;
    for (size_t j = 0; j < len; j++)
      want[want_len++] = wire[wlen++] = (uint8_t)(i + j);
  }
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e;
    ck_assert_int_eq(weft_embedded_new(&e, init_u8, NULL), 0);
    feed(e, wire, wlen, mode, 7u + (unsigned)mode);
    size_t got_len;
    size_t frames = drain_frames(e, got, sizeof got, &got_len);
    ck_assert_uint_eq(frames, FRAMES); /* empty frames too */
    ck_assert_uint_eq(got_len, want_len);
    ck_assert_int_eq(memcmp(got, want, want_len), 0);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("decoder", "core", 0, decoder_user_codec_frames_any_split,
                  NULL);
}
