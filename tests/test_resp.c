/* SPDX-License-Identifier: Apache-2.0 */
/* The RESP2 command decoder and reply encoders on the embedded channel. */
#include "harness.h"

#include "codec_util.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

static weft_resp_options opts;

static void init_resp(weft_channel *ch, void *arg) {
  (void)arg;
  ck_assert_int_eq(
      weft_resp_decoder_add_last(weft_channel_pipeline(ch), "resp", &opts), 0);
}

static void setup(void) { weft_resp_options_init(&opts); }

static void check_cmd(weft_resp_cmd *cmd, size_t argc, const char **argv) {
  ck_assert_ptr_nonnull(cmd);
  ck_assert(weft_msg_is(cmd, &weft_resp_cmd_type));
  ck_assert_uint_eq(cmd->argc, argc);
  for (size_t i = 0; i < argc; i++) {
    ck_assert_uint_eq(cmd->argv[i].len, strlen(argv[i]));
    ck_assert_mem_eq(cmd->argv[i].ptr, argv[i], cmd->argv[i].len);
  }
}

START_TEST(resp_commands_decode_at_any_split) {
  static const char wire[] =
      "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nv\r\n\0x\r\n"
      "PING\r\n"
      "\r\n"
      "*0\r\n"
      "  get   k2 \r\n"
      "*1\r\n$0\r\n\r\n";
  const char *set[] = {"SET", "key", "v\r\n\0x"};
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = embedded_of(init_resp);
    feed(e, wire, sizeof wire - 1, mode, 17u + (unsigned)mode);
    weft_resp_cmd *c = weft_embedded_read_inbound(e);
    ck_assert_uint_eq(c->argc, 3);
    ck_assert_mem_eq(c->argv[2].ptr, set[2], 5);
    ck_assert(!c->is_inline);
    ck_assert(weft_resp_arg_equals(c, 0, "set"));
    weft_msg_release(c);
    c = weft_embedded_read_inbound(e);
    check_cmd(c, 1, (const char *[]){"PING"});
    ck_assert(c->is_inline);
    weft_msg_release(c);
    c = weft_embedded_read_inbound(e);
    check_cmd(c, 2, (const char *[]){"get", "k2"});
    weft_msg_release(c);
    c = weft_embedded_read_inbound(e);
    check_cmd(c, 1, (const char *[]){""});
    weft_msg_release(c);
    expect_drained_free(e);
  }
}
END_TEST

START_TEST(resp_command_encoder_round_trips) {
  weft_embedded *e = embedded_of(init_resp);
  static uint8_t big[5000];
  memset(big, 'z', sizeof big);
  weft_resp_arg argv[] = {{(const uint8_t *)"MSET", 4},
                          {(const uint8_t *)"a", 1},
                          {big, sizeof big}};
  size_t n = weft_resp_command_size(3, argv);
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), n);
  ck_assert_int_eq(weft_resp_write_command(b, 3, argv), 0);
  ck_assert_uint_eq(weft_buf_readable(b), n);
  feed(e, weft_buf_rptr(b), n, FEED_RANDOM, 3);
  weft_buf_release(b);
  weft_resp_cmd *c = weft_embedded_read_inbound(e);
  ck_assert_uint_eq(c->argc, 3);
  ck_assert_uint_eq(c->argv[2].len, sizeof big);
  ck_assert_mem_eq(c->argv[2].ptr, big, sizeof big);
  /* An argument kept past its command stays valid. */
  weft_buf *kept = weft_resp_arg_slice(c, 1);
  weft_msg_release(c);
  ck_assert_uint_eq(weft_buf_readable(kept), 1);
  ck_assert_uint_eq(weft_buf_rptr(kept)[0], 'a');
  weft_buf_release(kept);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(resp_reply_encoders_write_resp2) {
  weft_pool *pool;
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  weft_buf *b = weft_buf_alloc(pool, 256);
  ck_assert_int_eq(weft_resp_write_simple(b, "OK"), 0);
  ck_assert_int_eq(weft_resp_write_error(b, "ERR no"), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, -42), 0);
  ck_assert_int_eq(weft_resp_write_bulk(b, "ab", 2), 0);
  ck_assert_int_eq(weft_resp_write_null(b), 0);
  ck_assert_int_eq(weft_resp_write_array(b, 2), 0);
  ck_assert_int_eq(weft_resp_write_simple(b, "bad\r\n"), WEFT_EINVAL);
  const char want[] = "+OK\r\n-ERR no\r\n:-42\r\n$2\r\nab\r\n$-1\r\n*2\r\n";
  ck_assert_uint_eq(weft_buf_readable(b), sizeof want - 1);
  ck_assert_mem_eq(weft_buf_rptr(b), want, sizeof want - 1);
  ck_assert_uint_eq(weft_resp_bulk_size(2), 8);
  b->writer_index = b->capacity - 3;
  ck_assert_int_eq(weft_resp_write_bulk(b, "ab", 2), WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, b->capacity - 3);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* Integers and lengths at the edges of int64 and of a digit count, and a
 * line that does not fit, which writes nothing. */
