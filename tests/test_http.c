/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP/1.1 server codec on the embedded channel: every message form at
 * any split, responses in request order, framing rules, and every limit
 * and smuggling rule with its status code (the hostile cases). */
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

#include "codec_util.h"

static weft_http_server_options opts;

/* The application: answers each request at its end marker with its
 * target as the body (unless `hold`), and counts what it saw. */
typedef struct app {
  bool hold; /* do not answer */
  size_t heads, ends, body_bytes;
  char body[4096];
  weft_http_request *last; /* the last head, kept */
} app;

static app the_app;

static void app_read(weft_ctx *ctx, void *msg) {
  app *a = &the_app;
  if (weft_msg_is(msg, &weft_http_request_type)) {
    a->heads++;
    weft_msg_release(a->last);
    a->last = msg;
    return;
  }
  if (weft_msg_is(msg, &weft_buf_msg_type)) {
    weft_buf *b = msg;
    size_t n = weft_buf_readable(b);
    ck_assert_uint_le(a->body_bytes + n, sizeof a->body);
    memcpy(a->body + a->body_bytes, weft_buf_rptr(b), n);
    a->body_bytes += n;
    weft_buf_release(b);
    return;
  }
  ck_assert(weft_msg_is(msg, &weft_http_end_type));
  a->ends++;
  weft_msg_release(msg);
  if (!a->hold)
    ck_assert_int_eq(weft_http_respond(ctx, 200, "text/plain",
                                       a->last->target.ptr,
                                       a->last->target.len),
                     0);
}

static void app_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static const weft_handler app_handler = {.name = "app",
                                         .channel_read = app_read,
                                         .channel_read_complete =
                                             app_read_complete};

/* The codec, then the handler `arg` (a const weft_handler *) if any. */
static void init_codec(weft_channel *ch, void *arg) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_http_server_codec_add_last(p, "http", &opts), 0);
  if (arg != NULL)
    ck_assert_int_eq(weft_pipeline_add_last(p, "app", arg, NULL), 0);
}

static void setup(void) {
  weft_http_server_options_init(&opts);
  opts.server = NULL;
  memset(&the_app, 0, sizeof the_app);
}

static void teardown(void) {
  weft_msg_release(the_app.last);
  the_app.last = NULL;
}

/* Frees the channel after the head the application kept (whose slices hold
 * the received memory); returns the leaked buffers. */
static size_t free_server(weft_embedded *e) {
  weft_msg_release(the_app.last);
  the_app.last = NULL;
  return weft_embedded_free(e);
}

/* A byte-stream embedded channel with the codec and `handler` (or none). */
static weft_embedded *new_server(const weft_handler *handler) {
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_codec, (void *)handler), 0);
  weft_embedded_set_stream(e, true);
  return e;
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

static bool str_eq(weft_http_str s, const char *c) {
  return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* Feeds `wire` whole; the answer must say "Connection: close" and the
 * channel must have closed after it. Returns the answer. */
static char *expect_close(weft_embedded *e, const char *wire) {
  feed(e, wire, strlen(wire), FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "Connection: close\r\n"));
  ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
  return out;
}

