/* SPDX-License-Identifier: Apache-2.0 */
/* Frame codecs on the embedded channel: the length-field decoder with
 * Netty's parameters, the prepender, the line decoder and varints; every
 * input whole, one byte at a time and in random splits. */
#include "harness.h"

#include "codec_util.h"

#define MAX_BYTES (64 * 1024)

/* ---- helpers ---- */

static weft_length_field_options lf_opts;
static weft_line_options line_opts;
static int caught[8];
static size_t n_caught;

/* Records exceptions and stops them, so the channel stays open (lets a test
 * see the decoder go on after an oversized frame). */
static void catch_exception(weft_ctx *ctx, int err, const char *reason) {
  (void)ctx, (void)reason;
  if (n_caught < 8)
    caught[n_caught++] = err;
}
static const weft_handler catcher = {.name = "catcher",
                                     .exception_caught = catch_exception};

static void init_lf(weft_channel *ch, void *arg) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_length_field_decoder_add_last(p, "frame", &lf_opts), 0);
  if (arg != NULL)
    ck_assert_int_eq(weft_pipeline_add_last(p, "catch", &catcher, NULL), 0);
}

static void init_prepender(weft_channel *ch, void *arg) {
  ck_assert_int_eq(
      weft_length_prepender_add_last(weft_channel_pipeline(ch), "prepend", arg),
      0);
}

static void init_line(weft_channel *ch, void *arg) {
  ck_assert_int_eq(
      weft_line_decoder_add_last(weft_channel_pipeline(ch), "line", &line_opts),
      0);
}

static void setup(void) {
  weft_length_field_options_init(&lf_opts);
  weft_line_options_init(&line_opts);
  n_caught = 0;
}

/* Frame i has i * 37 % 1500 bytes: empty, copied and gathered frames. */
static size_t frame_len(int i) { return (size_t)(i * 37 % 1500); }
static uint8_t frame_byte(int i, size_t j) { return (uint8_t)(i * 7 + j); }

static void *make_frame(weft_pool *pool, int i) {
  weft_buf *b = weft_buf_alloc(pool, frame_len(i) + 1);
  for (size_t j = 0; j < frame_len(i); j++)
    weft_buf_write_u8(b, frame_byte(i, j));
  return b;
}

static void check_frame(void *msg, int i) {
  weft_buf *f = msg;
  ck_assert_uint_eq(weft_buf_readable(f), frame_len(i));
  for (size_t j = 0; j < frame_len(i); j++)
    ck_assert_uint_eq(weft_buf_rptr(f)[j], frame_byte(i, j));
}

/* Encodes `n` frames with the prepender; returns the wire bytes. */
static size_t encode_frames(uint8_t *wire, int n) {
  return encode_all(init_prepender, make_frame, n, wire, MAX_BYTES);
}

/* ---- length field ---- */

START_TEST(frame_length_field_round_trips_any_split) {
  static uint8_t wire[MAX_BYTES];
  const int n = 40;
  size_t len = encode_frames(wire, n);
  lf_opts.initial_bytes_to_strip = 4; /* Netty's default keeps the header */
  decode_all_at_any_split(init_lf, wire, len, n, 1234u, check_frame);
}
END_TEST

