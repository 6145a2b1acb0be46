/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP/1.1 client codec and the aggregator on embedded channels:
 * request encoding, response decoding at any split (HEAD, chunked, 1xx,
 * bodies read to the close), the errors, a client and a server codec
 * talking through their bytes, and aggregation with its limit. */
#include "harness.h"

#include "codec_util.h"

static weft_http_client_options copts;
static size_t aggregate; /* max_content, or 0 for no aggregator */

static void init_client(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_http_client_codec_add_last(p, "http", &copts), 0);
  if (aggregate)
    ck_assert_int_eq(weft_http_aggregator_add_last(p, "agg", aggregate), 0);
}

static void setup(void) {
  weft_http_client_options_init(&copts);
  aggregate = 0;
}

static weft_embedded *new_client(void) {
  weft_embedded *e = embedded_of(init_client);
  weft_embedded_set_stream(e, true);
  return e;
}

static void send_request(weft_embedded *e, const char *method,
                         const char *target, const char *body,
                         int64_t content_length) {
  weft_http_client_request *q =
      weft_http_client_request_new(method, target, "example");
  ck_assert_ptr_nonnull(q);
  if (body != NULL) {
    q->body = weft_buf_alloc(weft_embedded_pool(e), strlen(body) + 1);
    weft_buf_write_bytes(q->body, body, strlen(body));
  }
  q->content_length = content_length;
  weft_channel_write_and_flush(weft_embedded_channel(e), q, WEFT_PROMISE_NONE);
}

START_TEST(http_client_requests_encode) {
  weft_embedded *e = new_client();
  weft_channel *ch = weft_embedded_channel(e);
  send_request(e, "GET", "/a?b", NULL, 0);
  ck_assert_str_eq(outbound_text(e),
                   "GET /a?b HTTP/1.1\r\nHost: example\r\n\r\n");
  send_request(e, "POST", "/p", "hello", 0);
  ck_assert_str_eq(outbound_text(e), "POST /p HTTP/1.1\r\nHost: example\r\n"
                                     "Content-Length: 5\r\n\r\nhello");
  send_request(e, "PUT", "/c", NULL, -1);
  for (int i = 0; i < 2; i++) {
    weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), 16);
    weft_buf_write_bytes(b, "0123456789abcdef", 16);
    weft_channel_write(ch, b, WEFT_PROMISE_NONE);
  }
  weft_channel_write_and_flush(ch, weft_http_end(), WEFT_PROMISE_NONE);
  ck_assert_str_eq(outbound_text(e),
                   "PUT /c HTTP/1.1\r\nHost: example\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef"
                   "\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
  /* Request splitting is refused where the request is built. */
  ck_assert_ptr_null(weft_http_client_request_new("GET", "/a b", NULL));
  ck_assert_ptr_null(weft_http_client_request_new("GET", "/a\r\nX: 1", NULL));
  ck_assert_ptr_null(weft_http_client_request_new("G T", "/", NULL));
  ck_assert_ptr_null(weft_http_client_request_new("GET", "/", "h\r\nX: 1"));
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* Collects one response: its head, its body (which must be `want`), its
 * end; returns the head. */
static weft_http_response_head *read_response(weft_embedded *e,
                                              const char *want) {
  weft_http_response_head *r = weft_embedded_read_inbound(e);
  ck_assert_msg(weft_msg_is(r, &weft_http_response_head_type), "got %s",
                weft_msg_type_name(r));
  expect_http_body(e, want);
  return r;
}

START_TEST(http_client_responses_decode_at_any_split) {
  static const char wire[] =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b \r\n\r\nhello"
      "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n" /* HEAD: no body */
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
      "HTTP/1.1 204 No Content\r\n\r\n"
      "HTTP/1.0 200 OK\r\n\r\nto the close";
  const char *methods[] = {"GET", "HEAD", "POST", "GET", "GET"};
  for (int mode = 0; mode < FEED_MODES; mode++) {
    weft_embedded *e = new_client();
    for (int i = 0; i < 5; i++)
      send_request(e, methods[i], "/", NULL, 0);
    outbound_text(e);
    feed(e, wire, sizeof wire - 1, mode, 11u + (unsigned)mode);
    weft_http_response_head *r = read_response(e, "hello");
    ck_assert_int_eq(r->status, 200);
    ck_assert(weft_http_str_equals(r->reason, "OK"));
    ck_assert(
        weft_http_str_equals(weft_http_response_head_header(r, "x-a"), "b"));
    ck_assert(r->keep_alive);
    weft_msg_release(r);
    r = read_response(e, "");
    ck_assert_int_eq(r->content_length, 0);
    weft_msg_release(r);
    r = read_response(e, "abcde"); /* 100 was dropped */
    ck_assert_int_eq(r->status, 201);
    ck_assert(r->chunked);
    weft_msg_release(r);
    r = read_response(e, "");
    ck_assert_int_eq(r->status, 204);
    weft_msg_release(r);
    /* The last one runs to the close: its end comes with the close. */
    r = weft_embedded_read_inbound(e);
    ck_assert(weft_msg_is(r, &weft_http_response_head_type));
    ck_assert(!r->keep_alive);
    ck_assert_int_eq(r->content_length, -1);
    weft_msg_release(r);
    char body[64];
    size_t len;
    len = drain_frames(e, (uint8_t *)body, sizeof body, &len) ? len : 0;
    ck_assert_uint_eq(len, 12);
    weft_channel_close(weft_embedded_channel(e), WEFT_PROMISE_NONE);
    ck_assert(weft_msg_is(weft_embedded_read_inbound(e), &weft_http_end_type));
    ck_assert_int_eq(weft_embedded_exception(e, 0), 0);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* Bad responses close the channel with an error, not the process. */
START_TEST(http_client_bad_responses_are_errors) {
  static const struct {
    const char *wire;
    int err;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\n\r\n", WEFT_EBADFRAME}, /* no request sent */
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       WEFT_EBADFRAME},
      {"HTTP/1.1 200 OK\r\nX: "
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaaaaaaaaa\r\n\r\n",
       WEFT_ETOOLONG},
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", WEFT_ETOOLONG},
      {"HTTP/1.1 2000 OK\r\n\r\n", WEFT_EBADFRAME},
  };
  copts.max_head_bytes = 64;
  copts.max_body = 10;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weft_embedded *e = new_client();
    if (i > 0)
      send_request(e, "GET", "/", NULL, 0);
    outbound_text(e);
    th_log_capture_start();
    feed(e, cases[i].wire, strlen(cases[i].wire), FEED_WHOLE, 1);
    th_log_capture_stop();
    ck_assert_msg(weft_embedded_exception(e, 0) == cases[i].err, "case %zu: %d",
                  i, weft_embedded_exception(e, 0));
    ck_assert(!weft_channel_is_active(weft_embedded_channel(e)));
    void *m;
    while ((m = weft_embedded_read_inbound(e)) != NULL)
      weft_msg_release(m);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* ---- a client and a server through their bytes ---- */

static void echo_server_read(weft_ctx *ctx, void *msg) {
  if (!weft_msg_is(msg, &weft_http_full_type)) {
    weft_msg_release(msg);
    return;
  }
  weft_http_full *f = msg;
  weft_http_request *req = f->head;
  char text[256];
  int n = snprintf(text, sizeof text, "%.*s %zu", (int)req->target.len,
                   req->target.ptr, f->body ? weft_buf_readable(f->body) : 0);
  weft_http_respond(ctx, 200, "text/plain", text, (size_t)n);
  weft_msg_release(f);
}

static void echo_server_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void init_server(weft_channel *ch, void *arg) {
  static const weft_handler h = {.name = "echo",
                                 .channel_read = echo_server_read,
                                 .channel_read_complete = echo_server_complete};
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_http_server_codec_add_last(p, "http", NULL), 0);
  ck_assert_int_eq(weft_http_aggregator_add_last(p, "agg", 1000), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "echo", &h, NULL), 0);
}

/* Runs what the client wrote through a server made for it (one embedded
 * channel is the thread's loop at a time: the server is made after the
 * client and freed before the client reads again) and feeds the answer
 * back. Returns whether the server closed the connection. */
static bool serve(weft_embedded *client) {
  static uint8_t wire[65536];
  size_t n = drain_outbound(client, wire, sizeof wire);
  weft_embedded *server = embedded_of(init_server);
  weft_embedded_set_stream(server, true);
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(server, wire, n), 0);
  n = drain_outbound(server, wire, sizeof wire);
  bool closed = !weft_channel_is_active(weft_embedded_channel(server));
  ck_assert_uint_eq(weft_embedded_free(server), 0);
  ck_assert_int_eq(weft_embedded_write_inbound_bytes(client, wire, n), 0);
  return closed;
}