START_TEST(http_requests_decode_at_any_split) {
  static const char wire[] =
      "GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-Long:  v  v \r\n\r\n"
      "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
      "PUT /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
      "HEAD /h HTTP/1.0\r\n\r\n";
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = new_server(NULL);
    feed(e, wire, sizeof wire - 1, mode, 7u + (unsigned)mode);
    weft_http_request *r = weft_embedded_read_inbound(e);
    ck_assert(weft_msg_is(r, &weft_http_request_type));
    ck_assert_int_eq(r->method, WEFT_HTTP_GET);
    ck_assert(str_eq(r->method_name, "GET"));
    ck_assert(str_eq(r->target, "/a?b=c"));
    ck_assert_uint_eq(r->version_minor, 1);
    ck_assert(r->keep_alive);
    ck_assert_uint_eq(r->nheaders, 2);
    ck_assert(str_eq(r->headers[1].name, "X-Long"));
    ck_assert(str_eq(r->headers[1].value, "v  v"));
    ck_assert(str_eq(weft_http_request_header(r, "x-long"), "v  v"));
    ck_assert_ptr_null(weft_http_request_header(r, "nope").ptr);
    weft_msg_release(r);
    ck_assert(weft_msg_is(weft_embedded_read_inbound(e), &weft_http_end_type));
    /* Bodies: slices, in order, then the end marker. */
    const char *bodies[] = {"hello", "abcde"};
    for (int i = 0; i < 2; i++) {
      r = weft_embedded_read_inbound(e);
      ck_assert(weft_msg_is(r, &weft_http_request_type));
      ck_assert(r->chunked == (i == 1));
      ck_assert_int_eq(r->content_length, i == 0 ? 5 : -1);
      weft_msg_release(r);
      expect_http_body(e, bodies[i]);
    }
    r = weft_embedded_read_inbound(e);
    ck_assert_int_eq(r->method, WEFT_HTTP_HEAD);
    ck_assert_uint_eq(r->version_minor, 0);
    ck_assert(!r->keep_alive);
    /* A header slice outlives its request. */
    weft_buf *kept = weft_http_slice_buf(r, r->target);
    weft_msg_release(r);
    ck_assert_mem_eq(weft_buf_rptr(kept), "/h", 2);
    weft_buf_release(kept);
    ck_assert(weft_msg_is(weft_embedded_read_inbound(e), &weft_http_end_type));
    expect_drained_free(e);
  }
}
END_TEST

/* Pipelined requests in one read: the responses leave in request order,
 * HEAD's without its body but with its length. */
START_TEST(http_pipelined_responses_in_request_order) {
  weft_embedded *e = new_server(&app_handler);
  static const char wire[] = "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                             "HEAD /22 HTTP/1.1\r\nHost: x\r\n\r\n"
                             "POST /333 HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 2\r\n\r\nok"
                             "GET /4444 HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, wire, sizeof wire - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_uint_eq(count(out, "HTTP/1.1 200 OK\r\n"), 4);
  char *p1 = strstr(out, "\r\n\r\n/1");
  char *p2 = strstr(out, "Content-Length: 3\r\n");
  char *p3 = strstr(out, "\r\n\r\n/333");
  char *p4 = strstr(out, "\r\n\r\n/4444");
  ck_assert(p1 && p2 && p3 && p4 && p1 < p2 && p2 < p3 && p3 < p4);
  ck_assert_ptr_null(strstr(out, "/22")); /* HEAD: no body */
  ck_assert_uint_eq(count(out, "Date: "), 4);
  ck_assert_uint_eq(count(out, "Content-Type: text/plain\r\n"), 4);
  ck_assert_uint_eq(count(out, "Connection:"), 0);
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* A handler that streams: a head without a length, chunks, the end. */
static void stream_read(weft_ctx *ctx, void *msg) {
  bool end = weft_msg_is(msg, &weft_http_end_type);
  weft_msg_release(msg);
  if (!end)
    return;
  weft_http_response *r = weft_http_response_new(200);
  ck_assert_int_eq(weft_http_response_add_header(r, "X-A", "1"), 0);
  ck_assert_int_eq(weft_http_response_add_header(r, "X-B", "a\r\nX-C: 1"),
                   WEFT_EINVAL);
  weft_ctx_write(ctx, r, WEFT_PROMISE_NONE);
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  for (int i = 0; i < 2; i++) {
    weft_buf *b = weft_buf_alloc(pool, 64);
    weft_buf_write_bytes(b, i == 0 ? "hello " : "world, 0123456789",
                         i ? 17 : 6);
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
  }
  weft_ctx_write(ctx, weft_http_end(), WEFT_PROMISE_NONE);
  weft_ctx_flush(ctx);
}

static const weft_handler stream_handler = {.name = "stream",
                                            .channel_read = stream_read};

START_TEST(http_chunked_response_and_http10_close_delimited) {
  weft_embedded *e = new_server(&stream_handler);
  static const char req11[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, req11, sizeof req11 - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "X-A: 1\r\nTransfer-Encoding: chunked\r\n"
                                    "\r\n6\r\nhello \r\n11\r\nworld, "
                                    "0123456789\r\n0\r\n\r\n"));
  ck_assert_ptr_null(strstr(out, "X-B"));
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  /* HTTP/1.0 without keep-alive: no chunked framing, the close ends it. */
  static const char req10[] = "GET / HTTP/1.0\r\n\r\n";
  feed(e, req10, sizeof req10 - 1, FEED_WHOLE, 1);
  out = outbound_text(e);
  ck_assert_ptr_null(strstr(out, "chunked"));
  ck_assert_ptr_nonnull(strstr(out, "Connection: close\r\n\r\nhello world"));
  ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* A handler that sends a file region as the body: chunked framing (no
 * length given) on the first request, and nothing for a HEAD. */
static int region_fd = -1;

static void region_read(weft_ctx *ctx, void *msg) {
  bool end = weft_msg_is(msg, &weft_http_end_type);
  weft_msg_release(msg);
  if (!end)
    return;
  weft_ctx_write(ctx, weft_http_response_new(200), WEFT_PROMISE_NONE);
  weft_file_region *r;
  ck_assert_int_eq(weft_file_region_new(&r, region_fd, 2, 12, 0), 0);
  weft_ctx_write(ctx, r, WEFT_PROMISE_NONE);
  weft_ctx_write(ctx, weft_http_end(), WEFT_PROMISE_NONE);
  weft_ctx_flush(ctx);
}

static const weft_handler region_handler = {.name = "region",
                                            .channel_read = region_read};

START_TEST(http_file_region_body_is_framed) {
  char path[] = "/tmp/weft-http-region-XXXXXX";
  region_fd = mkstemp(path);
  ck_assert_int_ge(region_fd, 0);
  unlink(path);
  th_write_all(region_fd, "..hello region..", 16);
  weft_embedded *e = new_server(&region_handler);
  static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, get, sizeof get - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  /* The codec framed the region's 12 bytes (0xc); the embedded channel's
   * transport cannot send from a file, so they were read into a buffer. */
  ck_assert_ptr_nonnull(strstr(out, "Transfer-Encoding: chunked\r\n\r\n"
                                    "c\r\nhello region\r\n0\r\n\r\n"));
  static const char head[] = "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, head, sizeof head - 1, FEED_WHOLE, 1);
  out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "HTTP/1.1 200 OK\r\n"));
  ck_assert_ptr_null(strstr(out, "hello")); /* HEAD: the region dropped */
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  ck_assert_uint_eq(free_server(e), 0);
  close(region_fd);
}
END_TEST