START_TEST(frame_length_field_slices_without_copy_when_contiguous) {
  static uint8_t wire[MAX_BYTES];
  size_t len = encode_frames(wire, 10);
  weft_embedded *e = embedded_of(init_lf);
  weft_pool_stats before, after;
  weft_pool_stats_get(weft_embedded_pool(e), &before);
  feed(e, wire, len, FEED_WHOLE, 0);
  weft_pool_stats_get(weft_embedded_pool(e), &after);
  /* The one buffer feed() allocated, and no cumulation buffer. */
  ck_assert_uint_eq(after.allocs - before.allocs, 1);
  void *m;
  while ((m = weft_embedded_read_inbound(e)) != NULL)
    weft_msg_release(m);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* Netty's javadoc example: offset 1, 2-byte length, adjustment 1, strip 3:
 * HDR1 | LEN 0x000C | HDR2 | "HELLO, WORLD" -> HDR2 | "HELLO, WORLD". */
START_TEST(frame_length_field_netty_parameters_offset_adjust_strip) {
  lf_opts.length_field_offset = 1;
  lf_opts.length_field_length = 2;
  lf_opts.length_adjustment = 1;
  lf_opts.initial_bytes_to_strip = 3;
  const uint8_t wire[] = "\xCA\x00\x0C\xFEHELLO, WORLD";
  /* Seed 5: the random splits of seed 7 (FEED_RANDOM is mode 2). */
  expect_frames_at_any_split(init_lf, wire, sizeof wire - 1, 5, 1,
                             "\xFEHELLO, WORLD", 13);
}
END_TEST

START_TEST(frame_length_field_eight_byte_little_endian) {
  lf_opts.length_field_length = 8;
  lf_opts.little_endian = true;
  lf_opts.initial_bytes_to_strip = 8;
  const uint8_t wire[] = "\x03\0\0\0\0\0\0\0abc\x01\0\0\0\0\0\0\0z";
  weft_embedded *e = embedded_of(init_lf);
  feed(e, wire, sizeof wire - 1, FEED_BYTES, 0);
  expect_frames_free(e, 2, "abcz", 4);
}
END_TEST

START_TEST(frame_length_field_oversized_fails_fast_before_allocating) {
  lf_opts.max_frame_length = 1024;
  /* Announces 1 GiB; only the header and a few bytes arrive. */
  const uint8_t wire[] = "\x40\x00\x00\x00xyz";
  weft_embedded *e = embedded_of(init_lf);
  weft_pool_stats before, after;
  weft_pool_stats_get(weft_embedded_pool(e), &before);
  th_log_capture_start();
  feed(e, wire, sizeof wire - 1, _i, 3);
  th_log_capture_stop();
  weft_pool_stats_get(weft_embedded_pool(e), &after);
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_ETOOLONG);
  ck_assert_int_eq(weft_channel_is_active(weft_embedded_channel(e)), 0);
  ck_assert_uint_eq(after.unpooled, before.unpooled);
  ck_assert_int_eq(th_log_count("maximum 1024"), 1);
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(frame_length_field_oversized_skipped_then_next_frame_decodes) {
  lf_opts.max_frame_length = 8;
  lf_opts.fail_fast = _i == 1;
  /* A 20-byte frame (too long), then "ok". */
  const uint8_t wire[] = "\0\0\0\x14"
                         "aaaaaaaaaaaaaaaaaaaa"
                         "\0\0\0\x02ok";
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_lf, (void *)1), 0);
  /* The first 10 bytes: fail-fast reports now, the other mode later. */
  feed(e, wire, 10, FEED_BYTES, 0);
  ck_assert_uint_eq(n_caught, lf_opts.fail_fast ? 1 : 0);
  feed(e, wire + 10, sizeof wire - 1 - 10, FEED_RANDOM, 5);
  ck_assert_uint_eq(n_caught, 1);
  ck_assert_int_eq(caught[0], WEFT_ETOOLONG);
  uint8_t out[16];
  size_t len;
  ck_assert_uint_eq(drain_frames(e, out, sizeof out, &len), 1);
  ck_assert_mem_eq(out, "\0\0\0\x02ok", 6);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(frame_length_field_short_length_is_bad_frame) {
  lf_opts.length_adjustment = -8; /* frame length 4 + 2 - 8 < 4 */
  weft_embedded *e = embedded_of(init_lf);
  th_log_capture_start();
  feed(e, "\0\0\0\x02zz", 6, FEED_WHOLE, 0);
  th_log_capture_stop();
  expect_closed_free(e, WEFT_EBADFRAME);
}
END_TEST

START_TEST(frame_partial_frame_at_close_leaks_nothing) {
  weft_embedded *e = embedded_of(init_lf);
  feed(e,
       "\0\0\0\x10"
       "abc",
       7, FEED_BYTES, 0);
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

static int promise_status;
static void record_status(void *arg, int status) {
  (void)arg;
  promise_status = status;
}

START_TEST(frame_prepender_rejects_length_too_big_for_field) {
  weft_length_prepender_options o;
  weft_length_prepender_options_init(&o);
  o.length_field_length = 1;
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_prepender, &o), 0);
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 300);
  b->writer_index = 300;
  promise_status = 1;
  weft_channel_write_and_flush(weft_embedded_channel(e), b,
                               (weft_promise){record_status, NULL});
  ck_assert_int_eq(promise_status, WEFT_EMSGSIZE);
  ck_assert_ptr_null(weft_embedded_read_outbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(frame_prepender_writes_adjusted_length) {
  weft_length_prepender_options o;
  weft_length_prepender_options_init(&o);
  o.length_field_length = 2;
  o.length_includes_length_field = true;
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_prepender, &o), 0);
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 8);
  weft_buf_write_bytes(b, "abc", 3);
  weft_channel_write_and_flush(weft_embedded_channel(e), b, WEFT_PROMISE_NONE);
  uint8_t out[16];
  ck_assert_uint_eq(drain_outbound(e, out, sizeof out), 5);
  ck_assert_mem_eq(out,
                   "\0\x05"
                   "abc",
                   5);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- line ---- */

