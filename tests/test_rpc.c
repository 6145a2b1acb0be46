/* SPDX-License-Identifier: Apache-2.0 */
/* The RPC codec, server and client on embedded channels: round trips at
 * any split, malformed and oversized input, pipelined out-of-order replies,
 * timeouts, close with requests pending, replies from another thread. */
#include "harness.h"

#include <pthread.h>
#include <time.h>

#include "codec_util.h"

#define MAX_BYTES (128 * 1024)

static weft_buf *payload_of(weft_pool *pool, const void *data, size_t len) {
  weft_buf *b = weft_buf_alloc(pool, len > 0 ? len : 1);
  ck_assert_ptr_nonnull(b);
  weft_buf_write_bytes(b, data, len);
  return b;
}

static void init_codec(weft_channel *ch, void *arg) {
  ck_assert_int_eq(
      weft_rpc_codec_add_last(weft_channel_pipeline(ch), "rpc", arg), 0);
}

/* Message i: type, ids and a payload of i * 97 % 3000 bytes. */
static size_t msg_len(int i) { return (size_t)(i * 97 % 3000); }

static void *make_msg(weft_pool *pool, int i) {
  static uint8_t data[3000];
  for (size_t j = 0; j < msg_len(i); j++)
    data[j] = (uint8_t)(i + j);
  weft_buf *p = msg_len(i) > 0 ? payload_of(pool, data, msg_len(i)) : NULL;
  return weft_rpc_msg_new((weft_rpc_type)(1 + i % 4), (uint16_t)(i * 3),
                          (uint64_t)i << 33 | 5, -i, p);
}

static void check_msg(const weft_rpc_msg *m, int i) {
  ck_assert_uint_eq(m->type, 1 + i % 4);
  ck_assert_uint_eq(m->method, (uint16_t)(i * 3));
  ck_assert_uint_eq(m->request_id, (uint64_t)i << 33 | 5);
  ck_assert_int_eq(m->status, -i);
  ck_assert_uint_eq(weft_rpc_payload_len(m), msg_len(i));
  for (size_t j = 0; j < msg_len(i); j++)
    ck_assert_uint_eq(weft_buf_rptr(m->payload)[j], (uint8_t)(i + j));
}

/* ---- codec ---- */

/* Writes messages through the codec's encoder and returns the wire bytes:
 * small payloads copied, large ones gathered behind a header buffer. */
static size_t encode_through_pipeline(uint8_t *wire, int n) {
  return encode_all(init_codec, make_msg, n, wire, MAX_BYTES);
}

/* check_msg on a message the decoder passed on, which must be an RPC one. */
static void check_decoded(void *msg, int i) {
  ck_assert(weft_msg_is(msg, &weft_rpc_msg_type));
  check_msg(msg, i);
}

START_TEST(rpc_codec_round_trips_any_split) {
  static uint8_t wire[MAX_BYTES];
  const int n = 30;
  size_t len = encode_through_pipeline(wire, n);
  decode_all_at_any_split(init_codec, wire, len, n, 99u, check_decoded);
}
END_TEST

