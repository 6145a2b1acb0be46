/* SPDX-License-Identifier: Apache-2.0 */
/* Reusable handlers on the embedded channel: idle state, logging, flush
 * consolidation and stats. */
#include "harness.h"

#include <time.h>

#include "codec_util.h"

/* ---- helpers: a flush counter next to the head, an echo at the tail ---- */

static int flushes;
static weft_idle_event last_idle;
static int idle_events;

static void count_flush(weft_ctx *ctx) {
  flushes++;
  weft_ctx_flush(ctx);
}
static const weft_handler flush_counter = {.name = "flushes",
                                           .flush = count_flush};

static void echo_read(weft_ctx *ctx, void *msg) {
  weft_ctx_write_and_flush(ctx, msg, WEFT_PROMISE_NONE);
}
static void record_idle(weft_ctx *ctx, void *event) {
  (void)ctx;
  if (weft_msg_is(event, &weft_idle_event_type)) {
    last_idle = *(weft_idle_event *)event;
    idle_events++;
  }
}
static const weft_handler echo = {
    .name = "echo", .channel_read = echo_read, .user_event = record_idle};

static void setup(void) {
  flushes = idle_events = 0;
  memset(&last_idle, 0, sizeof last_idle);
}

/* ---- idle ---- */

static weft_idle_options idle_opts;

static void init_idle(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_idle_add_last(p, "idle", &idle_opts), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "echo", &echo, NULL), 0);
}

static void wait_idle(weft_embedded *e, int events) {
  for (int i = 0; i < 10000 && idle_events < events; i++) {
    weft_embedded_run_pending(e);
    if (idle_events < events)
      nanosleep(&(struct timespec){0, 200000}, NULL);
  }
  ck_assert_int_ge(idle_events, events);
}

START_TEST(idle_reader_idle_fires_user_event) {
  idle_opts = (weft_idle_options){.reader_idle_ns = 1000000};
  weft_embedded *e = embedded_of(init_idle);
  wait_idle(e, 1);
  ck_assert_int_eq(last_idle.state, WEFT_IDLE_READER);
  ck_assert(last_idle.first);
  wait_idle(e, 2);
  ck_assert(!last_idle.first); /* still idle: not the first any more */
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(idle_writer_and_all_report_their_kind) {
  idle_opts = (weft_idle_options){.writer_idle_ns = _i == 0 ? 1000000 : 0,
                                  .all_idle_ns = _i == 1 ? 1000000 : 0};
  weft_embedded *e = embedded_of(init_idle);
  wait_idle(e, 1);
  ck_assert_int_eq(last_idle.state, _i == 0 ? WEFT_IDLE_WRITER : WEFT_IDLE_ALL);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(idle_refuses_all_timeouts_off) {
  idle_opts = (weft_idle_options){0};
  weft_embedded *e = embedded_of(NULL);
  ck_assert_int_eq(
      weft_idle_add_last(weft_channel_pipeline(weft_embedded_channel(e)),
                         "idle", &idle_opts),
      WEFT_EINVAL);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- logging ---- */

static weft_logging_options log_opts;

static void init_logging(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_logging_add_last(p, "log", &log_opts), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "echo", &echo, NULL), 0);
}

START_TEST(logging_logs_events_and_hex_dump_only_when_on) {
  weft_logging_options_init(&log_opts);
  log_opts.level = WEFT_LOG_WARN; /* delivered at the default level */
  log_opts.hex_dump = _i == 1;
  weft_embedded *e;
  th_log_capture_start();
  ck_assert_int_eq(weft_embedded_new(&e, init_logging, NULL), 0);
  feed(e, "hello, world 0123456789", 23, FEED_WHOLE, 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("[log]: ACTIVE"), 1);
  ck_assert_int_eq(th_log_count("[log]: READ 23 bytes"), 1);
  ck_assert_int_eq(th_log_count("[log]: WRITE 23 bytes"), 1);
  ck_assert_int_eq(th_log_count("[log]: INACTIVE"), 1);
  ck_assert_int_eq(th_log_count("|hello, world 012|"), _i == 1 ? 2 : 0);
}
END_TEST

START_TEST(logging_hex_dump_formats_offsets_and_ascii) {
  char out[256];
  size_t n = weft_hex_dump(out, sizeof out, "AB\x01", 3);
  ck_assert_uint_eq(n, strlen(out));
  ck_assert_ptr_nonnull(strstr(out, "00000000  41 42 01"));
  ck_assert_ptr_nonnull(strstr(out, "|AB.|"));
  ck_assert_uint_lt(weft_hex_dump(out, 10, "0123456789abcdefXYZ", 19), 10);
}
END_TEST

/* ---- flush consolidation ---- */

static weft_flush_consolidation_options fc_opts;

static void init_fc(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_pipeline_add_last(p, "count", &flush_counter, NULL), 0);
  ck_assert_int_eq(weft_flush_consolidation_add_last(p, "fc", &fc_opts), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "echo", &echo, NULL), 0);
}