START_TEST(frame_line_decoder_any_split) {
  const char text[] = "first\r\nsecond\n\nlast line\r\npartial";
  line_opts.strip_delimiter = _i == 0;
  const char *want = line_opts.strip_delimiter
                         ? "firstsecondlast line"
                         : "first\r\nsecond\n\nlast line\r\n";
  /* Seed 9: the random splits of seed 11 (FEED_RANDOM is mode 2). */
  expect_frames_at_any_split(init_line, text, sizeof text - 1, 9, 4, want,
                             strlen(want));
}
END_TEST

START_TEST(frame_line_too_long_closes_channel) {
  line_opts.max_length = 4;
  weft_embedded *e = embedded_of(init_line);
  th_log_capture_start();
  /* "abcd\r" may still end well; the sixth byte cannot. */
  feed(e, "abcd\r", 5, FEED_BYTES, 0);
  ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
  feed(e, "x", 1, FEED_BYTES, 0);
  th_log_capture_stop();
  expect_closed_free(e, WEFT_ETOOLONG);
}
END_TEST

/* ---- varint ---- */

START_TEST(varint_round_trips_edge_values) {
  const uint64_t values[] = {
      0,         1, 127, 128, 300, 16383, 16384, UINT32_MAX, (uint64_t)1 << 63,
      UINT64_MAX};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    uint8_t b[WEFT_VARINT_MAX_BYTES];
    int n = weft_varint_encode(b, sizeof b, values[i]);
    ck_assert_int_eq(n, (int)weft_varint_size(values[i]));
    for (int cut = 0; cut < n; cut++) { /* resumable: short input is 0 */
      uint64_t v;
      ck_assert_int_eq(weft_varint_decode(b, (size_t)cut, &v), 0);
    }
    uint64_t v = 0;
    ck_assert_int_eq(weft_varint_decode(b, (size_t)n, &v), n);
    ck_assert_uint_eq(v, values[i]);
  }
  ck_assert_int_eq(weft_varint_size(UINT64_MAX), 10);
  uint8_t small[1];
  ck_assert_int_eq(weft_varint_encode(small, 1, 300), WEFT_ENOSPC);
  ck_assert_int_eq(weft_zigzag_decode(weft_zigzag_encode(-5)), -5);
  ck_assert_uint_eq(weft_zigzag_encode(-1), 1);
}
END_TEST

START_TEST(varint_rejects_overlong_and_overflow) {
  uint8_t eleven[11];
  memset(eleven, 0x80, sizeof eleven);
  uint64_t v;
  ck_assert_int_eq(weft_varint_decode(eleven, sizeof eleven, &v),
                   WEFT_EBADFRAME);
  /* Ten bytes whose last holds more than bit 63. */
  uint8_t over[10];
  memset(over, 0xff, 9);
  over[9] = 0x02;
  ck_assert_int_eq(weft_varint_decode(over, sizeof over, &v), WEFT_EBADFRAME);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("frame");
  TCase *tc =
      th_add_case(s, "codec", 0, frame_length_field_round_trips_any_split,
                  frame_length_field_slices_without_copy_when_contiguous,
                  frame_length_field_netty_parameters_offset_adjust_strip,
                  frame_length_field_eight_byte_little_endian, NULL);
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_loop_test(tc,
                      frame_length_field_oversized_fails_fast_before_allocating,
                      0, FEED_MODES);
  tcase_add_loop_test(
      tc, frame_length_field_oversized_skipped_then_next_frame_decodes, 0, 2);
  th_add_tests(tc, frame_length_field_short_length_is_bad_frame,
               frame_partial_frame_at_close_leaks_nothing,
               frame_prepender_rejects_length_too_big_for_field,
               frame_prepender_writes_adjusted_length, NULL);
  tcase_add_loop_test(tc, frame_line_decoder_any_split, 0, 2);
  th_add_tests(tc, frame_line_too_long_closes_channel,
               varint_round_trips_edge_values,
               varint_rejects_overlong_and_overflow, NULL);
  return s;
}