START_TEST(http_connection_close_and_http10_keep_alive) {
  weft_embedded *e = new_server(&app_handler);
  static const char ka[] = "GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  feed(e, ka, sizeof ka - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "Connection: keep-alive\r\n"));
  ck_assert_ptr_nonnull(strstr(out, "Content-Length: 2\r\n"));
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  /* Connection: close: answered, then closed; what follows is ignored. */
  out = expect_close(e, "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        "\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(out, "Connection: close\r\n\r\n/c"));
  ck_assert_ptr_null(strstr(out, "/after"));
  ck_assert_uint_eq(the_app.heads, 2);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* weft does not switch protocols: a request asking to (curl --http2 sends
 * "Upgrade: h2c") is answered in HTTP/1.1 and the next request is served
 * (it was dropped, the connection left open); CONNECT is answered, then
 * the connection closes (nothing is tunnelled). */
START_TEST(http_upgrade_is_ignored_and_connect_closes) {
  weft_embedded *e = new_server(&app_handler);
  static const char up[] = "GET /u HTTP/1.1\r\nHost: x\r\n"
                           "Connection: Upgrade, HTTP2-Settings\r\n"
                           "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAA"
                           "\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, up, sizeof up - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "\r\n\r\n/u"));
  ck_assert_ptr_nonnull(strstr(out, "\r\n\r\n/next"));
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  expect_close(e, "CONNECT example.com:443 HTTP/1.1\r\n"
                  "Host: example.com:443\r\n\r\ntunnel");
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

START_TEST(http_expect_continue_before_the_body) {
  weft_embedded *e = new_server(&app_handler);
  static const char head[] =
      "PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
      "Expect: 100-continue\r\n\r\n";
  feed(e, head, sizeof head - 1, FEED_BYTES, 1);
  ck_assert_uint_eq(the_app.heads, 1);
  ck_assert(the_app.last->expect_continue);
  ck_assert_str_eq(outbound_text(e), "HTTP/1.1 100 Continue\r\n\r\n");
  feed(e, "data", 4, FEED_WHOLE, 1);
  ck_assert_uint_eq(the_app.body_bytes, 4);
  ck_assert_ptr_nonnull(strstr(outbound_text(e), "HTTP/1.1 200 OK\r\n"));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* Past max_pipelined unanswered requests the codec stops reading; each
 * response lets one more in. */
START_TEST(http_pipelining_bounded_by_max_pipelined) {
  opts.max_pipelined = 2;
  the_app.hold = true;
  weft_embedded *e = new_server(&app_handler);
  static const char one[] = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n";
  char wire[5 * sizeof one];
  for (int i = 0; i < 5; i++)
    memcpy(wire + i * (sizeof one - 1), one, sizeof one - 1);
  feed(e, wire, 5 * (sizeof one - 1), FEED_WHOLE, 1);
  ck_assert_uint_eq(the_app.heads, 2);
  ck_assert(!weft_channel_is_reading(weft_embedded_channel(e)));
  weft_ctx *ctx = weft_pipeline_context(
      weft_channel_pipeline(weft_embedded_channel(e)), "app");
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(weft_http_respond(ctx, 204, NULL, NULL, 0), 0);
    weft_ctx_flush(ctx);
    weft_embedded_run_pending(e); /* reading resumes */
  }
  ck_assert_uint_eq(the_app.heads, 5);
  ck_assert_uint_eq(count(outbound_text(e), "HTTP/1.1 204 No Content\r\n"), 3);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

static void init_flow(weft_channel *ch, void *arg) {
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_FLOW_CONTROL, 1), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_LOW_WATERMARK, 100), 0);
  ck_assert_int_eq(
      weft_channel_set_option(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, 1000), 0);
  init_codec(ch, arg);
}

