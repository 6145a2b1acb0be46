/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline semantics on the embedded channel: event order, handlers added
 * and removed during events, watermarks, promises, exceptions, and the tail
 * releasing what nobody handled. */
#include "harness.h"

#include "codec_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/embedded.h>
#include <weft/error.h>
#include <weft/weft.h>

/* A recording handler: appends "<name>:<event>" to a shared trace. */
typedef struct recorder {
  const char *name;
  char *trace;                /* shared, 4 KiB */
  const char *remove_on_read; /* name of a handler to remove on read */
  bool consume_reads;         /* release instead of forwarding */
} recorder;

static void trace(weft_ctx *ctx, const char *event) {
  recorder *r = weft_ctx_state(ctx);
  strcat(r->trace, r->name);
  strcat(r->trace, ":");
  strcat(r->trace, event);
  strcat(r->trace, " ");
}

static void rec_active(weft_ctx *ctx) {
  trace(ctx, "active");
  weft_ctx_fire_channel_active(ctx);
}
static void rec_inactive(weft_ctx *ctx) {
  trace(ctx, "inactive");
  weft_ctx_fire_channel_inactive(ctx);
}
static void rec_read(weft_ctx *ctx, void *msg) {
  recorder *r = weft_ctx_state(ctx);
  trace(ctx, "read");
  if (r->remove_on_read != NULL)
    ck_assert_int_eq(
        weft_pipeline_remove(weft_ctx_pipeline(ctx), r->remove_on_read), 0);
  if (r->consume_reads)
    weft_msg_release(msg);
  else
    weft_ctx_fire_channel_read(ctx, msg);
}
static void rec_read_complete(weft_ctx *ctx) {
  trace(ctx, "complete");
  weft_ctx_fire_channel_read_complete(ctx);
}
static void rec_write(weft_ctx *ctx, void *msg, weft_promise p) {
  trace(ctx, "write");
  weft_ctx_write(ctx, msg, p);
}
static void rec_flush(weft_ctx *ctx) {
  trace(ctx, "flush");
  weft_ctx_flush(ctx);
}
static void rec_removed(weft_ctx *ctx) { trace(ctx, "removed"); }

static const weft_handler inbound_h = {.name = "in",
                                       .channel_active = rec_active,
                                       .channel_inactive = rec_inactive,
                                       .channel_read = rec_read,
                                       .channel_read_complete =
                                           rec_read_complete,
                                       .handler_removed = rec_removed};
static const weft_handler outbound_h = {.name = "out",
                                        .write = rec_write,
                                        .flush = rec_flush,
                                        .handler_removed = rec_removed};
static const weft_handler duplex_h = {.name = "both",
                                      .channel_read = rec_read,
                                      .write = rec_write,
                                      .handler_removed = rec_removed};

static char trace_buf[4096];
static recorder r1, r2, r3;

static void init_three(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_pipeline_add_last(p, "decoder", &inbound_h, &r1), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "encoder", &outbound_h, &r2), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "logic", &duplex_h, &r3), 0);
}

static void setup(void) {
  trace_buf[0] = '\0';
  r1 = (recorder){.name = "1", .trace = trace_buf};
  r2 = (recorder){.name = "2", .trace = trace_buf};
  r3 = (recorder){.name = "3", .trace = trace_buf};
}

static weft_buf *bytes(weft_embedded *e, const char *s) {
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), strlen(s));
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, s, strlen(s)), 0);
  return b;
}

static void release_all_outbound(weft_embedded *e) {
  void *m;
  while ((m = weft_embedded_read_outbound(e)) != NULL)
    weft_msg_release(m);
}

START_TEST(pipeline_event_order_matches_netty_example) {
  setup();
  weft_embedded *e = embedded_of(init_three);
  ck_assert_str_eq(trace_buf, "1:active ");
  trace_buf[0] = '\0';
  ck_assert_int_eq(weft_embedded_write_inbound(e, bytes(e, "x")), 0);
  ck_assert_str_eq(trace_buf, "1:read 3:read 1:complete ");
  trace_buf[0] = '\0';
  weft_channel_write_and_flush(weft_embedded_channel(e), bytes(e, "y"),
                               WEFT_PROMISE_NONE);
  ck_assert_str_eq(trace_buf, "3:write 2:write 2:flush ");
  weft_msg_release(weft_embedded_read_inbound(e));
  release_all_outbound(e);
  trace_buf[0] = '\0';
  ck_assert_uint_eq(weft_embedded_free(e), 0);
  /* close fires inactive, then every handler is removed, tail to head */
  ck_assert_str_eq(trace_buf, "1:inactive 3:removed 2:removed 1:removed ");
}
END_TEST