START_TEST(resp_reply_integers_at_the_edges) {
  weft_pool *pool;
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  weft_buf *b = weft_buf_alloc(pool, 256);
  ck_assert_int_eq(weft_resp_write_integer(b, 0), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, 9), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, 10), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, -1), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, INT64_MAX), 0);
  ck_assert_int_eq(weft_resp_write_integer(b, INT64_MIN), 0);
  ck_assert_int_eq(weft_resp_write_array(b, 1000), 0);
  ck_assert_int_eq(weft_resp_write_map(b, 99), 0);
  const char want[] = ":0\r\n:9\r\n:10\r\n:-1\r\n"
                      ":9223372036854775807\r\n:-9223372036854775808\r\n"
                      "*1000\r\n%99\r\n";
  ck_assert_uint_eq(weft_buf_readable(b), sizeof want - 1);
  ck_assert_mem_eq(weft_buf_rptr(b), want, sizeof want - 1);
  b->writer_index = b->capacity - 5; /* ":100\r\n" needs 6 */
  ck_assert_int_eq(weft_resp_write_integer(b, 100), WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, b->capacity - 5);
  ck_assert_int_eq(weft_resp_write_integer(b, -10), WEFT_ENOSPC);
  ck_assert_int_eq(weft_resp_write_integer(b, 99), 0);
  ck_assert_uint_eq(b->writer_index, b->capacity);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* RESP3's types, as redis-server 7 writes them to a HELLO 3 client. */