/* A client that pipelines 50 requests in one read and reads no response:
 * the codec stops decoding once the responses are above the high
 * watermark (about 1000 bytes of them, not 50), and goes on, in order,
 * as they leave. */
START_TEST(http_flow_control_pauses_pipelined_requests) {
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_flow, (void *)&app_handler), 0);
  weft_embedded_set_stream(e, true);
  weft_embedded_set_write_limit(e, 0);
  static char wire[50 * 40];
  size_t n = 0;
  for (int i = 0; i < 50; i++)
    n += (size_t)snprintf(wire + n, sizeof wire - n,
                          "GET /%02d HTTP/1.1\r\nHost: x\r\n\r\n", i);
  feed(e, wire, n, FEED_WHOLE, 1);
  ck_assert_uint_gt(the_app.heads, 1);
  ck_assert_uint_lt(the_app.heads, 20);
  weft_channel *ch = weft_embedded_channel(e);
  ck_assert(!weft_channel_is_reading(ch));
  static char all[65536];
  size_t len = 0;
  for (int round = 0; round < 100 && the_app.heads < 50; round++) {
    weft_embedded_set_write_limit(e, SIZE_MAX);
    weft_channel_flush(ch);
    weft_embedded_run_pending(e); /* reading resumes: decoding goes on */
    weft_embedded_set_write_limit(e, 0);
    len += drain_outbound(e, (uint8_t *)all + len, sizeof all - 1 - len);
  }
  weft_embedded_set_write_limit(e, SIZE_MAX);
  weft_channel_flush(ch);
  len += drain_outbound(e, (uint8_t *)all + len, sizeof all - 1 - len);
  all[len] = '\0';
  ck_assert_uint_eq(the_app.heads, 50);
  ck_assert_uint_eq(count(all, "HTTP/1.1 200 OK\r\n"), 50);
  char *prev = all;
  for (int i = 0; i < 50; i++) { /* in request order */
    char body[8];
    snprintf(body, sizeof body, "\r\n\r\n/%02d", i);
    char *at = strstr(prev, body);
    ck_assert_msg(at != NULL, "response %d missing or out of order", i);
    prev = at;
  }
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* Two bodiless requests in one read, the first one's response alone above
 * the high watermark (its body is its 1100-byte target): flow control
 * stops decoding after the first, but the second, whose head is already
 * out, still gets its end marker (it was held back with no byte left to
 * decode, so nothing resumed it: weft-http over verbs waited forever for
 * its last pipelined request). Decoding stops between messages, never
 * between a head and its end. */