START_TEST(pipeline_ctx_write_starts_below_its_handler) {
  setup();
  weft_embedded *e = embedded_of(init_three);
  trace_buf[0] = '\0';
  weft_ctx *logic = weft_pipeline_context(
      weft_channel_pipeline(weft_embedded_channel(e)), "logic");
  ck_assert_ptr_nonnull(logic);
  weft_ctx_write_and_flush(logic, bytes(e, "z"), WEFT_PROMISE_NONE);
  ck_assert_str_eq(trace_buf, "2:write 2:flush ");
  weft_buf *out = weft_embedded_read_outbound(e);
  ck_assert_ptr_nonnull(out);
  ck_assert_uint_eq(weft_buf_readable(out), 1);
  ck_assert_int_eq(weft_buf_read_u8(out), 'z');
  weft_buf_release(out);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(pipeline_remove_self_during_read_forwards_from_old_place) {
  setup();
  r1.remove_on_read = "decoder"; /* handler 1 removes itself */
  weft_embedded *e = embedded_of(init_three);
  trace_buf[0] = '\0';
  weft_embedded_write_inbound(e, bytes(e, "a"));
  ck_assert_str_eq(trace_buf, "1:read 1:removed 3:read ");
  trace_buf[0] = '\0';
  weft_embedded_write_inbound(e, bytes(e, "b"));
  ck_assert_str_eq(trace_buf, "3:read ");
  weft_msg_release(weft_embedded_read_inbound(e));
  weft_msg_release(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(pipeline_remove_next_during_read_skips_it) {
  setup();
  r1.remove_on_read = "logic"; /* handler 1 removes the one after it */
  weft_embedded *e = embedded_of(init_three);
  trace_buf[0] = '\0';
  weft_embedded_write_inbound(e, bytes(e, "a"));
  ck_assert_str_eq(trace_buf, "1:read 3:removed 1:complete ");
  /* with "logic" gone the message reached the tail */
  weft_buf *b = weft_embedded_read_inbound(e);
  ck_assert_ptr_nonnull(b);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(pipeline_add_during_event_takes_part_in_next_event) {
  setup();
  weft_embedded *e = embedded_of(NULL);
  weft_pipeline *p = weft_channel_pipeline(weft_embedded_channel(e));
  ck_assert_int_eq(weft_pipeline_add_last(p, "a", &inbound_h, &r1), 0);
  ck_assert_int_eq(weft_pipeline_add_first(p, "b", &inbound_h, &r2), 0);
  ck_assert_int_eq(weft_pipeline_add_after(p, "b", "c", &inbound_h, &r3), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "a", &inbound_h, &r1),
                   WEFT_EEXIST);
  ck_assert_int_eq(weft_pipeline_add_before(p, "nope", "d", &inbound_h, &r1),
                   WEFT_ENOENT);
  trace_buf[0] = '\0';
  weft_embedded_write_inbound(e, bytes(e, "a"));
  ck_assert_str_eq(trace_buf, "2:read 3:read 1:read 2:complete 3:complete "
                              "1:complete ");
  ck_assert_int_eq(weft_pipeline_replace(p, "c", "c2", &outbound_h, &r3), 0);
  ck_assert_ptr_null(weft_pipeline_context(p, "c"));
  ck_assert_ptr_nonnull(weft_pipeline_context(p, "c2"));
  weft_msg_release(weft_embedded_read_inbound(e));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- promises and watermarks ---- */

static int promise_status[8];
static int promise_calls;
static void record_promise(void *arg, int status) {
  promise_status[(intptr_t)arg] = status;
  promise_calls++;
}

static bool writability_trace[16];
static int writability_events;
static void on_writability(weft_ctx *ctx, bool writable) {
  writability_trace[writability_events++] = writable;
  weft_ctx_fire_writability_changed(ctx, writable);
}
static const weft_handler writability_h = {
    .name = "w", .writability_changed = on_writability};

static void init_writability(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "w", &writability_h, NULL);
  /* a high watermark below the current low one is refused */
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, 1000),
      WEFT_EINVAL);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_LOW_WATERMARK, 500), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, 1000), 0);
}

