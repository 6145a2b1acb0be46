/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the codec and handler tests: feed bytes into an embedded
 * channel whole, one byte at a time, or in random splits, and collect what
 * reached the tail. */
#ifndef WEFT_TESTS_CODEC_UTIL_H
#define WEFT_TESTS_CODEC_UTIL_H

#include "harness.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <weft/embedded.h>
#include <weft/weft.h>

/** How feed() cuts the bytes. */
enum feed_mode { FEED_WHOLE, FEED_BYTES, FEED_RANDOM, FEED_MODES };

/* xorshift: reproducible splits without touching rand()'s global state. */
static inline unsigned cu_rand(unsigned *seed) {
  unsigned x = *seed;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *seed = x;
}

/** Writes `len` bytes inbound, cut according to `mode` (seeded by `seed`). */
static inline void feed(weft_embedded *e, const void *data, size_t len,
                        int mode, unsigned seed) {
  const uint8_t *p = data;
  size_t off = 0;
  while (off < len) {
    size_t n = len - off;
    if (mode == FEED_BYTES)
      n = 1;
    else if (mode == FEED_RANDOM)
      n = 1 + cu_rand(&seed) % (n < 37 ? n : 37);
    int rc = weft_embedded_write_inbound_bytes(e, p + off, n);
    if (rc == WEFT_ECLOSED)
      return;
    ck_assert_int_eq(rc, 0);
    off += n;
  }
}

/** Appends the readable bytes of every weft_buf that reached the tail to
 * `out` (cap bytes), releasing them; returns how many frames there were. */
static inline size_t drain_frames(weft_embedded *e, uint8_t *out, size_t cap,
                                  size_t *len) {
  size_t frames = 0;
  void *m;
  *len = 0;
  while ((m = weft_embedded_read_inbound(e)) != NULL) {
    ck_assert(weft_msg_is(m, &weft_buf_msg_type));
    weft_buf *b = m;
    ck_assert_uint_le(*len + weft_buf_readable(b), cap);
    memcpy(out + *len, weft_buf_rptr(b), weft_buf_readable(b));
    *len += weft_buf_readable(b);
    weft_buf_release(b);
    frames++;
  }
  return frames;
}

/** Asserts that the first exception `e` raised was `err` and that the log
 *  (th_log_capture) named it with `why` once; then frees `e`, nothing
 *  leaked. */
static inline void expect_failed_free(weft_embedded *e, int err,
                                      const char *why) {
  ck_assert_int_eq(weft_embedded_exception(e, 0), err);
  ck_assert_int_eq(th_log_count(why), 1);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}

/** Asserts that the first exception `e` raised was `err` and that it
 *  closed the channel; then frees `e`, nothing leaked. */
static inline void expect_closed_free(weft_embedded *e, int err) {
  ck_assert_int_eq(weft_embedded_exception(e, 0), err);
  ck_assert_int_eq(weft_channel_is_active(weft_embedded_channel(e)), 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}

/** Drains the tail of `e`: `frames` buffers must have reached it, holding
 *  the `len` bytes of `want` end to end; then frees `e`, nothing leaked. */
static inline void expect_frames_free(weft_embedded *e, size_t frames,
                                      const void *want, size_t len) {
  uint8_t *got = malloc(len + 1);
  ck_assert_ptr_nonnull(got);
  size_t got_len;
  ck_assert_uint_eq(drain_frames(e, got, len + 1, &got_len), frames);
  ck_assert_uint_eq(got_len, len);
  ck_assert_mem_eq(got, want, len);
  free(got);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}

/** Concatenates every flushed outbound buffer into `out`; returns bytes. */
static inline size_t drain_outbound(weft_embedded *e, uint8_t *out,
                                    size_t cap) {
  size_t len = 0;
  void *m;
  while ((m = weft_embedded_read_outbound(e)) != NULL) {
    weft_buf *b = m;
    ck_assert_uint_le(len + weft_buf_readable(b), cap);
    memcpy(out + len, weft_buf_rptr(b), weft_buf_readable(b));
    len += weft_buf_readable(b);
    weft_buf_release(b);
  }
  return len;
}

/** Everything flushed outbound, as a C string in a static buffer (valid
 *  until the next call): for text protocols such as HTTP. */
static inline char *outbound_text(weft_embedded *e) {
  static char out[65536];
  size_t n = drain_outbound(e, (uint8_t *)out, sizeof out - 1);
  out[n] = '\0';
  return out;
}

/** A new embedded channel whose pipeline `init` sets up (its arg NULL). */
static inline weft_embedded *embedded_of(weft_channel_init_cb init) {
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init, NULL), 0);
  return e;
}

