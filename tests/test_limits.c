/* SPDX-License-Identifier: Apache-2.0 */
/* A channel's defences on the embedded channel: flow control pauses and
 * resumes reading at the watermarks, decoders stop at a paused read and
 * go on at the resume, the output limit closes the channel, the idle
 * timeout closes a channel that reads nothing. */
#include "harness.h"

#include "codec_util.h"

#include <string.h>

#include <weft/embedded.h>
#include <weft/error.h>
#include <weft/weft.h>

/* ---- a handler that answers every message with `reply` bytes ---- */

typedef struct answerer {
  size_t reply;    /* bytes written per message read */
  int reads;       /* messages seen */
  int completes;   /* channel_read_complete seen */
  int resumes;     /* weft_event_read_resumed seen */
  uint8_t last[8]; /* the first byte of the last few messages */
} answerer;

static answerer ans;

static void ans_read(weft_ctx *ctx, void *msg) {
  weft_buf *in = msg;
  ans.last[ans.reads % 8] = weft_buf_readable(in) ? weft_buf_rptr(in)[0] : 0;
  ans.reads++;
  weft_buf_release(in);
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b =
      weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), ans.reply);
  ck_assert_ptr_nonnull(b);
  memset(b->base, 'r', ans.reply);
  b->writer_index = ans.reply;
  weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
}

static void ans_complete(weft_ctx *ctx) {
  ans.completes++;
  weft_ctx_flush(ctx);
}

static void ans_event(weft_ctx *ctx, void *event) {
  if (event == &weft_event_read_resumed)
    ans.resumes++;
  weft_ctx_fire_user_event(ctx, event);
}

static const weft_handler answer_handler = {.name = "answer",
                                            .channel_read = ans_read,
                                            .channel_read_complete =
                                                ans_complete,
                                            .user_event = ans_event};

/* Flow control on, watermarks 100 / 1000 bytes, nothing leaves yet. */
static void init_flow(weft_channel *ch, bool with_decoder) {
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_FLOW_CONTROL, 1), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_LOW_WATERMARK, 100), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, 1000), 0);
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (with_decoder) {
    weft_line_options o;
    weft_line_options_init(&o);
    ck_assert_int_eq(weft_line_decoder_add_last(p, "lines", &o), 0);
  }
  ck_assert_int_eq(weft_pipeline_add_last(p, "answer", &answer_handler, NULL),
                   0);
}

static void init_plain(weft_channel *ch, void *arg) {
  (void)arg;
  init_flow(ch, false);
}

static void init_decoding(weft_channel *ch, void *arg) {
  (void)arg;
  init_flow(ch, true);
}

/* Lets everything queued leave, then runs the resume task. */
static void drain(weft_embedded *e) {
  weft_embedded_set_write_limit(e, SIZE_MAX);
  weft_channel_flush(weft_embedded_channel(e));
  weft_embedded_run_pending(e);
  void *m;
  while ((m = weft_embedded_read_outbound(e)) != NULL)
    weft_msg_release(m);
}

/* A new channel of `init`'s pipeline with the answerer reset to reply
 * `reply` bytes a message, each flush sending only `write_limit` bytes
 * (weft_embedded_set_write_limit: the rest stays queued). */
static weft_embedded *answering(weft_channel_init_cb init, size_t reply,
                                size_t write_limit) {
  memset(&ans, 0, sizeof ans);
  ans.reply = reply;
  weft_embedded *e = embedded_of(init);
  weft_embedded_set_write_limit(e, write_limit);
  return e;
}

START_TEST(limits_flow_control_pauses_above_high_resumes_below_low) {
  weft_embedded *e = answering(init_plain, 300, 0);
  weft_channel *ch = weft_embedded_channel(e);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(weft_embedded_write_inbound_bytes(e, "x", 1), 0);
  ck_assert(weft_channel_is_reading(ch)); /* 900 B: not above 1000 */
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(e, "x", 1), 0);
  ck_assert(!weft_channel_is_reading(ch)); /* 1200 B */
  ck_assert(!weft_channel_is_writable(ch));
  drain(e);
  ck_assert(weft_channel_is_reading(ch));
  ck_assert_int_eq(ans.resumes, 1);
  /* The user's auto-read stays the user's: off, flow control cannot turn
   * reading on. */
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0), 0);
  ck_assert(!weft_channel_is_reading(ch));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(limits_decoder_stops_at_paused_read_and_goes_on_at_resume) {
  weft_embedded *e = answering(init_decoding, 300, 0);
  /* Ten requests in one read: flow control stops the decoder after the
   * fourth reply took the queue over the high watermark. */
  const char *wire = "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n";
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(e, wire, strlen(wire)), 0);
  ck_assert_int_eq(ans.reads, 4);
  ck_assert_uint_le(weft_channel_pending_bytes(weft_embedded_channel(e)),
                    1000 + 300);
  int rounds = 0;
  while (ans.reads < 10 && rounds++ < 10)
    drain(e);
  ck_assert_int_eq(ans.reads, 10);
  ck_assert_int_eq(ans.last[9 % 8], '9'); /* in order, none lost */
  ck_assert_int_ge(ans.completes, 3);     /* one after every resume */
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