START_TEST(rpc_encode_matches_documented_layout) {
  weft_pool *pool;
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  weft_rpc_msg *m =
      weft_rpc_msg_new(WEFT_RPC_REQUEST, 0x0102, 0x0102030405060708ull, -2,
                       payload_of(pool, "hi", 2));
  weft_buf *b;
  ck_assert_int_eq(weft_rpc_encode(pool, m, &b), 0);
  const uint8_t want[] = {1, 1, 1, 2, 0xff, 0xff, 0xff, 0xfe, 1, 2,   3,
                          4, 5, 6, 7, 8,    0,    0,    0,    2, 'h', 'i'};
  ck_assert_uint_eq(weft_buf_readable(b), sizeof want);
  ck_assert_mem_eq(weft_buf_rptr(b), want, sizeof want);
  /* Decoding the contiguous buffer slices the payload out of it. */
  weft_rpc_msg *d;
  const char *reason = NULL;
  ck_assert_int_eq(weft_rpc_decode(b, 16, &d, NULL, &reason), 1);
  ck_assert_ptr_eq(weft_buf_rptr(d->payload), weft_buf_rptr(b) - 2);
  weft_rpc_msg_release(d);
  weft_buf_release(b);
  weft_rpc_msg_release(m);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* Header bytes: bad version, bad type, 4 GiB - 1 payload. */
START_TEST(rpc_codec_refuses_malformed_and_oversized_headers) {
  static const struct {
    uint8_t hdr[WEFT_RPC_HEADER_BYTES];
    int err;
  } cases[] = {
      {{9, 1}, WEFT_EBADFRAME},
      {{1, 7}, WEFT_EBADFRAME},
      {{1, 1, [16] = 0xff, 0xff, 0xff, 0xff}, WEFT_ETOOLONG},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    weft_embedded *e = embedded_of(init_codec);
    weft_pool_stats before, after;
    weft_pool_stats_get(weft_embedded_pool(e), &before);
    th_log_capture_start();
    feed(e, cases[c].hdr, sizeof cases[c].hdr, FEED_BYTES, 0);
    th_log_capture_stop();
    weft_pool_stats_get(weft_embedded_pool(e), &after);
    ck_assert_int_eq(weft_embedded_exception(e, 0), cases[c].err);
    ck_assert_int_eq(th_log_count("rpc decoder"), 1);
    ck_assert_uint_eq(after.unpooled, before.unpooled);
    ck_assert_int_eq(weft_channel_is_active(weft_embedded_channel(e)), 0);
    ck_assert_uint_eq(weft_embedded_free(e), 0);
  }
}
END_TEST

/* ---- server and client ---- */

typedef struct rpc_pair {
  weft_embedded *client_ch, *server_ch;
  weft_rpc_client *client;
} rpc_pair;

static weft_rpc_call *deferred[8];
static size_t n_deferred;

static void echo(weft_rpc_call *call, weft_rpc_msg *req, void *arg) {
  (void)arg;
  weft_buf *p = req->payload;
  req->payload = NULL;
  weft_rpc_msg_release(req);
  ck_assert_int_eq(weft_rpc_reply(call, 7, p), 0);
}

static void defer(weft_rpc_call *call, weft_rpc_msg *req, void *arg) {
  (void)arg;
  weft_rpc_msg_release(req);
  ck_assert_uint_lt(n_deferred, 8);
  deferred[n_deferred++] = call;
}

static void *reply_thread(void *arg);

static void threaded(weft_rpc_call *call, weft_rpc_msg *req, void *arg) {
  (void)arg;
  weft_rpc_msg_release(req);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, reply_thread, call), 0);
  pthread_detach(t);
}

static const weft_rpc_method methods[] = {
    {1, echo, NULL}, {2, defer, NULL}, {3, threaded, NULL}};

/* One embedded channel plays both ends (an embedded loop is the thread's
 * current loop, so a second one on the same thread would not be): the
 * client's requests leave through the codec and come back in, the server
 * answers requests and passes responses on to the client. */
static void init_loopback(weft_channel *ch, void *arg) {
  rpc_pair *pair = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_rpc_codec_add_last(p, "rpc", NULL), 0);
  ck_assert_int_eq(weft_rpc_server_add_last(p, "server", methods, 3), 0);
  ck_assert_int_eq(weft_rpc_client_add_last(p, "client", NULL, &pair->client),
                   0);
}

static void pair_new(rpc_pair *pair) {
  n_deferred = 0;
  ck_assert_int_eq(weft_embedded_new(&pair->client_ch, init_loopback, pair), 0);
  pair->server_ch = pair->client_ch;
  ck_assert_ptr_eq(
      weft_rpc_client_get(weft_embedded_channel(pair->client_ch), "client"),
      pair->client);
}

/* Feeds what the channel wrote back into it until it is quiet. */
static void pump(rpc_pair *pair) {
  void *m;
  while ((m = weft_embedded_read_outbound(pair->client_ch)) != NULL)
    weft_embedded_write_inbound(pair->client_ch, m);
}