static weft_buf *filled(weft_embedded *e, size_t n) {
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), n);
  memset(b->base, 'q', n);
  b->writer_index = n;
  return b;
}

START_TEST(pipeline_watermarks_have_hysteresis) {
  writability_events = 0;
  weft_embedded *e = embedded_of(init_writability);
  weft_channel *ch = weft_embedded_channel(e);
  weft_embedded_set_write_limit(e, 0); /* the "socket" takes nothing */
  weft_channel_write(ch, filled(e, 600), WEFT_PROMISE_NONE);
  ck_assert(weft_channel_is_writable(ch));
  weft_channel_write(ch, filled(e, 600), WEFT_PROMISE_NONE); /* 1200 > 1000 */
  ck_assert(!weft_channel_is_writable(ch));
  ck_assert_int_eq(writability_events, 1);
  ck_assert(!writability_trace[0]);
  weft_channel_flush(ch);
  weft_embedded_set_write_limit(e, 500); /* 700 left: above low, still off */
  ck_assert_uint_eq(weft_channel_pending_bytes(ch), 700);
  ck_assert(!weft_channel_is_writable(ch));
  ck_assert_int_eq(writability_events, 1);
  weft_embedded_set_write_limit(e, 300); /* 400 left: below low */
  ck_assert(weft_channel_is_writable(ch));
  ck_assert_int_eq(writability_events, 2);
  ck_assert(writability_trace[1]);
  weft_embedded_set_write_limit(e, SIZE_MAX);
  ck_assert_uint_eq(weft_channel_pending_bytes(ch), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_LOW_WATERMARK, 5000),
      WEFT_EINVAL);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(pipeline_promises_report_sent_and_closed) {
  promise_calls = 0;
  weft_embedded *e = embedded_of(NULL);
  weft_channel *ch = weft_embedded_channel(e);
  weft_channel_write(ch, bytes(e, "sent"),
                     (weft_promise){record_promise, (void *)0});
  weft_channel_write(ch, bytes(e, "never flushed"),
                     (weft_promise){record_promise, (void *)1});
  ck_assert_int_eq(promise_calls, 0); /* write only queues */
  /* the "socket" takes 4 bytes: the first write only */
  weft_embedded_set_write_limit(e, 4);
  weft_channel_flush(ch);
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[0], 0);
  weft_channel_close(ch, (weft_promise){record_promise, (void *)2});
  ck_assert_int_eq(promise_calls, 3);
  ck_assert_int_eq(promise_status[1], WEFT_ECLOSED);
  ck_assert_int_eq(promise_status[2], 0);
  weft_channel_write(ch, bytes(e, "late"),
                     (weft_promise){record_promise, (void *)3});
  ck_assert_int_eq(promise_calls, 4);
  ck_assert_int_eq(promise_status[3], WEFT_ECLOSED);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* A message that is not a weft_buf must not reach the transport. */
static void free_plain(void *msg) {
  (void)msg;
  promise_calls += 100;
}
static const weft_msg_type plain_type = {"plain", free_plain};