static void init_limited(weft_channel *ch, void *arg) {
  (void)arg;
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_OUTPUT_LIMIT, 1000), 0);
  th_add_last(ch, "answer", &answer_handler, NULL);
}

START_TEST(limits_output_limit_closes_channel_with_enobufs) {
  weft_embedded *e = answering(init_limited, 400, 0);
  weft_channel *ch = weft_embedded_channel(e);
  th_log_capture_start();
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(e, "a", 1), 0);
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(e, "b", 1), 0);
  ck_assert(weft_channel_is_active(ch)); /* 800 B: within the limit */
  weft_embedded_write_inbound_bytes(e, "c", 1);
  th_log_capture_stop();
  ck_assert(!weft_channel_is_active(ch));
  expect_failed_free(e, WEFT_ENOBUFS, "output limit of 1000 bytes exceeded");
}
END_TEST

/* The log line gives what was queued when the limit was crossed, not the
 * smaller figure left once a flush took some before the close: it printed
 * 700 bytes "over" a limit of 1000. */
START_TEST(limits_output_limit_line_gives_the_crossing_figure) {
  /* One reply crosses the limit of 1000; the flush after it sends 500. */
  weft_embedded *e = answering(init_limited, 1200, 500);
  th_log_capture_start();
  weft_embedded_write_inbound_bytes(e, "a", 1);
  weft_embedded_run_pending(e);
  th_log_capture_stop();
  ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
  ck_assert_msg(th_log_count("output limit of 1000 bytes exceeded: 1200 "
                             "bytes queued and unsent") == 1,
                "log:\n%s", th_log_text());
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

static void init_idle(weft_channel *ch, void *arg) {
  (void)arg;
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_IDLE_TIMEOUT_MS, 40),
                   0);
  th_add_last(ch, "answer", &answer_handler, NULL);
}

/* Runs the embedded loop for `ms`, feeding a byte every `every` ms (0 =
 * never); with `until_closed`, until the channel closes instead (at most
 * 30 s): a loaded machine may stop this thread for longer than a fixed
 * window, and the idle timer must still get its turn. */
static void run_for(weft_embedded *e, int ms, int every, bool until_closed) {
  uint64_t start = th_now_ms(), next = start;
  uint64_t end = start + (until_closed ? 30000u : (uint64_t)ms);
  while (th_now_ms() < end) {
    if (until_closed && !weft_channel_is_active(weft_embedded_channel(e)))
      return;
    if (every > 0 && th_now_ms() >= next &&
        weft_channel_is_active(weft_embedded_channel(e))) {
      weft_embedded_write_inbound_bytes(e, "z", 1);
      next = th_now_ms() + (uint64_t)every;
    }
    weft_embedded_run_pending(e);
    drain(e);
    th_sleep_ms(1);
  }
}

START_TEST(limits_idle_timeout_closes_only_a_channel_that_reads_nothing) {
  memset(&ans, 0, sizeof ans);
  ans.reply = 1;
  /* One embedded channel at a time: each is its thread's current loop. */
  weft_embedded *busy, *idle;
  ck_assert_int_eq(weft_embedded_new(&busy, init_idle, NULL), 0);
  run_for(busy, 200, 5, false);
  ck_assert(weft_channel_is_active(weft_embedded_channel(busy)));
  ck_assert_uint_eq(weft_embedded_free(busy), 0);
  ck_assert_int_eq(weft_embedded_new(&idle, init_idle, NULL), 0);
  th_log_capture_start();
  run_for(idle, 0, 0, true);
  th_log_capture_stop();
  ck_assert(!weft_channel_is_active(weft_embedded_channel(idle)));
  ck_assert_int_eq(weft_embedded_exception(idle, 0), WEFT_ETIMEDOUT);
  ck_assert_int_eq(th_log_count("idle timeout: no read or send for 40 ms"), 1);
  ck_assert_uint_eq(weft_embedded_free(idle), 0);
}
END_TEST

/* A channel that reads nothing but whose peer takes what it sends is not
 * idle: sends count, as in Redis (lastinteraction). */
START_TEST(limits_idle_timeout_spares_a_channel_that_only_sends) {
  weft_embedded *e = embedded_of(init_idle);
  weft_channel *ch = weft_embedded_channel(e);
  uint64_t end = th_now_ms() + 200;
  while (th_now_ms() < end && weft_channel_is_active(ch)) {
    weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 1);
    ck_assert_ptr_nonnull(b);
    weft_buf_write_bytes(b, "p", 1);
    weft_channel_write_and_flush(ch, b, WEFT_PROMISE_NONE);
    weft_embedded_run_pending(e);
    drain(e);
    th_sleep_ms(5);
  }
  ck_assert(weft_channel_is_active(ch));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("limits", "core", 30,
                  limits_flow_control_pauses_above_high_resumes_below_low,
                  limits_decoder_stops_at_paused_read_and_goes_on_at_resume,
                  limits_output_limit_closes_channel_with_enobufs,
                  limits_output_limit_line_gives_the_crossing_figure,
                  limits_idle_timeout_closes_only_a_channel_that_reads_nothing,
                  limits_idle_timeout_spares_a_channel_that_only_sends, NULL);
}