static void pair_finish(rpc_pair *pair) {
  ck_assert_uint_eq(weft_embedded_free(pair->client_ch), 0);
}

typedef struct outcome {
  int calls;
  int err;
  int32_t status;
  char payload[32];
} outcome;

static void on_reply(void *arg, int err, weft_rpc_msg *reply) {
  outcome *o = arg;
  o->calls++;
  o->err = err;
  if (reply != NULL) {
    o->status = reply->status;
    size_t n = weft_rpc_payload_len(reply);
    ck_assert_uint_lt(n, sizeof o->payload);
    if (n > 0)
      memcpy(o->payload, weft_buf_rptr(reply->payload), n);
    o->payload[n] = '\0';
    weft_rpc_msg_release(reply);
  }
}

static weft_buf *text(rpc_pair *pair, const char *s) {
  return payload_of(weft_embedded_pool(pair->client_ch), s, strlen(s));
}

START_TEST(rpc_call_gets_reply) {
  rpc_pair pair;
  pair_new(&pair);
  outcome o = {0};
  ck_assert_int_gt(weft_rpc_client_call(pair.client, 1, text(&pair, "ping"), 0,
                                        on_reply, &o),
                   0);
  ck_assert_uint_eq(weft_rpc_client_pending(pair.client), 1);
  pump(&pair);
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, 0);
  ck_assert_int_eq(o.status, 7);
  ck_assert_str_eq(o.payload, "ping");
  ck_assert_uint_eq(weft_rpc_client_pending(pair.client), 0);
  pair_finish(&pair);
}
END_TEST

START_TEST(rpc_pipelined_replies_out_of_order_match_requests) {
  rpc_pair pair;
  pair_new(&pair);
  outcome o[4] = {0};
  const char *names[4] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    weft_rpc_client_call(pair.client, 2, NULL, 0, on_reply, &o[i]);
  pump(&pair);
  ck_assert_uint_eq(n_deferred, 4);
  /* Reply last first, each with the name of its request. */
  for (int i = 3; i >= 0; i--) {
    uint64_t id = weft_rpc_call_request_id(deferred[i]);
    ck_assert_uint_eq(id, (uint64_t)i + 1);
    weft_rpc_reply(deferred[i], i,
                   payload_of(weft_embedded_pool(pair.server_ch), names[i], 1));
  }
  pump(&pair);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(o[i].calls, 1);
    ck_assert_int_eq(o[i].status, i);
    ck_assert_str_eq(o[i].payload, names[i]);
  }
  pair_finish(&pair);
}
END_TEST