START_TEST(http_client_and_server_talk_pipelined) {
  aggregate = 4096;
  weft_embedded *client = new_client();
  send_request(client, "GET", "/one", NULL, 0);
  send_request(client, "POST", "/two", "0123456789", 0);
  send_request(client, "PUT", "/three", NULL, -1);
  weft_channel *ch = weft_embedded_channel(client);
  for (int i = 0; i < 3; i++) {
    weft_buf *b = weft_buf_alloc(weft_embedded_pool(client), 8);
    weft_buf_write_bytes(b, "abcdefgh", 8);
    weft_channel_write(ch, b, WEFT_PROMISE_NONE);
  }
  weft_channel_write_and_flush(ch, weft_http_end(), WEFT_PROMISE_NONE);
  send_request(client, "HEAD", "/four", NULL, 0);
  ck_assert(!serve(client));
  const char *want[] = {"/one 0", "/two 10", "/three 24", ""};
  for (int i = 0; i < 4; i++) {
    weft_http_full *f = weft_embedded_read_inbound(client);
    ck_assert_msg(weft_msg_is(f, &weft_http_full_type), "%d: %s", i,
                  weft_msg_type_name(f));
    size_t n = f->body ? weft_buf_readable(f->body) : 0;
    ck_assert_uint_eq(n, strlen(want[i]));
    ck_assert_mem_eq(n ? weft_buf_rptr(f->body) : (uint8_t *)"", want[i], n);
    ck_assert_int_eq(((weft_http_response_head *)f->head)->status, 200);
    weft_msg_release(f);
  }
  /* Above the aggregator's limit: 413, and the server closes. */
  send_request(client, "POST", "/big", NULL, 2000);
  ck_assert(serve(client));
  weft_http_full *f = weft_embedded_read_inbound(client);
  ck_assert(weft_msg_is(f, &weft_http_full_type));
  ck_assert_int_eq(((weft_http_response_head *)f->head)->status, 413);
  ck_assert(!((weft_http_response_head *)f->head)->keep_alive);
  weft_msg_release(f);
  ck_assert_uint_eq(weft_embedded_free(client), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite_fixture("http_client", "client_codec", setup, NULL,
                          http_client_requests_encode,
                          http_client_responses_decode_at_any_split,
                          http_client_bad_responses_are_errors,
                          http_client_and_server_talk_pipelined, NULL);
}
