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
  static uint8_t wire[FRAMES * 256], want[FRAMES * 256];
  size_t wlen = 0, want_len = 0;
  for (int i = 0; i < FRAMES; i++) {
    size_t len = (size_t)(i * 37 % 256);
    wire[wlen++] = (uint8_t)len;
    for (size_t j = 0; j < len; j++)
      want[want_len++] = wire[wlen++] = (uint8_t)(i + j);
  }
  /* Empty frames too. */
  expect_frames_at_any_split(init_u8, wire, wlen, 7u, FRAMES, want, want_len);
}
END_TEST

/* What the watcher heard: the last figure, and a refusal above `limit`. */
static struct { size_t held, calls, limit; } seen;

static int watch_cb(weft_decoder *d, size_t was, size_t held, void *arg) {
  ck_assert_ptr_eq(arg, &seen);
  ck_assert_uint_eq(was, seen.held);
  seen.held = held;
  seen.calls++;
  if (seen.limit != 0 && held > seen.limit)
    return weft_decoder_fail(d, WEFT_ENOBUFS, "held %zu", held);
  return 0;
}

static void init_watched(weft_channel *ch, void *arg) {
  init_u8(ch, arg);
  weft_decoder *d = weft_decoder_of(weft_channel_pipeline(ch), "u8");
  ck_assert_ptr_nonnull(d);
  ck_assert_ptr_null(weft_decoder_of(weft_channel_pipeline(ch), "nope"));
  weft_decoder_watch(d, watch_cb, &seen);
  d->frame_timeout_ns = 30 * 1000000u;
}

/* The watcher hears the cumulation grow (to the announced frame) and go
 * back to 0 when the frame completes; a refusal fails the decoder with
 * its reason and the watcher hears 0. */
START_TEST(decoder_watch_reports_and_refuses) {
  memset(&seen, 0, sizeof seen);
  weft_embedded *e = embedded_of(init_watched);
  weft_embedded_write_inbound_bytes(e,
                                    "\xc8"
                                    "ab",
                                    3); /* 200 announced */
  ck_assert_uint_ge(seen.held, 201);
  static uint8_t rest[198];
  weft_embedded_write_inbound_bytes(e, rest, sizeof rest);
  ck_assert_uint_eq(seen.held, 0);
  weft_msg_release(weft_embedded_read_inbound(e));
  seen.limit = 100;
  th_log_capture_start();
  weft_embedded_write_inbound_bytes(e,
                                    "\xc8"
                                    "ab",
                                    3);
  th_log_capture_stop();
  ck_assert_uint_eq(seen.held, 0);
  expect_failed_free(e, WEFT_ENOBUFS, "held ");
}
END_TEST

/* A frame still incomplete after frame_timeout_ns fails the decoder with
 * WEFT_ETIMEDOUT, however it trickles. */
START_TEST(decoder_frame_timeout_despite_trickle) {
  memset(&seen, 0, sizeof seen);
  weft_embedded *e = embedded_of(init_watched);
  th_log_capture_start();
  weft_embedded_write_inbound_bytes(e, "\xc8", 1);
  uint64_t start = th_now_ms();
  while (weft_embedded_exception(e, 0) == 0 && th_now_ms() - start < 10000) {
    weft_embedded_write_inbound_bytes(e, "x", 1); /* a byte each 5 ms */
    th_sleep_ms(5);
    weft_embedded_run_pending(e);
  }
  th_log_capture_stop();
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_ETIMEDOUT);
  ck_assert_uint_ge(th_now_ms() - start, 25);
  ck_assert_int_eq(th_log_count("(timeout 30 ms)"), 1);
  ck_assert_uint_eq(seen.held, 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* After the decoder: pauses reading at the first frame, as a server does
 * that yields once its work budget per turn is spent
 * (weft_channel_yield_read); it counts the frames it got. */
static int pauser_frames;

static void pauser_read(weft_ctx *ctx, void *msg) {
  if (pauser_frames++ == 0)
    weft_channel_set_option(weft_ctx_channel(ctx), WEFT_OPT_AUTO_READ, 0);
  weft_msg_release(msg);
}

static const weft_handler pauser_handler = {.name = "pauser",
                                            .channel_read = pauser_read};

static void init_paused(weft_channel *ch, void *arg) {
  init_watched(ch, arg);
  th_add_last(ch, "pauser", &pauser_handler, NULL);
}

/* Whole frames that wait because the channel paused reading are not an
 * incomplete frame: the frame timeout does not fire while this side
 * holds them back, however long (issue 27: a yielded RESP connection
 * with a pipeline of KEYS behind it was closed as a trickler after 30
 * s). Once reading resumes and decode reaches the incomplete frame at
 * the end, its timeout runs from there. */
START_TEST(decoder_frame_timeout_waits_for_a_paused_read) {
  memset(&seen, 0, sizeof seen);
  pauser_frames = 0;
  weft_embedded *e = embedded_of(init_paused);
  th_log_capture_start();
  /* Two frames, then the start of a third: the first pauses reading. */
  weft_embedded_write_inbound_bytes(e,
                                    "\x01"
                                    "a"
                                    "\x01"
                                    "b"
                                    "\x05"
                                    "xy",
                                    7);
  ck_assert_int_eq(pauser_frames, 1);
  uint64_t start = th_now_ms();
  while (th_now_ms() - start < 150) { /* five times the timeout */
    th_sleep_ms(5);
    weft_embedded_run_pending(e);
  }
  ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
  ck_assert_int_eq(th_log_count("incomplete frame"), 0);
  /* Reading resumes: the second frame, then the third's timeout. */
  weft_channel_set_option(weft_embedded_channel(e), WEFT_OPT_AUTO_READ, 1);
  weft_embedded_run_pending(e);
  ck_assert_int_eq(pauser_frames, 2);
  start = th_now_ms();
  while (weft_embedded_exception(e, 0) == 0 && th_now_ms() - start < 10000) {
    th_sleep_ms(5);
    weft_embedded_run_pending(e);
  }
  th_log_capture_stop();
  expect_failed_free(e, WEFT_ETIMEDOUT, "(timeout 30 ms)");
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("decoder", "core", 0, decoder_user_codec_frames_any_split,
                  decoder_watch_reports_and_refuses,
                  decoder_frame_timeout_despite_trickle,
                  decoder_frame_timeout_waits_for_a_paused_read, NULL);
}
