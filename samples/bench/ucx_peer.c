/* SPDX-License-Identifier: Apache-2.0 */
/* weft-ucx-peer: a UCX active-message ping-pong with no framework, set up
 * the way weft's ucx transport sets UCX up, as the in-run peer that says
 * how much of weft's round trip is UCX's own.
 *
 *   weft-ucx-peer [-n ROUND_TRIPS] [-p PORT]
 *
 * What it shares with transports/ucx: one ucp_context with AM and WAKEUP
 * (mt_workers_shared), one single-threaded worker per side, a sockaddr
 * listener and a client-server ep over UCX's connection manager, the error
 * mode from WEFT_TRANSPORT_UCX_ERROR_MODE (peer unless "none"), 16 B of data
 * behind a 12 B header (sizeof ucx_hdr) with UCP_AM_FLAG_WHOLE_MSG, and a
 * reply sent after ucp_worker_progress returned, never from inside the AM
 * callback. What it leaves out is weft: no loop, selector, pipeline,
 * buffers or flow control. ucx_perftest differs from both: no WAKEUP and an
 * out-of-band address exchange instead of the connection manager.
 *
 * Server and client are two threads of this process, pinned to CPU 1 and
 * CPU 0 like weft-bench's; both spin on ucp_worker_progress. After 2000
 * warm-up round trips every round trip is timed with CLOCK_MONOTONIC. Output
 * is one line of key=value pairs (samples/bench/scripts/bench-ucx.sh reads
 * p50_us):
 *
 *   mode=ucx-peer size=16 p50_us=... p99_us=...
 *
 * UCX_* variables (UCX_TLS, ...) apply as for weft. Exit status 0, or 1
 * with a message on stderr when UCX fails.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "bench_util.h"

#define AM_ID 0x77u
#define HEADER_SIZE 12u /* sizeof(ucx_hdr) in transports/ucx */
#define DATA_SIZE 16u
#define WARMUP 2000

typedef struct side {
  ucp_worker_h worker;
  ucp_ep_h ep;
  unsigned received; /* AM callbacks so far (this side's thread only) */
  ucp_conn_request_h conn_request;
} side;

static ucp_context_h context;
static side server, client;
static atomic_bool stop;
static bool err_mode_none;

static void die(const char *what, ucs_status_t st) {
  fprintf(stderr, "weft-ucx-peer: %s: %s\n", what, ucs_status_string(st));
  exit(1);
}

/* Copies the data out, as weft does with eager data it may not keep. */
static ucs_status_t am_recv(void *arg, const void *header, size_t header_len,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
  side *s = arg;
  uint8_t copy[DATA_SIZE];
  (void)header;
  (void)header_len;
  (void)param;
  memcpy(copy, data, len < sizeof copy ? len : sizeof copy);
  __asm__ volatile("" : : "r"(copy) : "memory"); /* keep the copy */
  s->received++;
  return UCS_OK;
}

static void on_conn_request(ucp_conn_request_h req, void *arg) {
  ((side *)arg)->conn_request = req;
}

static void send_done(void *request, ucs_status_t status, void *user_data) {
  (void)status;
  (void)user_data;
  ucp_request_free(request);
}

static void send_one(side *s) {
  static const uint8_t header[HEADER_SIZE], data[DATA_SIZE];
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                               .cb.send = send_done};
  ucs_status_ptr_t req = ucp_am_send_nbx(s->ep, AM_ID, header, sizeof header,
                                         data, sizeof data, &param);
  if (UCS_PTR_IS_ERR(req))
    die("ucp_am_send_nbx", UCS_PTR_STATUS(req));
}

static void worker_new(side *s) {
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  ucs_status_t st = ucp_worker_create(context, &wp, &s->worker);
  if (st != UCS_OK)
    die("ucp_worker_create", st);
  ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                             UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                                             UCP_AM_HANDLER_PARAM_FIELD_CB |
                                             UCP_AM_HANDLER_PARAM_FIELD_ARG,
                               .id = AM_ID,
                               .flags = UCP_AM_FLAG_WHOLE_MSG,
                               .cb = am_recv,
                               .arg = s};
  st = ucp_worker_set_am_recv_handler(s->worker, &hp);
  if (st != UCS_OK)
    die("ucp_worker_set_am_recv_handler", st);
}

static ucp_err_handling_mode_t err_mode(void) {
  return err_mode_none ? UCP_ERR_HANDLING_MODE_NONE
                       : UCP_ERR_HANDLING_MODE_PEER;
}

/* Listener on the server's worker, ep from the client's, and the server's
 * ep from the connection request: both workers progressed by this thread. */