START_TEST(http_flow_control_stops_between_messages_only) {
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, init_flow, (void *)&app_handler), 0);
  weft_embedded_set_stream(e, true);
  weft_embedded_set_write_limit(e, 0);
  static char wire[1200], target[1101];
  memset(target, 'a', sizeof target - 1);
  int n = snprintf(wire, sizeof wire,
                   "GET /%s HTTP/1.1\r\nHost: x\r\n\r\n"
                   "GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
                   target);
  ck_assert_int_lt(n, (int)sizeof wire);
  feed(e, wire, (size_t)n, FEED_WHOLE, 1);
  weft_channel *ch = weft_embedded_channel(e);
  ck_assert(!weft_channel_is_reading(ch));
  weft_embedded_set_write_limit(e, SIZE_MAX);
  weft_channel_flush(ch);
  weft_embedded_run_pending(e); /* reading resumes */
  ck_assert_uint_eq(the_app.heads, 2);
  ck_assert_uint_eq(the_app.ends, 2);
  char *out = outbound_text(e);
  ck_assert_uint_eq(count(out, "HTTP/1.1 200 OK\r\n"), 2);
  ck_assert_ptr_nonnull(strstr(out, "\r\n\r\n/b"));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* One hostile request: the status it gets, and the close. */
typedef struct hostile {
  const char *name, *wire;
  int status;
  size_t heads; /* requests the application still sees */
} hostile;