START_TEST(pipeline_head_refuses_non_buffer_message) {
  promise_calls = 0;
  th_log_capture_start();
  weft_embedded *e = embedded_of(NULL);
  weft_msg plain = {&plain_type};
  weft_channel_write_and_flush(weft_embedded_channel(e), &plain,
                               (weft_promise){record_promise, (void *)4});
  ck_assert_int_eq(promise_status[4], WEFT_EINVAL);
  ck_assert_int_eq(promise_calls, 101); /* promise failed, message released */
  ck_assert_int_ge(th_log_count("encoder missing"), 1);
  th_log_capture_stop();
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- file regions where the transport cannot send from a file ---- */

/* A temporary file holding `n` bytes of `c`, unlinked. */
static int temp_file(size_t n, char c) {
  char path[] = "/tmp/weft-pipeline-region-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  char chunk[4096];
  memset(chunk, c, sizeof chunk);
  for (size_t at = 0; at < n; at += sizeof chunk)
    th_write_all(fd, chunk, n - at < sizeof chunk ? n - at : sizeof chunk);
  return fd;
}

static weft_file_region *new_region(int fd, uint64_t pos, uint64_t count,
                                    unsigned flags) {
  weft_file_region *r;
  ck_assert_int_eq(weft_file_region_new(&r, fd, pos, count, flags), 0);
  return r;
}

START_TEST(pipeline_file_region_becomes_buffers_without_the_capability) {
  promise_calls = 0;
  weft_embedded *e = embedded_of(NULL); /* no WEFT_TRANSPORT_CAP_FILE_REGION */
  weft_channel *ch = weft_embedded_channel(e);
  int fd = temp_file(150000, 'r');
  int owned = dup(fd);
  weft_channel_write(ch, new_region(fd, 1, 0, 0), /* empty */
                     (weft_promise){record_promise, (void *)0});
  weft_channel_write(ch,
                     new_region(owned, 1, 149999, WEFT_FILE_REGION_CLOSE_FD),
                     (weft_promise){record_promise, (void *)1});
  /* Read at the write: counted as a buffer of that size would be. */
  ck_assert_uint_eq(weft_channel_pending_bytes(ch), 149999);
  ck_assert(fcntl(owned, F_GETFD) < 0); /* released: its fd closed */
  weft_channel_flush(ch);
  ck_assert_int_eq(promise_calls, 2);
  ck_assert_int_eq(promise_status[0], 0);
  ck_assert_int_eq(promise_status[1], 0);
  size_t n = 0, bufs = 0;
  void *m;
  while ((m = weft_embedded_read_outbound(e)) != NULL) {
    ck_assert(weft_msg_is(m, &weft_buf_msg_type));
    const uint8_t *p = weft_buf_rptr(m);
    for (size_t i = 0; i < weft_buf_readable(m); i++)
      ck_assert_int_eq(p[i], 'r');
    n += weft_buf_readable(m);
    bufs++;
    weft_msg_release(m);
  }
  ck_assert_uint_eq(n, 149999);
  ck_assert_uint_eq(bufs, 1 + 3); /* the empty one, then 64 KiB reads */
  /* Past the file's end (it shrank): WEFT_EIO, the channel closes. */
  weft_channel_write_and_flush(ch, new_region(fd, 100000, 60000, 0),
                               (weft_promise){record_promise, (void *)2});
  ck_assert_int_eq(promise_status[2], WEFT_EIO);
  ck_assert(!weft_channel_is_active(ch));
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_EIO);
  /* Closed: refused, and an owned descriptor still closed. */
  owned = dup(fd);
  weft_channel_write(ch, new_region(owned, 0, 10, WEFT_FILE_REGION_CLOSE_FD),
                     (weft_promise){record_promise, (void *)3});
  ck_assert_int_eq(promise_status[3], WEFT_ECLOSED);
  ck_assert(fcntl(owned, F_GETFD) < 0);
  weft_file_region *r;
  ck_assert_int_eq(weft_file_region_new(&r, -1, 0, 1, 0), WEFT_EINVAL);
  ck_assert_int_eq(weft_file_region_new(&r, fd, INT64_MAX, 2, 0), WEFT_EINVAL);
  ck_assert_int_eq(weft_file_region_new(&r, fd, 0, 1, 0x80), WEFT_EINVAL);
  close(fd);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- exceptions ---- */

static int seen_err;
static void catch_exc(weft_ctx *ctx, int err, const char *reason) {
  seen_err = err;
  ck_assert_str_eq(reason, "bad frame");
  weft_ctx_fire_exception_caught(ctx, err, reason);
}
static void throw_on_read(weft_ctx *ctx, void *msg) {
  weft_msg_release(msg);
  weft_ctx_fire_exception_caught(ctx, WEFT_EBADFRAME, "bad frame");
}
static const weft_handler thrower_h = {.name = "thrower",
                                       .channel_read = throw_on_read};
static const weft_handler catcher_h = {.name = "catcher",
                                       .exception_caught = catch_exc};

static void init_exc(weft_channel *ch, void *arg) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  weft_pipeline_add_last(p, "thrower", &thrower_h, NULL);
  weft_pipeline_add_last(p, "catcher", &catcher_h, NULL);
}