static void connect_sides(uint16_t port) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ucp_listener_params_t lp = {
      .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
      .sockaddr = {.addr = (struct sockaddr *)&sin, .addrlen = sizeof sin},
      .conn_handler = {.cb = on_conn_request, .arg = &server}};
  ucp_listener_h listener;
  ucs_status_t st = ucp_listener_create(server.worker, &lp, &listener);
  if (st != UCS_OK)
    die("ucp_listener_create", st);
  ucp_ep_params_t cp = {
      .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
      .sockaddr = {.addr = (struct sockaddr *)&sin, .addrlen = sizeof sin},
      .err_mode = err_mode()};
  st = ucp_ep_create(client.worker, &cp, &client.ep);
  if (st != UCS_OK)
    die("ucp_ep_create (client)", st);
  while (server.conn_request == NULL) {
    ucp_worker_progress(server.worker);
    ucp_worker_progress(client.worker);
  }
  ucp_ep_params_t sp = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                        .conn_request = server.conn_request,
                        .err_mode = err_mode()};
  st = ucp_ep_create(server.worker, &sp, &server.ep);
  if (st != UCS_OK)
    die("ucp_ep_create (server)", st);
  ucp_listener_destroy(listener);
}

/* One round trip driven by this thread alone (wire-up and warm-up). */
static void round_trip_single_thread(void) {
  unsigned want = client.received + 1;
  send_one(&client);
  while (client.received != want) {
    unsigned seen = server.received;
    ucp_worker_progress(server.worker);
    if (server.received != seen)
      send_one(&server);
    ucp_worker_progress(client.worker);
  }
}

/* The server thread: a reply for every message, sent after progress. */
static void *server_main(void *arg) {
  (void)arg;
  bench_pin_self(1);
  unsigned seen = server.received;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    ucp_worker_progress(server.worker);
    for (; seen != server.received; seen++)
      send_one(&server);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int n = 20000, opt;
  uint16_t port = 13777;
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  while ((opt = getopt_long(argc, argv, "n:p:h", longs, NULL)) != -1) {
    if (opt == 'h') {
      printf("usage: weft-ucx-peer [-n ROUND_TRIPS] [-p PORT]\n\n"
             "A UCX active-message ping-pong set up as weft sets UCX up, "
             "without weft:\nthe peer weft's ucx transport is measured "
             "against. UCX_TLS and\nWEFT_TRANSPORT_UCX_ERROR_MODE=none|peer "
             "from the environment.\n\nExamples:\n"
             "  UCX_TLS=tcp weft-ucx-peer -n 20000\n"
             "  UCX_TLS=shm,tcp WEFT_TRANSPORT_UCX_ERROR_MODE=none "
             "weft-ucx-peer -p 13800\n");
      return 0;
    }
    if (opt == 'n')
      n = atoi(optarg);
    else if (opt == 'p')
      port = (uint16_t)atoi(optarg);
    else {
      fprintf(stderr, "usage: weft-ucx-peer [-n ROUND_TRIPS] [-p PORT]\n");
      return 2;
    }
  }
  if (n < 1)
    n = 1;
  const char *mode = getenv("WEFT_TRANSPORT_UCX_ERROR_MODE");
  err_mode_none = mode != NULL && strcmp(mode, "none") == 0;

  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES |
                                       UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                         .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                         .mt_workers_shared = 1};
  ucs_status_t st = ucp_init(&params, NULL, &context);
  if (st != UCS_OK)
    die("ucp_init", st);
  worker_new(&server);
  worker_new(&client);
  connect_sides(port);
  for (int i = 0; i < WARMUP; i++)
    round_trip_single_thread();

  pthread_t thread;
  if (pthread_create(&thread, NULL, server_main, NULL) != 0) {
    perror("weft-ucx-peer: pthread_create");
    return 1;
  }
  bench_pin_self(0);
  uint64_t *rtt = malloc((size_t)n * sizeof *rtt);
  if (rtt == NULL) {
    perror("weft-ucx-peer: malloc");
    return 1;
  }
  for (int i = 0; i < n; i++) {
    uint64_t t0 = bench_now_ns();
    unsigned want = client.received + 1;
    send_one(&client);
    while (client.received != want)
      ucp_worker_progress(client.worker);
    rtt[i] = bench_now_ns() - t0;
  }
  atomic_store(&stop, true);
  pthread_join(thread, NULL);
  qsort(rtt, (size_t)n, sizeof *rtt, bench_cmp_u64);
  printf("mode=ucx-peer size=%u p50_us=%.2f p99_us=%.2f\n", DATA_SIZE,
         (double)rtt[n / 2] / 1000.0,
         (double)rtt[(size_t)n * 99 / 100] / 1000.0);
  free(rtt);
  /* The eps and workers go with the process: a flush-mode close of eps
   * whose peer thread stopped progressing would wait for nothing. */
  return 0;
}