static const hostile cases[] = {
    {"request line too long",
     "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n",
     414, 0},
    {"head too long",
     "GET / HTTP/1.1\r\nHost: x\r\nX: bbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
     "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n\r"
     "\n",
     431, 0},
    {"too many headers",
     "GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\n\r\n", 431,
     0},
    {"body too long",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", 413, 0},
    {"chunked body too long",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     "6\r\n123456\r\n6\r\n123456\r\n0\r\n\r\n",
     413, 1},
    {"CL and TE",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
     400, 0},
    {"TE and CL",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     "Content-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
     400, 0},
    {"duplicate CL",
     "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     "Content-Length: 3\r\n\r\nabc",
     400, 0},
    {"CL list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc",
     400, 0},
    {"malformed CL", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3x\r\n\r\n",
     400, 0},
    {"negative CL", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
     400, 0},
    {"TE not chunked",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip"
     "\r\n\r\nabc",
     400, 0},
    {"TE chunked then gzip",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
     "chunked, gzip\r\n\r\n",
     400, 0},
    {"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n", 400, 0},
    {"bare LF", "GET / HTTP/1.1\nHost: x\n\n", 400, 0},
    {"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, 0},
    {"no Host", "GET / HTTP/1.1\r\n\r\n", 400, 0},
    {"two Hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, 0},
    {"HTTP/0.9", "GET /\r\n\r\n", 505, 0},
    {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, 0},
    {"bad method", "G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, 0},
    {"bad chunk size",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
     "chunked\r\n\r\nzz\r\n",
     400, 1},
    {"trailer section too long",
     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
     "T1: ccccccccccccccccccccccccccccccccccccccc\r\n"
     "T2: ccccccccccccccccccccccccccccccccccccccc\r\n\r\n",
     431, 1},
    {"NUL in a value", "GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n", 400, 0},
};

START_TEST(http_hostile_requests_get_their_status_and_close) {
  const hostile *c = &cases[_i];
  opts.max_head_bytes = 80;
  opts.max_headers = 4;
  opts.max_body = 10;
  size_t len = strlen(c->wire);
  if (strcmp(c->name, "NUL in a value") == 0)
    len = 29;
  for (int mode = 0; mode < FEED_MODES; mode++) {
    memset(&the_app, 0, sizeof the_app);
    /* A good request first: the refusal follows its response. */
    weft_embedded *e = new_server(&app_handler);
    static const char good[] = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
    th_log_capture_start();
    feed(e, good, sizeof good - 1, FEED_WHOLE, 1);
    feed(e, c->wire, len, mode, 3u + (unsigned)mode);
    th_log_capture_stop();
    char *out = outbound_text(e);
    char want[64];
    snprintf(want, sizeof want, "HTTP/1.1 %d %s\r\n", c->status,
             weft_http_reason(c->status));
    ck_assert_msg(strstr(out, want) != NULL, "%s (mode %d): got %s", c->name,
                  mode, out);
    ck_assert_ptr_nonnull(strstr(out, "\r\n\r\n/ok"));
    ck_assert_ptr_nonnull(strstr(out, "Connection: close\r\n"));
    /* A request refused in its body reaches the application when its
     * head came in an earlier read, not when the refusal came with it. */
    ck_assert_uint_ge(the_app.heads, 1);
    ck_assert_uint_le(the_app.heads, 1 + c->heads);
    want[strlen(want) - 2] = '\0'; /* the log line has no CRLF */
    ck_assert_msg(th_log_count(want + 9) == 1, "%s: log %s", c->name,
                  th_log_text());
    ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
    ck_assert_uint_eq(free_server(e), 0);
  }
}
END_TEST

/* Runs the timers until the channel closes (a timeout fired). */
static void wait_closed(weft_embedded *e) {
  WAIT_FOR((weft_embedded_run_pending(e),
            !weft_channel_is_active(weft_embedded_channel(e))));
}

/* Waits past a timeout of 1 ms (any more that the machine takes only
 * makes a timer that is wrongly armed surer to fire), runs the timers,
 * and checks that none answered 408 or closed the channel. Returns what
 * was flushed since the last outbound_text() (drained). */
static char *expect_no_timeout(weft_embedded *e) {
  th_sleep_ms(5);
  weft_embedded_run_pending(e);
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  char *out = outbound_text(e);
  ck_assert_ptr_null(strstr(out, "408"));
  return out;
}

/* A request whose body stops after 3 of its 10 bytes. */
static const char stalled_post[] =
    "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";

/* Slowloris: a head not complete in header_timeout_ms gets 408. */
START_TEST(http_slow_head_gets_408) {
  opts.header_timeout_ms = 1;
  weft_embedded *e = new_server(&app_handler);
  static const char part[] = "GET / HTTP/1.1\r\nHo";
  th_log_capture_start();
  feed(e, part, sizeof part - 1, FEED_WHOLE, 1);
  wait_closed(e);
  th_log_capture_stop();
  ck_assert_ptr_nonnull(
      strstr(outbound_text(e), "HTTP/1.1 408 Request Timeout\r\n"));
  ck_assert_int_eq(th_log_count("408"), 1);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* A head that arrives whole leaves no timer behind: the connection stays
 * open past the timeout while its response is pending or after it. */
START_TEST(http_complete_head_stops_the_timer) {
  opts.header_timeout_ms = 1;
  weft_embedded *e = new_server(&app_handler);
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  feed(e, req, sizeof req - 1, FEED_WHOLE, 1);
  expect_no_timeout(e);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* A body that stops, 3 of its 10 bytes in, gets 408 body_timeout_ms
 * after its last read, and the channel closes. */
START_TEST(http_stalled_body_gets_408) {
  opts.body_timeout_ms = 1;
  weft_embedded *e = new_server(&app_handler);
  th_log_capture_start();
  feed(e, stalled_post, sizeof stalled_post - 1, FEED_WHOLE, 1);
  wait_closed(e);
  th_log_capture_stop();
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "HTTP/1.1 408 Request Timeout\r\n"));
  ck_assert_ptr_nonnull(strstr(out, "Connection: close\r\n"));
  ck_assert_int_eq(th_log_count("408 Request Timeout: no request body bytes "
                                "within 1 ms"),
                   1);
  ck_assert_uint_eq(the_app.heads, 1);
  ck_assert_uint_eq(the_app.body_bytes, 3);
  ck_assert_uint_eq(the_app.ends, 0);
  ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* The timeout is between two reads of the body, not for the whole body
 * (nginx's client_body_timeout): a body sent a byte at a time, each
 * within the timeout, is not timed out though it takes several timeouts.
 * Timers run only in weft_embedded_run_pending(), so each gap is measured
 * from before a byte's feed to after the timers ran; an attempt in which
 * the machine stalled one gap past the timeout proves nothing and is
 * retried on a new connection. */
START_TEST(http_slow_body_is_timed_per_read_not_whole) {
  enum { TIMEOUT_MS = 400, BYTES = 12 };
  const uint64_t timeout_ns = TIMEOUT_MS * 1000000ull;
  opts.body_timeout_ms = TIMEOUT_MS;
  static const char head[] =
      "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n";
  for (int attempt = 0; attempt < 10; attempt++) {
    memset(&the_app, 0, sizeof the_app);
    weft_embedded *e = new_server(&app_handler);
    weft_channel *ch = weft_embedded_channel(e);
    uint64_t start = weft_now_ns(), fed = start;
    feed(e, head, sizeof head - 1, FEED_WHOLE, 1);
    bool stalled = false;
    for (int i = 0; i < BYTES && !stalled; i++) {
      do { /* a quarter of the timeout, the timers running */
        weft_embedded_run_pending(e);
        th_sleep_ms(1);
      } while (weft_now_ns() - fed < timeout_ns / 4);
      weft_embedded_run_pending(e);
      stalled = weft_now_ns() - fed >= timeout_ns;
      if (!stalled) {
        ck_assert_msg(weft_channel_is_active(ch),
                      "timed out after byte %d, %" PRIu64 " ms into the body",
                      i, (weft_now_ns() - start) / 1000000);
        fed = weft_now_ns();
        feed(e, "b", 1, FEED_WHOLE, 1);
      }
    }
    if (!stalled) {
      ck_assert_uint_ge(weft_now_ns() - start, 2 * timeout_ns);
      ck_assert_uint_eq(the_app.body_bytes, BYTES);
      ck_assert_uint_eq(the_app.ends, 1);
      char *out = outbound_text(e);
      ck_assert_ptr_nonnull(strstr(out, "HTTP/1.1 200 OK\r\n"));
      ck_assert_ptr_null(strstr(out, "408"));
      ck_assert(weft_channel_is_active(ch));
    }
    ck_assert_uint_eq(free_server(e), 0);
    if (!stalled)
      return;
  }
  th_skip(__func__, "the machine stalled past %d ms in each of 10 attempts",
          TIMEOUT_MS);
}
END_TEST

/* body_timeout_ms = 0: a body that stops is never timed out. */
START_TEST(http_body_timeout_zero_never_fires) {
  opts.body_timeout_ms = 0;
  weft_embedded *e = new_server(&app_handler);
  feed(e, stalled_post, sizeof stalled_post - 1, FEED_WHOLE, 1);
  expect_no_timeout(e);
  ck_assert_uint_eq(the_app.body_bytes, 3);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* Requests without a body (GET, Content-Length: 0) and one whose body
 * came whole leave no body timeout behind: answered, the connection stays
 * open past it (a stray timeout would answer 408 and close). */
START_TEST(http_no_body_no_body_timeout) {
  opts.body_timeout_ms = 1;
  weft_embedded *e = new_server(&app_handler);
  static const char wire[] =
      "GET /g HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
      "POST /w HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nwhole";
  feed(e, wire, sizeof wire - 1, FEED_WHOLE, 1);
  ck_assert_uint_eq(the_app.ends, 3);
  ck_assert_uint_eq(count(expect_no_timeout(e), "HTTP/1.1 200 OK\r\n"), 3);
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* While the server itself does not read (auto-read off, as an
 * application or flow control turns it), a stalled body is not timed
 * out; once reading resumes it is. */
START_TEST(http_body_timeout_waits_while_reading_is_paused) {
  opts.body_timeout_ms = 1;
  weft_embedded *e = new_server(&app_handler);
  weft_channel *ch = weft_embedded_channel(e);
  feed(e, stalled_post, sizeof stalled_post - 1, FEED_WHOLE, 1);
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0), 0);
  for (int i = 0; i < 3; i++) /* deadlines pass while paused */
    expect_no_timeout(e);
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 1), 0);
  wait_closed(e);
  ck_assert_ptr_nonnull(
      strstr(outbound_text(e), "HTTP/1.1 408 Request Timeout\r\n"));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* "Expect: 100-continue" behind an unanswered request: its body is not
 * asked for, and not timed out, until its 100 Continue is sent. */
START_TEST(http_body_timeout_starts_at_the_100_continue) {
  opts.body_timeout_ms = 1;
  the_app.hold = true;
  weft_embedded *e = new_server(&app_handler);
  weft_channel *ch = weft_embedded_channel(e);
  static const char wire[] =
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
      "PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
      "Expect: 100-continue\r\n\r\n";
  feed(e, wire, sizeof wire - 1, FEED_WHOLE, 1);
  ck_assert_ptr_null(strstr(expect_no_timeout(e), "100 Continue"));
  weft_ctx *ctx = weft_pipeline_context(weft_channel_pipeline(ch), "app");
  ck_assert_int_eq(weft_http_respond(ctx, 204, NULL, NULL, 0), 0);
  weft_ctx_flush(ctx);
  wait_closed(e);
  char *out = outbound_text(e);
  ck_assert_ptr_nonnull(strstr(out, "HTTP/1.1 100 Continue\r\n"));
  ck_assert_ptr_nonnull(strstr(out, "HTTP/1.1 408 Request Timeout\r\n"));
  ck_assert_uint_eq(free_server(e), 0);
}
END_TEST

/* A handler that answers at the head, before the end marker. */
static void head_answer_read(weft_ctx *ctx, void *msg) {
  bool head = weft_msg_is(msg, &weft_http_request_type);
  weft_msg_release(msg);
  if (head) {
    ck_assert_int_eq(weft_http_respond(ctx, 200, NULL, "early", 5), 0);
    weft_ctx_flush(ctx);
  }
}

static const weft_handler head_answer_handler = {
    .name = "early", .channel_read = head_answer_read};

/* A bodiless request answered at its head keeps the connection (it was
 * closed as if its body were still coming); one with a body answered
 * before the body ends closes it, with "Connection: close". */
START_TEST(http_answer_at_the_head) {
  weft_embedded *e = new_server(&head_answer_handler);
  static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 2; i++)
    feed(e, get, sizeof get - 1, FEED_WHOLE, 1);
  char *out = outbound_text(e);
  ck_assert_uint_eq(count(out, "HTTP/1.1 200 OK\r\n"), 2);
  ck_assert_ptr_null(strstr(out, "Connection: close"));
  ck_assert(weft_channel_is_active(weft_embedded_channel(e)));
  expect_close(e, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab");
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

START_TEST(http_response_builders) {
  ck_assert_str_eq(weft_http_reason(431), "Request Header Fields Too Large");
  ck_assert_str_eq(weft_http_reason(799), "");
  weft_http_response *r = weft_http_response_new(200);
  char name[300];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  for (int i = 0; i < 4; i++) /* past the inline space */
    ck_assert_int_eq(weft_http_response_add_header(r, name, "v"), 0);
  ck_assert_uint_eq(r->fields.len, 4 * (299 + 5));
  ck_assert_int_eq(weft_http_response_add_header(r, "", "v"), WEFT_EINVAL);
  ck_assert_int_eq(weft_http_response_add_header(r, "a:b", "v"), WEFT_EINVAL);
  ck_assert_int_eq(weft_http_response_add_header(r, "a", "v\n"), WEFT_EINVAL);
  weft_msg_release(r);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("http");
  TCase *tc =
      th_add_case(s, "server_codec", 0, http_requests_decode_at_any_split,
                  http_pipelined_responses_in_request_order,
                  http_chunked_response_and_http10_close_delimited,
                  http_file_region_body_is_framed,
                  http_connection_close_and_http10_keep_alive,
                  http_upgrade_is_ignored_and_connect_closes,
                  http_expect_continue_before_the_body,
                  http_pipelining_bounded_by_max_pipelined,
                  http_flow_control_pauses_pipelined_requests,
                  http_flow_control_stops_between_messages_only, NULL);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, http_hostile_requests_get_their_status_and_close, 0,
                      (int)(sizeof cases / sizeof cases[0]));
  th_add_tests(tc, http_slow_head_gets_408, http_complete_head_stops_the_timer,
               http_stalled_body_gets_408,
               http_slow_body_is_timed_per_read_not_whole,
               http_body_timeout_zero_never_fires, http_no_body_no_body_timeout,
               http_body_timeout_waits_while_reading_is_paused,
               http_body_timeout_starts_at_the_100_continue,
               http_answer_at_the_head, http_response_builders, NULL);
  return s;
}
