/* SPDX-License-Identifier: Apache-2.0 */
/* Codec microbenchmark: RPC encode+decode ns per message against a memcpy
 * of the same bytes (the peer), and frames/s through an embedded pipeline
 * (length-field decoder + RPC codec) against a pipeline that only releases
 * the received buffers. Median of several interleaved runs.
 *
 * Usage: weft-codec-bench [runs] [payload_bytes]   (default 7, 64)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#define MSGS 200000
#define FRAMES_PER_READ 64

static volatile uint64_t sink;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* ns per message: encode into a pool buffer, decode it (payload slice). */
static double run_rpc(weft_pool *pool, size_t payload) {
  weft_buf *p = weft_buf_alloc(pool, payload);
  memset(weft_buf_wptr(p), 'x', payload);
  p->writer_index = payload;
  weft_rpc_msg *m = weft_rpc_msg_new(WEFT_RPC_REQUEST, 1, 0, 0, p);
  uint64_t t0 = weft_now_ns();
  for (int i = 0; i < MSGS; i++) {
    m->request_id = (uint64_t)i;
    weft_buf *wire;
    if (weft_rpc_encode(pool, m, &wire) < 0)
      abort();
    weft_rpc_msg *d;
    const char *reason;
    if (weft_rpc_decode(wire, 1 << 20, &d, NULL, &reason) != 1)
      abort();
    sink += d->request_id;
    weft_rpc_msg_release(d);
    weft_buf_release(wire);
  }
  double ns = (double)(weft_now_ns() - t0) / MSGS;
  weft_rpc_msg_release(m);
  return ns;
}

/* ns per message: copy the same wire bytes once (the floor of any codec). */
static double run_memcpy(size_t payload) {
  size_t n = WEFT_RPC_HEADER_BYTES + payload;
  uint8_t *src = malloc(n), *dst = malloc(n);
  memset(src, 'x', n);
  uint64_t t0 = weft_now_ns();
  for (int i = 0; i < MSGS; i++) {
    src[0] = (uint8_t)i;
    memcpy(dst, src, n);
    __asm__ volatile("" : : "r"(dst) : "memory");
    sink += dst[0];
  }
  double ns = (double)(weft_now_ns() - t0) / MSGS;
  free(src);
  free(dst);
  return ns;
}

static size_t frames_seen;
static void count_read(weft_ctx *ctx, void *msg) {
  (void)ctx;
  frames_seen++;
  weft_msg_release(msg);
}
static const weft_handler counter = {.name = "count",
                                     .channel_read = count_read};

static void init_codec(weft_channel *ch, void *arg) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (arg != NULL)
    weft_rpc_codec_add_last(p, "rpc", NULL);
  weft_pipeline_add_last(p, "count", &counter, NULL);
}

/* Frames/s: reads of FRAMES_PER_READ encoded messages each go through the
 * pipeline; `decode` false is the peer (the reads are only released). */
static double run_pipeline(size_t payload, bool decode) {
  weft_embedded *e;
  if (weft_embedded_new(&e, init_codec, decode ? (void *)1 : NULL) != 0)
    abort();
  size_t one = WEFT_RPC_HEADER_BYTES + payload;
  size_t len = one * FRAMES_PER_READ;
  uint8_t *wire = malloc(len);
  for (int i = 0; i < FRAMES_PER_READ; i++) {
    uint8_t *h = wire + (size_t)i * one;
    memset(h, 0, one);
    h[0] = WEFT_RPC_VERSION;
    h[1] = WEFT_RPC_REQUEST;
    h[16] = (uint8_t)(payload >> 24), h[17] = (uint8_t)(payload >> 16);
    h[18] = (uint8_t)(payload >> 8), h[19] = (uint8_t)payload;
  }
  int reads = MSGS / FRAMES_PER_READ;
  frames_seen = 0;
  uint64_t t0 = weft_now_ns();
  for (int i = 0; i < reads; i++)
    weft_embedded_write_inbound_bytes(e, wire, len);
  double secs = (double)(weft_now_ns() - t0) / 1e9;
  size_t expected = decode ? (size_t)reads * FRAMES_PER_READ : (size_t)reads;
  if (frames_seen != expected)
    abort();
  free(wire);
  weft_embedded_free(e);
  return (double)reads * FRAMES_PER_READ / secs;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || !strcmp(argv[1], "-h"))) {
    printf("usage: %s [RUNS [PAYLOAD_BYTES]]\n\n"
           "The RPC codec's encode+decode beside a memcpy of the same bytes, "
           "and frames\nthrough a pipeline with and without the codec. RUNS "
           "(1..99, default 7)\ninterleaved runs, median; PAYLOAD_BYTES per "
           "message (default 64). Reads no\nconfiguration.\n\nExamples:\n"
           "  %s\n  %s 11 1024\n",
           argv[0], argv[0], argv[0]);
    return 0;
  }
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  size_t payload = argc > 2 ? (size_t)atol(argv[2]) : 64;
  if (runs < 1 || runs > 99)
    runs = 7;
  weft_pool *pool;
  if (weft_pool_new(&pool, NULL) != 0)
    return 1;
  double rpc[99], copy[99], pipe[99], raw[99];
  for (int r = 0; r < runs; r++) { /* interleaved: noise hits both alike */
    rpc[r] = run_rpc(pool, payload);
    copy[r] = run_memcpy(payload);
    pipe[r] = run_pipeline(payload, true);
    raw[r] = run_pipeline(payload, false);
  }
  double mr = median(rpc, runs), mc = median(copy, runs);
  double mp = median(pipe, runs), mw = median(raw, runs);
  printf("payload %zu B, %d runs, %d messages each, median:\n", payload, runs,
         MSGS);
  printf("  rpc encode+decode   %8.1f ns/msg\n", mr);
  printf("  memcpy of same bytes%8.1f ns/msg   (ratio %.1fx)\n", mc, mr / mc);
  printf("  pipeline rpc codec  %8.2f M frames/s\n", mp / 1e6);
  printf("  pipeline, no codec  %8.2f M frames/s   (peer: same reads, only "
         "released; %d frames per read)\n",
         mw / 1e6, FRAMES_PER_READ);
  weft_pool_free(pool);
  return (int)(sink & 0);
}