START_TEST(pipeline_exception_reaches_tail_and_closes_channel) {
  seen_err = 0;
  th_log_capture_start();
  weft_embedded *e = embedded_of(init_exc);
  weft_embedded_write_inbound(e, bytes(e, "garbage"));
  ck_assert_int_eq(seen_err, WEFT_EBADFRAME);
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_EBADFRAME);
  ck_assert_int_eq(weft_channel_state_of(weft_embedded_channel(e)),
                   WEFT_CHANNEL_CLOSED);
  ck_assert_int_eq(th_log_count("EBADFRAME"), 1);
  ck_assert_int_eq(weft_embedded_write_inbound(e, bytes(e, "more")),
                   WEFT_ECLOSED);
  th_log_capture_stop();
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* A peer's reset reaching the tail is routine for a server: INFO, not one
 * WARN per client (weft-http logged one per wrk connection); any other
 * error stays a WARN. */
static void reset_on_read(weft_ctx *ctx, void *msg) {
  weft_msg_release(msg);
  weft_ctx_fire_exception_caught(ctx, WEFT_ECONNRESET, "recv");
}
static const weft_handler resetter_h = {.name = "resetter",
                                        .channel_read = reset_on_read};
static void init_reset(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "resetter", &resetter_h,
                         NULL);
}

START_TEST(pipeline_peer_reset_at_the_tail_is_info_not_warn) {
  th_log_capture_start();
  weft_embedded *e = embedded_of(init_reset);
  weft_embedded_write_inbound(e, bytes(e, "x"));
  ck_assert_int_eq(weft_channel_state_of(weft_embedded_channel(e)),
                   WEFT_CHANNEL_CLOSED);
  ck_assert_msg(th_log_count("info: channel") == 1 &&
                    th_log_count("ECONNRESET") == 1 &&
                    th_log_count("warn:") == 0,
                "log:\n%s", th_log_text());
  th_log_capture_stop();
  ck_assert_uint_eq(weft_embedded_free(e), 0);
  /* and an error of the channel's own is still a warning */
  th_log_capture_start();
  e = embedded_of(init_exc);
  weft_embedded_write_inbound(e, bytes(e, "garbage"));
  ck_assert_msg(th_log_count("warn: channel") == 1, "log:\n%s", th_log_text());
  th_log_capture_stop();
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- the tail ---- */

START_TEST(pipeline_tail_releases_unhandled_and_queue_at_close) {
  weft_embedded *e = embedded_of(NULL);
  weft_channel *ch = weft_embedded_channel(e);
  for (int i = 0; i < 10; i++)
    weft_embedded_write_inbound(e, bytes(e, "unhandled"));
  for (int i = 0; i < 10; i++) /* queued, never flushed */
    weft_channel_write(ch, bytes(e, "queued"), WEFT_PROMISE_NONE);
  /* finish() must release all 20 buffers: any one left is a leak */
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(pipeline_leak_is_reported_at_finish) {
  th_log_capture_start();
  weft_embedded *e = embedded_of(NULL);
  weft_buf *kept = bytes(e, "kept");
  weft_buf_retain(kept);
  weft_embedded_write_inbound(e, kept); /* tail holds one, we hold one */
  ck_assert_uint_eq(weft_embedded_free(e), 1);
  ck_assert_int_ge(th_log_count("LEAK"), 1);
  th_log_capture_stop();
}
END_TEST

/* An embedded byte-stream channel (writes may merge) with `init`'s
 * handlers; *e is freed by the test. */
static weft_channel *new_stream(weft_embedded **e, weft_channel_init_cb init) {
  ck_assert_int_eq(weft_embedded_new(e, init, NULL), 0);
  weft_embedded_set_stream(*e, true);
  return weft_embedded_channel(*e);
}

/* On a byte stream, small writes not yet flushed share one buffer; a
 * large one goes as it is; a message channel keeps every write. */
START_TEST(pipeline_small_writes_merge_on_a_stream_only) {
  weft_embedded *e;
  weft_channel *ch = new_stream(&e, NULL);
  promise_calls = 0;
  for (int i = 0; i < 99; i++)
    weft_channel_write(ch, bytes(e, "0123456789abcdef"), WEFT_PROMISE_NONE);
  weft_channel_write(ch, bytes(e, "0123456789ABCDEF"),
                     (weft_promise){record_promise, (void *)0});
  static char big[1000];
  memset(big, 'b', sizeof big);
  big[sizeof big - 1] = '\0';
  weft_channel_write(ch, bytes(e, big), WEFT_PROMISE_NONE);
  weft_channel_write(ch, bytes(e, "tail"), WEFT_PROMISE_NONE);
  ck_assert_uint_eq(weft_channel_pending_bytes(ch), 1600 + 999 + 4);
  ck_assert_int_eq(promise_calls, 0);
  weft_channel_flush(ch);
  weft_buf *m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 1600); /* 100 writes, one buffer */
  ck_assert_int_eq(memcmp(weft_buf_rptr(m) + 1584, "0123456789ABCDEF", 16), 0);
  weft_buf_release(m);
  m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 999); /* too big to copy */
  weft_buf_release(m);
  m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 4); /* "tail" after it */
  weft_buf_release(m);
  ck_assert_ptr_null(weft_embedded_read_outbound(e));
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[0], 0);
  weft_embedded_set_stream(e, false);
  weft_channel_write(ch, bytes(e, "a"), WEFT_PROMISE_NONE);
  weft_channel_write(ch, bytes(e, "b"), WEFT_PROMISE_NONE);
  weft_channel_flush(ch);
  m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 1); /* messages stay apart */
  weft_buf_release(m);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* One 16 B write, as a buffer (weft_channel_write) or as bytes
 * (weft_channel_write_bytes). */