/* Runs the client's loop until `o` completed; fails after ~10 s. */
static void wait_outcome(rpc_pair *pair, outcome *o) {
  for (int i = 0; i < 10000 && o->calls == 0; i++) {
    weft_embedded_run_pending(pair->client_ch);
    if (o->calls == 0)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  ck_assert_int_eq(o->calls, 1);
}

START_TEST(rpc_call_times_out_and_late_reply_is_dropped) {
  rpc_pair pair;
  pair_new(&pair);
  outcome slow = {0}, patient = {0};
  weft_rpc_client_call(pair.client, 2, NULL, 1000, on_reply, &slow);
  weft_rpc_client_call(pair.client, 2, NULL, 3600ull * 1000000000, on_reply,
                       &patient);
  pump(&pair);
  wait_outcome(&pair, &slow);
  ck_assert_int_eq(slow.err, WEFT_ETIMEDOUT);
  ck_assert_int_eq(patient.calls, 0);
  ck_assert_uint_eq(weft_rpc_client_pending(pair.client), 1);
  /* The late reply finds no pending entry: dropped, nothing leaks. */
  weft_rpc_reply(deferred[0], 0, NULL);
  weft_rpc_reply(deferred[1], 0, NULL);
  pump(&pair);
  ck_assert_int_eq(slow.calls, 1);
  ck_assert_int_eq(patient.calls, 1);
  ck_assert_int_eq(patient.err, 0);
  pair_finish(&pair);
}
END_TEST

static rpc_pair *closing_pair;
static void close_on_reply(void *arg, int err, weft_rpc_msg *reply) {
  on_reply(arg, err, reply);
  weft_channel_close(weft_embedded_channel(closing_pair->client_ch),
                     WEFT_PROMISE_NONE);
}

START_TEST(rpc_close_fails_every_pending_request) {
  rpc_pair pair;
  pair_new(&pair);
  closing_pair = &pair;
  outcome first = {0}, o[3] = {0};
  weft_rpc_client_call(pair.client, 2, NULL, 0, close_on_reply, &first);
  for (int i = 0; i < 3; i++)
    weft_rpc_client_call(pair.client, 2, NULL, 1000000000, on_reply, &o[i]);
  pump(&pair);
  ck_assert_uint_eq(n_deferred, 4);
  /* The first reply's callback closes the channel from inside channel_read. */
  weft_rpc_reply(deferred[0], 0, NULL);
  pump(&pair);
  ck_assert_int_eq(first.calls, 1);
  ck_assert_int_eq(first.err, 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(o[i].calls, 1);
    ck_assert_int_eq(o[i].err, WEFT_ECLOSED);
  }
  for (int i = 1; i < 4; i++) /* the calls kept the channel alive */
    ck_assert_int_eq(weft_rpc_reply(deferred[i], 0, NULL), WEFT_ECLOSED);
  pump(&pair);
  ck_assert_int_eq(o[0].calls, 1);
  pair_finish(&pair);
}
END_TEST

START_TEST(rpc_unknown_method_answers_enosys) {
  rpc_pair pair;
  pair_new(&pair);
  outcome o = {0};
  weft_rpc_client_call(pair.client, 999, text(&pair, "x"), 0, on_reply, &o);
  pump(&pair);
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, WEFT_ENOSYS);
  ck_assert_int_eq(weft_rpc_client_send(pair.client, 1, text(&pair, "y")), 0);
  pump(&pair); /* one-way: the echo's answer is dropped */
  ck_assert_ptr_null(weft_embedded_read_inbound(pair.client_ch));
  pair_finish(&pair);
}
END_TEST

static void reply_task(void *arg) {
  weft_rpc_call *call = arg;
  weft_buf *p = weft_buf_alloc(weft_loop_pool(weft_rpc_call_loop(call)), 8);
  weft_buf_write_bytes(p, "thread", 6);
  weft_rpc_reply(call, 0, p);
}

static void *reply_thread(void *arg) {
  weft_rpc_call *call = arg;
  ck_assert_int_eq(
      weft_loop_execute(weft_rpc_call_loop(call), reply_task, call), 0);
  return NULL;
}

START_TEST(rpc_reply_from_another_thread_through_the_loop) {
  rpc_pair pair;
  pair_new(&pair);
  outcome o = {0};
  weft_rpc_client_call(pair.client, 3, NULL, 0, on_reply, &o);
  pump(&pair);
  for (int i = 0; i < 10000 && o.calls == 0; i++) {
    weft_embedded_run_pending(pair.server_ch);
    pump(&pair);
    if (o.calls == 0)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  ck_assert_int_eq(o.calls, 1);
  ck_assert_str_eq(o.payload, "thread");
  pair_finish(&pair);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("rpc");
  th_add_case(s, "codec", 0, rpc_codec_round_trips_any_split,
              rpc_encode_matches_documented_layout,
              rpc_codec_refuses_malformed_and_oversized_headers, NULL);
  th_add_case(s, "client_server", 0, rpc_call_gets_reply,
              rpc_pipelined_replies_out_of_order_match_requests,
              rpc_call_times_out_and_late_reply_is_dropped,
              rpc_close_fails_every_pending_request,
              rpc_unknown_method_answers_enosys,
              rpc_reply_from_another_thread_through_the_loop, NULL);
  return s;
}