/** Asserts that nothing more reached the tail of `e` and that no exception
 *  was raised, then frees it: every buffer must have come back. */
static inline void expect_drained_free(weft_embedded *e) {
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}

/** Feeds `wire` (`wire_len` bytes) to a new channel of `init`'s pipeline in
 *  every feed_mode (random splits seeded by seed + mode): each time,
 *  `frames` buffers must reach the tail, holding the `len` bytes of `want`
 *  end to end, and nothing may leak. */
static inline void expect_frames_at_any_split(weft_channel_init_cb init,
                                              const void *wire, size_t wire_len,
                                              unsigned seed, size_t frames,
                                              const void *want, size_t len) {
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = embedded_of(init);
    feed(e, wire, wire_len, mode, seed + (unsigned)mode);
    expect_frames_free(e, frames, want, len);
  }
}

/** Takes the body buffers of an HTTP message from the tail of `e`, then
 *  its end marker, which must come next; the body must be `want`. */
static inline void expect_http_body(weft_embedded *e, const char *want) {
  char got[256];
  size_t n = 0;
  void *m;
  while (weft_msg_is(m = weft_embedded_read_inbound(e), &weft_buf_msg_type)) {
    weft_buf *b = m;
    ck_assert_uint_le(n + weft_buf_readable(b), sizeof got);
    memcpy(got + n, weft_buf_rptr(b), weft_buf_readable(b));
    n += weft_buf_readable(b);
    weft_buf_release(b);
  }
  ck_assert_msg(weft_msg_is(m, &weft_http_end_type), "got %s",
                weft_msg_type_name(m));
  ck_assert_uint_eq(n, strlen(want));
  ck_assert_mem_eq(got, want, n);
}

/** Makes message `i` of a test's sequence from `pool` (a weft_buf or any
 *  other weft_msg the codec under test encodes). */
typedef void *(*cu_make_fn)(weft_pool *pool, int i);

/** Checks that `msg` is message `i` of a test's sequence (not releasing it). */
typedef void (*cu_check_fn)(void *msg, int i);

/** Writes messages make(pool, 0..n-1) through the pipeline `init` sets up
 *  and flushes; returns the wire bytes, copied to `wire` (cap bytes). */
static inline size_t encode_all(weft_channel_init_cb init, cu_make_fn make,
                                int n, uint8_t *wire, size_t cap) {
  weft_embedded *e = embedded_of(init);
  for (int i = 0; i < n; i++)
    weft_channel_write(weft_embedded_channel(e), make(weft_embedded_pool(e), i),
                       WEFT_PROMISE_NONE);
  weft_channel_flush(weft_embedded_channel(e));
  size_t len = drain_outbound(e, wire, cap);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
  return len;
}

/** Feeds `wire` to a new channel of `init`'s pipeline in every feed_mode
 *  (random splits seeded by seed + mode): n messages must reach the tail,
 *  each passing check(msg, i) in order, then nothing more and no
 *  exception. */
static inline void decode_all_at_any_split(weft_channel_init_cb init,
                                           const void *wire, size_t len, int n,
                                           unsigned seed, cu_check_fn check) {
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = embedded_of(init);
    feed(e, wire, len, mode, seed + (unsigned)mode);
    for (int i = 0; i < n; i++) {
      void *m = weft_embedded_read_inbound(e);
      ck_assert_ptr_nonnull(m);
      check(m, i);
      weft_msg_release(m);
    }
    expect_drained_free(e);
  }
}

#endif /* WEFT_TESTS_CODEC_UTIL_H */