static void write16(weft_embedded *e, bool as_bytes) {
  weft_channel *ch = weft_embedded_channel(e);
  if (as_bytes)
    weft_channel_write_bytes(ch, "0123456789abcdef", 16, WEFT_PROMISE_NONE);
  else
    weft_channel_write(ch, bytes(e, "0123456789abcdef"), WEFT_PROMISE_NONE);
}

/* Merged small writes count against the watermarks write by write: the
 * 63rd 16 B write is the one that crosses 1000 bytes, though all of them
 * share one buffer. Both ways of writing. */
START_TEST(pipeline_watermarks_count_merged_small_writes) {
  for (int as_bytes = 0; as_bytes < 2; as_bytes++) {
    writability_events = 0;
    weft_embedded *e;
    weft_channel *ch = new_stream(&e, init_writability);
    weft_embedded_set_write_limit(e, 0); /* the "socket" takes nothing */
    for (int i = 0; i < 62; i++)         /* 992 bytes: not above 1000 */
      write16(e, as_bytes);
    ck_assert(weft_channel_is_writable(ch));
    write16(e, as_bytes);
    ck_assert_uint_eq(weft_channel_pending_bytes(ch), 1008);
    ck_assert(!weft_channel_is_writable(ch));
    ck_assert_int_eq(writability_events, 1);
    weft_channel_flush(ch);
    weft_embedded_set_write_limit(e, 600); /* 408 left: below low */
    ck_assert(weft_channel_is_writable(ch));
    ck_assert_int_eq(writability_events, 2);
    weft_embedded_set_write_limit(e, SIZE_MAX);
    release_all_outbound(e);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* weft_channel_write_bytes on a stream with no outbound handler: after
 * the first two writes (a buffer of its own, then the queue's own buffer)
 * the rest are copied in without an allocation; the caller's memory is
 * copied, not kept; the last write's promise reports the merged entry. */
START_TEST(pipeline_write_bytes_copies_into_the_tail_without_allocating) {
  weft_embedded *e;
  weft_channel *ch = new_stream(&e, NULL);
  promise_calls = 0;
  char msg[17] = "0123456789abcdef";
  weft_channel_write_bytes(ch, msg, 16, WEFT_PROMISE_NONE);
  weft_channel_write_bytes(ch, msg, 16, WEFT_PROMISE_NONE);
  weft_pool_stats before, after;
  weft_pool_stats_get(weft_embedded_pool(e), &before);
  for (int i = 2; i < 99; i++)
    weft_channel_write_bytes(ch, msg, 16, WEFT_PROMISE_NONE);
  memcpy(msg, "0123456789ABCDEF", 16);
  weft_channel_write_bytes(ch, msg, 16,
                           (weft_promise){record_promise, (void *)0});
  memset(msg, 'x', 16); /* the queue holds a copy */
  weft_pool_stats_get(weft_embedded_pool(e), &after);
  ck_assert_uint_eq(after.allocs, before.allocs);
  ck_assert_uint_eq(weft_channel_pending_bytes(ch), 1600);
  ck_assert_int_eq(promise_calls, 0);
  weft_channel_flush(ch);
  weft_buf *m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 1600);
  ck_assert_int_eq(memcmp(weft_buf_rptr(m), "0123456789abcdef", 16), 0);
  ck_assert_int_eq(memcmp(weft_buf_rptr(m) + 1584, "0123456789ABCDEF", 16), 0);
  weft_buf_release(m);
  ck_assert_ptr_null(weft_embedded_read_outbound(e));
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[0], 0);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* With an outbound handler below the writer, write_bytes hands it a
 * weft_buf holding the bytes, as weft_ctx_write would; large writes and a
 * closed channel take the general path (a buffer; WEFT_ECLOSED). */
START_TEST(pipeline_write_bytes_passes_outbound_handlers) {
  setup();
  weft_embedded *e;
  weft_channel *ch = new_stream(&e, init_three);
  trace_buf[0] = '\0';
  weft_channel_write_bytes(ch, "ab", 2, WEFT_PROMISE_NONE);
  weft_channel_write_bytes(ch, "cd", 2, WEFT_PROMISE_NONE);
  weft_channel_write_bytes(ch, "ef", 2, WEFT_PROMISE_NONE); /* window open */
  ck_assert_str_eq(trace_buf,
                   "3:write 2:write 3:write 2:write 3:write 2:write ");
  static char big[WEFT_WRITE_COALESCE_MAX + 1];
  memset(big, 'b', sizeof big);
  weft_channel_write_bytes(ch, big, sizeof big, WEFT_PROMISE_NONE);
  weft_channel_flush(ch);
  weft_buf *m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), 6); /* merged below the handlers */
  ck_assert_int_eq(memcmp(weft_buf_rptr(m), "abcdef", 6), 0);
  weft_buf_release(m);
  m = weft_embedded_read_outbound(e);
  ck_assert_uint_eq(weft_buf_readable(m), sizeof big);
  weft_buf_release(m);
  promise_calls = 0;
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_write_bytes(ch, "z", 1, (weft_promise){record_promise, NULL});
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[0], WEFT_ECLOSED);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* Every size around the copy's cases (0, 1-7, the two words of 8-16,
 * memcpy above, the 512 B limit and past it), a flush in the middle whose
 * buffer the "socket" still holds, and a callback promise: the bytes come
 * out whole and in order, the flushed buffer does not change under later
 * writes, and the promise completes once its bytes were taken. */