START_TEST(resp_reply_encoders_write_resp3) {
  weft_pool *pool;
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  weft_buf *b = weft_buf_alloc(pool, 256);
  ck_assert_int_eq(weft_resp_write_map(b, 1), 0);
  ck_assert_int_eq(weft_resp_write_bulk(b, "k", 1), 0);
  ck_assert_int_eq(weft_resp_write_null3(b), 0);
  ck_assert_int_eq(weft_resp_write_verbatim(b, "txt", "a\r\nb", 4), 0);
  ck_assert_int_eq(weft_resp_write_verbatim(b, "text", "x", 1), WEFT_EINVAL);
  const char want[] = "%1\r\n$1\r\nk\r\n_\r\n=8\r\ntxt:a\r\nb\r\n";
  ck_assert_uint_eq(weft_buf_readable(b), sizeof want - 1);
  ck_assert_mem_eq(weft_buf_rptr(b), want, sizeof want - 1);
  ck_assert_uint_eq(weft_resp_verbatim_size(4), 14);
  b->writer_index = b->capacity - 13;
  ck_assert_int_eq(weft_resp_write_verbatim(b, "txt", "a\r\nb", 4),
                   WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, b->capacity - 13);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* `wire`, fed byte by byte, must close the channel with `err` and the
 * reason text (the tail logs it), without allocating above a limit. */
static void check_refused(const char *wire, int err, const char *reason) {
  weft_embedded *e = embedded_of(init_resp);
  weft_pool_stats before, after;
  weft_pool_stats_get(weft_embedded_pool(e), &before);
  th_log_capture_start();
  feed(e, wire, strlen(wire), FEED_BYTES, 0);
  th_log_capture_stop();
  weft_pool_stats_get(weft_embedded_pool(e), &after);
  ck_assert_msg(weft_embedded_exception(e, 0) == err, "%s: got %d", wire,
                weft_embedded_exception(e, 0));
  ck_assert_msg(th_log_count(reason) == 1, "want \"%s\" in the log:\n%s",
                reason, th_log_text());
  ck_assert_uint_eq(after.unpooled, before.unpooled);
  ck_assert_int_eq(weft_channel_is_active(weft_embedded_channel(e)), 0);
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}

/* Each input must close the channel with its error and Redis' reason
 * text, fed byte by byte, without allocating above a limit. */
START_TEST(resp_refuses_malformed_and_oversized_input) {
  static const struct {
    const char *wire;
    int err;
    const char *reason;
  } cases[] = {
      {"*2\r\n$3\r\nGET\r\n:5\r\n", WEFT_EBADFRAME,
       "Protocol error: expected '$', got ':'"}, /* not a bulk */
      {"*1\r\n*1\r\n", WEFT_EBADFRAME,
       "Protocol error: expected '$', got '*'"}, /* nested array */
      {"*1\r\n\001", WEFT_EBADFRAME,
       "Protocol error: expected '$', got ' '"}, /* control byte */
      {"*x\r\n", WEFT_EBADFRAME, "Protocol error: invalid multibulk length"},
      {"*1\r\n$-1\r\n", WEFT_EBADFRAME,
       "Protocol error: invalid bulk length"}, /* null argument */
      {"*1\r\n$1x\r\n", WEFT_EBADFRAME, "Protocol error: invalid bulk length"},
      {"*1\r\n$3\r\nabcXY", WEFT_EBADFRAME,
       "Protocol error: bulk string not followed by CRLF"},
      {"*12345678901234567890\r\n", WEFT_EBADFRAME,
       "Protocol error: invalid multibulk length"}, /* absurd count */
      {"*2000\r\n", WEFT_ETOOLONG,
       "Protocol error: invalid multibulk length (2000 arguments, maximum "
       "1024)"},
      {"*1\r\n$999999999\r\n", WEFT_ETOOLONG,
       "Protocol error: invalid bulk length (999999999 bytes, maximum "
       "524288)"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    check_refused(cases[c].wire, cases[c].err, cases[c].reason);
}
END_TEST

/* Any text makes an error reply: control bytes become spaces, so a
 * client's bytes quoted in an error can never break the stream. */
START_TEST(resp_error_text_replaces_control_bytes) {
  weft_pool *pool;
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  weft_buf *b = weft_buf_alloc(pool, 64);
  static const char text[] = "ERR 'a\r\nb\0c\x7f\tz\xc3\xa9'";
  ck_assert_int_eq(weft_resp_write_error_text(b, text, sizeof text - 1), 0);
  static const char want[] = "-ERR 'a  b c  z\xc3\xa9'\r\n";
  ck_assert_uint_eq(weft_buf_readable(b), sizeof want - 1);
  ck_assert_mem_eq(weft_buf_rptr(b), want, sizeof want - 1);
  b->writer_index = b->capacity - 5;
  ck_assert_int_eq(weft_resp_write_error_text(b, "ERR", 3), WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, b->capacity - 5);
  ck_assert_int_eq(weft_resp_write_error_text(b, "ER", 2), 0);
  ck_assert_uint_eq(b->writer_index, b->capacity);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(resp_inline_longer_than_limit_closes_channel) {
  opts.max_inline = 16;
  weft_embedded *e = embedded_of(init_resp);
  th_log_capture_start();
  feed(e, "GET aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 34, FEED_BYTES, 0);
  th_log_capture_stop();
  expect_failed_free(e, WEFT_ETOOLONG,
                     "Protocol error: too big inline request (maximum 16 "
                     "bytes)");
}
END_TEST

/* Inline commands split as Redis' sdssplitargs: double quotes with
 * escapes, single quotes with \' only, quotes starting mid-argument. */
START_TEST(resp_inline_quotes_split_as_redis) {
  static const struct {
    const char *line;
    size_t argc;
    const char *argv[4];
    size_t lens[4];
  } cases[] = {
      {"set \"a b\" c\r\n", 3, {"set", "a b", "c"}, {3, 3, 1}},
      {"set 'a b' ''\n", 3, {"set", "a b", ""}, {3, 3, 0}},
      {"x \"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n",
       2,
       {"x", "\n\r\t\b\a\\\"q"},
       {1, 8}},
      {"x \"\\x41\\x7a\\x00\\xg1\"\n", 2, {"x", "Az\0xg1"}, {1, 6}},
      {"x 'it\\'s' 'a\\b'\n", 3, {"x", "it's", "a\\b"}, {1, 4, 3}},
      {"x a\"b c\"\n", 2, {"x", "ab c"}, {1, 4}},
      {"\t x\vy \f z \n", 2, {"x\vy", "z"}, {3, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int mode = 0; mode < FEED_MODES; mode++) {
      weft_embedded *e = embedded_of(init_resp);
      feed(e, cases[c].line, strlen(cases[c].line), mode, 3u + (unsigned)mode);
      weft_resp_cmd *cmd = weft_embedded_read_inbound(e);
      ck_assert_msg(cmd != NULL, "case %zu: no command", c);
      size_t want = cases[c].argc; /* "x\vy": \v does not end one */
      ck_assert_uint_eq(cmd->argc, want);
      for (size_t i = 0; i < want; i++) {
        ck_assert_msg(cmd->argv[i].len == cases[c].lens[i],
                      "case %zu arg %zu: %zu bytes", c, i, cmd->argv[i].len);
        ck_assert_mem_eq(cmd->argv[i].ptr, cases[c].argv[i], cases[c].lens[i]);
      }
      weft_msg_release(cmd);
      ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
      ck_assert_uint_eq(weft_embedded_free(e), 0);
    }
  }
}
END_TEST

/* Unbalanced quotes, and a closing quote not followed by a space, are
 * Redis' protocol error. */
START_TEST(resp_inline_unbalanced_quotes_refused) {
  static const char *const lines[] = {"set \"a b c\n",  "set 'a\n",
                                      "set \"a\"b c\n", "set 'a'b\n",
                                      "set \"a\\\n",    "set 'a\\'\n"};
  for (size_t c = 0; c < sizeof lines / sizeof lines[0]; c++) {
    weft_embedded *e = embedded_of(init_resp);
    th_log_capture_start();
    feed(e, lines[c], strlen(lines[c]), FEED_BYTES, 0);
    th_log_capture_stop();
    ck_assert_msg(weft_embedded_exception(e, 0) == WEFT_EBADFRAME,
                  "case %zu: got %d", c, weft_embedded_exception(e, 0));
    ck_assert_int_eq(
        th_log_count("Protocol error: unbalanced quotes in request"), 1);
    ck_assert_ptr_null(weft_embedded_read_inbound(e));
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* Redis' limits before AUTH (CVE-2021-32675): 10 arguments of 16 KiB,
 * refused with its texts before anything is allocated for the claimed
 * size; set_options lifts them for the next command. */
START_TEST(resp_unauthenticated_limits_and_lifting_them) {
  opts.unauthenticated = true;
  opts.max_args = 10;
  opts.max_bulk = 16384;
  static const struct {
    const char *wire;
    const char *reason;
  } cases[] = {
      {"*11\r\n", "Protocol error: unauthenticated multibulk length"},
      {"*2\r\n$3\r\nGET\r\n$1048576\r\n",
       "Protocol error: unauthenticated bulk length"},
  };
  for (size_t c = 0; c < 2; c++)
    check_refused(cases[c].wire, WEFT_ETOOLONG, cases[c].reason);
  weft_embedded *e = embedded_of(init_resp);
  weft_resp_options lifted;
  weft_resp_options_init(&lifted);
  ck_assert_int_eq(
      weft_resp_decoder_set_options(
          weft_channel_pipeline(weft_embedded_channel(e)), "resp", &lifted),
      0);
  ck_assert_int_eq(
      weft_resp_decoder_set_options(
          weft_channel_pipeline(weft_embedded_channel(e)), "nope", &lifted),
      WEFT_ENOENT);
  feed(e, "*11\r\n", 5, FEED_WHOLE, 0);
  ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* More arguments than the slots kept between commands (1024): their slots
 * grow as they arrive, at any split, and the next command decodes. */
START_TEST(resp_many_arguments_decode_at_any_split) {
  enum { N = 3000 };
  opts.max_args = 1u << 20;
  opts.max_command = 1u << 20;
  static char wire[N * 16 + 64];
  size_t len = (size_t)snprintf(wire, sizeof wire, "*%d\r\n", N);
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf(wire + len, sizeof wire - len, "$%d\r\n%d\r\n",
                            i < 10     ? 1
                            : i < 100  ? 2
                            : i < 1000 ? 3
                                       : 4,
                            i);
  len +=
      (size_t)snprintf(wire + len, sizeof wire - len, "*1\r\n$4\r\nPING\r\n");
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = embedded_of(init_resp);
    feed(e, wire, len, mode, 5u + (unsigned)mode);
    weft_resp_cmd *c = weft_embedded_read_inbound(e);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(c->argc, N);
    for (int i = 0; i < N; i += 997) {
      char want[8];
      int n = snprintf(want, sizeof want, "%d", i);
      ck_assert_uint_eq(c->argv[i].len, (size_t)n);
      ck_assert_mem_eq(c->argv[i].ptr, want, (size_t)n);
    }
    weft_msg_release(c);
    c = weft_embedded_read_inbound(e);
    check_cmd(c, 1, (const char *[]){"PING"});
    weft_msg_release(c);
    ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* A count a peer merely claims allocates nothing of its size: "*1000000"
 * in 10 bytes took 16 MB of argument slots at once before. glibc's count
 * of the heap in use (mallinfo2: 0 under a sanitizer's allocator, where
 * the check is moot). */
START_TEST(resp_claimed_count_allocates_little) {
#ifdef __GLIBC__
  opts.max_args = 1u << 20;
  weft_embedded *e = embedded_of(init_resp);
  struct mallinfo2 m = mallinfo2();
  size_t before = m.uordblks + m.hblkhd; /* small and mmap'd blocks */
  feed(e, "*1000000\r\n$1\r\na\r\n", 17, FEED_WHOLE, 0);
  m = mallinfo2();
  size_t after = m.uordblks + m.hblkhd;
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_msg(after < before + 1024 * 1024,
                "a claimed count of 1000000 took %zu bytes", after - before);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
#endif
}
END_TEST

START_TEST(resp_partial_command_at_close_leaks_nothing) {
  weft_embedded *e = embedded_of(init_resp);
  feed(e, "*2\r\n$3\r\nGET\r\n$10\r\nabc", 21, FEED_BYTES, 0);
  ck_assert_ptr_null(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite_fixture(
      "resp", "codec", setup, NULL, resp_commands_decode_at_any_split,
      resp_command_encoder_round_trips, resp_reply_encoders_write_resp2,
      resp_reply_integers_at_the_edges, resp_reply_encoders_write_resp3,
      resp_refuses_malformed_and_oversized_input,
      resp_error_text_replaces_control_bytes,
      resp_inline_longer_than_limit_closes_channel,
      resp_partial_command_at_close_leaks_nothing,
      resp_many_arguments_decode_at_any_split,
      resp_claimed_count_allocates_little, resp_inline_quotes_split_as_redis,
      resp_inline_unbalanced_quotes_refused,
      resp_unauthenticated_limits_and_lifting_them, NULL);
}