/* Fires `n` reads in one read cycle, as a transport does with a batch. */
static void read_batch(weft_embedded *e, int n) {
  weft_pipeline *p = weft_channel_pipeline(weft_embedded_channel(e));
  for (int i = 0; i < n; i++) {
    weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 4);
    weft_buf_write_bytes(b, "ping", 4);
    weft_pipeline_fire_channel_read(p, b);
  }
  weft_pipeline_fire_channel_read_complete(p);
}

static size_t outbound_bytes(weft_embedded *e) {
  static uint8_t out[4096];
  return drain_outbound(e, out, sizeof out);
}

START_TEST(flush_consolidation_one_flush_per_read_batch) {
  weft_flush_consolidation_options_init(&fc_opts);
  weft_embedded *e = embedded_of(init_fc);
  read_batch(e, 10);
  ck_assert_int_eq(flushes, 1);
  ck_assert_uint_eq(outbound_bytes(e), 40);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(flush_consolidation_flushes_after_limit_within_batch) {
  weft_flush_consolidation_options_init(&fc_opts);
  fc_opts.explicit_flush_after_flushes = 4;
  weft_embedded *e = embedded_of(init_fc);
  read_batch(e, 10); /* 4 + 4 held ones sent, 2 at read complete */
  ck_assert_int_eq(flushes, 3);
  ck_assert_uint_eq(outbound_bytes(e), 40);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(flush_consolidation_idle_flush_goes_through_at_once) {
  weft_flush_consolidation_options_init(&fc_opts);
  weft_embedded *e = embedded_of(init_fc);
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 4);
  weft_buf_write_bytes(b, "pong", 4);
  weft_channel_write_and_flush(weft_embedded_channel(e), b, WEFT_PROMISE_NONE);
  ck_assert_int_eq(flushes, 1);
  ck_assert_uint_eq(outbound_bytes(e), 4);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(flush_consolidation_without_read_gathers_into_a_task) {
  weft_flush_consolidation_options_init(&fc_opts);
  fc_opts.consolidate_when_no_read = true;
  weft_embedded *e = embedded_of(init_fc);
  for (int i = 0; i < 3; i++) {
    weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 4);
    weft_buf_write_bytes(b, "pong", 4);
    weft_channel_write_and_flush(weft_embedded_channel(e), b,
                                 WEFT_PROMISE_NONE);
  }
  ck_assert_int_eq(flushes, 0);
  weft_embedded_run_pending(e);
  ck_assert_int_eq(flushes, 1);
  ck_assert_uint_eq(outbound_bytes(e), 12);
  /* Removed with the task queued: the task frees the state (no leak). */
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 4);
  weft_buf_write_bytes(b, "last", 4);
  weft_channel_write_and_flush(weft_embedded_channel(e), b, WEFT_PROMISE_NONE);
  ck_assert_int_eq(weft_pipeline_remove(
                       weft_channel_pipeline(weft_embedded_channel(e)), "fc"),
                   0);
  ck_assert_int_eq(flushes, 2); /* held flush sent on removal */
  weft_embedded_run_pending(e);
  ck_assert_uint_eq(outbound_bytes(e), 4);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- stats ---- */

static weft_stats stats;

static void init_stats(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_stats_add_last(p, "stats", &stats), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "echo", &echo, NULL), 0);
}

START_TEST(stats_counts_bytes_and_messages_both_ways) {
  weft_stats_reset(&stats);
  weft_embedded *e = embedded_of(init_stats);
  feed(e, "0123456789", 10, FEED_BYTES, 0);
  feed(e, "abc", 3, FEED_WHOLE, 0);
  weft_stats_snapshot snap;
  weft_stats_get(&stats, &snap);
  ck_assert_uint_eq(snap.msgs_in, 11);
  ck_assert_uint_eq(snap.bytes_in, 13);
  ck_assert_uint_eq(snap.msgs_out, 11);
  ck_assert_uint_eq(snap.bytes_out, 13);
  outbound_bytes(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("handlers");
  TCase *tc =
      th_add_case(s, "handlers", 0, idle_reader_idle_fires_user_event, NULL);
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_loop_test(tc, idle_writer_and_all_report_their_kind, 0, 2);
  th_add_tests(tc, idle_refuses_all_timeouts_off, NULL);
  tcase_add_loop_test(tc, logging_logs_events_and_hex_dump_only_when_on, 0, 2);
  th_add_tests(tc, logging_hex_dump_formats_offsets_and_ascii,
               flush_consolidation_one_flush_per_read_batch,
               flush_consolidation_flushes_after_limit_within_batch,
               flush_consolidation_idle_flush_goes_through_at_once,
               flush_consolidation_without_read_gathers_into_a_task,
               stats_counts_bytes_and_messages_both_ways, NULL);
  return s;
}