START_TEST(pipeline_write_bytes_keeps_every_byte_in_order) {
  static uint8_t src[600], want[8192], got[8192];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (uint8_t)(i * 7 + 1);
  weft_embedded *e;
  weft_channel *ch = new_stream(&e, NULL);
  promise_calls = 0;
  size_t want_len = 0, got_len = 0, held_len = 0;
  weft_buf *held[8], *m;
  int nheld = 0;
  static const size_t sizes[] = {3,  0,  1,   2,   5,   7,  8,  9, 12, 15, 16,
                                 17, 40, 511, 512, 513, 16, 16, 9, 0,  4};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const uint8_t *d = src + k; /* a different pattern per write */
    weft_promise p =
        k == 17 ? (weft_promise){record_promise, (void *)1} : WEFT_PROMISE_NONE;
    weft_channel_write_bytes(ch, d, sizes[k], p);
    memcpy(want + want_len, d, sizes[k]);
    want_len += sizes[k];
    if (k == 8) { /* flush mid-run and keep what the "socket" took */
      weft_channel_flush(ch);
      while (nheld < 8 && (m = weft_embedded_read_outbound(e)) != NULL) {
        held_len += weft_buf_readable(m);
        held[nheld++] = m;
      }
      ck_assert_uint_eq(held_len, want_len);
    }
  }
  weft_channel_flush(ch);
  /* What was sent before the flush did not change under later writes. */
  for (int i = 0; i < nheld; i++) {
    memcpy(got + got_len, weft_buf_rptr(held[i]), weft_buf_readable(held[i]));
    got_len += weft_buf_readable(held[i]);
    weft_buf_release(held[i]);
  }
  ck_assert_uint_eq(got_len, held_len);
  while ((m = weft_embedded_read_outbound(e)) != NULL) {
    memcpy(got + got_len, weft_buf_rptr(m), weft_buf_readable(m));
    got_len += weft_buf_readable(m);
    weft_buf_release(m);
  }
  ck_assert_uint_eq(got_len, want_len);
  ck_assert_int_eq(memcmp(got, want, want_len), 0);
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[1], 0);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* Past the output limit write_bytes is refused like any write: the
 * promise fails and the channel closes with WEFT_ENOBUFS. */
START_TEST(pipeline_write_bytes_obeys_the_output_limit) {
  weft_embedded *e;
  weft_channel *ch = new_stream(&e, NULL);
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_OUTPUT_LIMIT, 1000), 0);
  weft_embedded_set_write_limit(e, 0); /* the "socket" takes nothing */
  promise_calls = 0;
  th_log_capture_start();
  for (int i = 0; i < 62; i++) /* 992 bytes: within the limit */
    weft_channel_write_bytes(ch, "0123456789abcdef", 16, WEFT_PROMISE_NONE);
  ck_assert(weft_channel_is_active(ch));
  weft_channel_write_bytes(ch, "0123456789abcdef", 16, WEFT_PROMISE_NONE);
  weft_channel_write_bytes(ch, "0123456789abcdef", 16,
                           (weft_promise){record_promise, (void *)2});
  weft_embedded_run_pending(e); /* the close runs as a task */
  th_log_capture_stop();
  ck_assert_int_eq(promise_calls, 1);
  ck_assert_int_eq(promise_status[2], WEFT_ENOBUFS);
  ck_assert(!weft_channel_is_active(ch));
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_ENOBUFS);
  weft_embedded_set_write_limit(e, SIZE_MAX);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* A region read into buffers stops reading at the output limit: the
 * channel closes with WEFT_ENOBUFS, not with megabytes read for nothing. */
START_TEST(pipeline_file_region_read_stops_at_the_output_limit) {
  weft_embedded *e = embedded_of(NULL);
  weft_channel *ch = weft_embedded_channel(e);
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_OUTPUT_LIMIT, 100000),
                   0);
  int fd = temp_file(4000000, 'x');
  weft_file_region_stats before, after;
  weft_file_region_stats_get(&before);
  weft_channel_write(ch, new_region(fd, 0, 4000000, 0),
                     (weft_promise){record_promise, (void *)5});
  weft_file_region_stats_get(&after);
  ck_assert_int_eq(promise_status[5], WEFT_ENOBUFS);
  /* The limit plus the read that crossed it, at most. */
  ck_assert_uint_le(after.read_bytes - before.read_bytes, 100000 + 65536);
  weft_embedded_run_pending(e); /* the close runs as a task */
  ck_assert(!weft_channel_is_active(ch));
  ck_assert_int_eq(weft_embedded_exception(e, 0), WEFT_ENOBUFS);
  close(fd);
  release_all_outbound(e);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("pipeline", "embedded", 0,
                  pipeline_event_order_matches_netty_example,
                  pipeline_ctx_write_starts_below_its_handler,
                  pipeline_remove_self_during_read_forwards_from_old_place,
                  pipeline_remove_next_during_read_skips_it,
                  pipeline_add_during_event_takes_part_in_next_event,
                  pipeline_watermarks_have_hysteresis,
                  pipeline_promises_report_sent_and_closed,
                  pipeline_head_refuses_non_buffer_message,
                  pipeline_file_region_becomes_buffers_without_the_capability,
                  pipeline_file_region_read_stops_at_the_output_limit,
                  pipeline_exception_reaches_tail_and_closes_channel,
                  pipeline_peer_reset_at_the_tail_is_info_not_warn,
                  pipeline_tail_releases_unhandled_and_queue_at_close,
                  pipeline_small_writes_merge_on_a_stream_only,
                  pipeline_watermarks_count_merged_small_writes,
                  pipeline_write_bytes_copies_into_the_tail_without_allocating,
                  pipeline_write_bytes_passes_outbound_handlers,
                  pipeline_write_bytes_keeps_every_byte_in_order,
                  pipeline_write_bytes_obeys_the_output_limit,
                  pipeline_leak_is_reported_at_finish, NULL);
}
