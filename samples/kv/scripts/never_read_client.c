/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/scripts/never_read_client.c: N connections to a weft-kv-server
 * over any transport weft has (tcp://, uring://, ucx://), each SETting an 8 KiB
 * value and then pipelining GETs of it without ever reading a reply
 * (auto-read off), for samples/kv/scripts/bench-never-read.sh: what such
 * clients cost the server, per client. RESP by default; --rpc speaks the binary
 * protocol (samples/kv/proto.h over weft RPC), which is what the server
 * serves over ucx (RESP needs TCP on the wire). Each connection writes
 * while its own queue is writable, up to GETS requests, so the client's
 * memory stays small; it holds the connections until SECONDS pass.
 *
 * Build (the script does): cc -O2 -Iinclude
 * samples/kv/scripts/never_read_client.c -Lbuild/release -lweft
 * -Wl,-rpath,build/release Usage: never-read-client [--rpc] URI CONNECTIONS
 * SECONDS [GETS] Prints "connected N" once every connection is up, then the
 * seconds. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

#define VALUE 8192
#define BATCH 100 /* GETs per write */

#define MSG_MAX (VALUE + 64) /* bytes of one encoded request, at most */

/* The SET and a batch of GETs, encoded once (the client has one loop). */
static char set_msg[MSG_MAX], batch[BATCH * 64];
static size_t set_len, batch_len;
static bool rpc;
static long gets_max = 300000;

/* RESP: the command as an array of bulk strings. */
static size_t resp_encode(char *out, const char *value, size_t len) {
  int n = value != NULL
              ? snprintf(out, MSG_MAX,
                         "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", len)
              : snprintf(out, MSG_MAX, "*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
  if (value == NULL)
    return (size_t)n;
  memcpy(out + n, value, len);
  memcpy(out + n + len, "\r\n", 2);
  return (size_t)n + len + 2;
}

static size_t varint(uint8_t *p, size_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7)
    p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

/* The binary protocol: an RPC REQUEST, method = the command (GET 2, SET 3,
 * samples/kv/proto.h), payload = argc, then each argument's length and
 * bytes, lengths as varints. */
static size_t rpc_encode(weft_pool *pool, char *out, const char *value,
                         size_t len) {
  weft_buf *payload = weft_buf_alloc(pool, MSG_MAX);
  if (payload == NULL)
    abort();
  uint8_t *p = weft_buf_wptr(payload);
  size_t n = varint(p, value != NULL ? 2 : 1);
  n += varint(p + n, 3);
  memcpy(p + n, "big", 3);
  n += 3;
  if (value != NULL) {
    n += varint(p + n, len);
    memcpy(p + n, value, len);
    n += len;
  }
  payload->writer_index += n;
  weft_rpc_msg *m =
      weft_rpc_msg_new(WEFT_RPC_REQUEST, value != NULL ? 3 : 2, 1, 0, payload);
  weft_buf *enc;
  if (m == NULL || weft_rpc_encode(pool, m, &enc) < 0 ||
      weft_buf_readable(enc) > MSG_MAX)
    abort();
  size_t total = weft_buf_readable(enc);
  memcpy(out, weft_buf_rptr(enc), total);
  weft_buf_release(enc);
  weft_rpc_msg_release(m);
  return total;
}

/* Encodes the SET and the batch of GETs once, on the first connection. */
static void encode_once(weft_pool *pool) {
  if (set_len > 0)
    return;
  static char value[VALUE];
  memset(value, 'v', sizeof value);
  char get[64];
  size_t get_len =
      rpc ? rpc_encode(pool, get, NULL, 0) : resp_encode(get, NULL, 0);
  set_len = rpc ? rpc_encode(pool, set_msg, value, VALUE)
                : resp_encode(set_msg, value, VALUE);
  for (int i = 0; i < BATCH; i++)
    memcpy(batch + (size_t)i * get_len, get, get_len);
  batch_len = BATCH * get_len;
}
static atomic_int connected, failed;

typedef struct conn {
  long sent; /* GETs written */
} conn;

/* Writes GETs while the channel is writable, up to gets_max. */
static void write_gets(weft_ctx *ctx) {
  conn *c = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  while (c->sent < gets_max && weft_channel_is_writable(ch)) {
    weft_ctx_write_bytes(ctx, batch, batch_len, WEFT_PROMISE_NONE);
    c->sent += BATCH;
  }
  weft_ctx_flush(ctx);
}

static void client_active(weft_ctx *ctx) {
  encode_once(weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx))));
  weft_ctx_write_bytes(ctx, set_msg, set_len, WEFT_PROMISE_NONE);
  atomic_fetch_add(&connected, 1);
  write_gets(ctx);
}

static void client_writable(weft_ctx *ctx, bool writable) {
  if (writable)
    write_gets(ctx);
}

static void client_inactive(weft_ctx *ctx) {
  fprintf(stderr, "never-read-client: a connection closed\n");
  weft_ctx_fire_channel_inactive(ctx);
}

static void client_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler handler = {.name = "never-read",
                                     .channel_active = client_active,
                                     .writability_changed = client_writable,
                                     .channel_inactive = client_inactive,
                                     .handler_removed = client_removed};

static void client_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0); /* never read */
  conn *c = calloc(1, sizeof *c);
  if (c == NULL || weft_pipeline_add_last(weft_channel_pipeline(ch),
                                          "never-read", &handler, c) < 0)
    abort();
}

static void client_connected(weft_channel *ch, int status, void *arg) {
  (void)ch;
  (void)arg;
  if (status != 0) {
    fprintf(stderr, "never-read-client: connect: %s\n", weft_strerror(status));
    atomic_fetch_add(&failed, 1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--rpc") == 0) {
    rpc = true;
    argv++;
    argc--;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: never-read-client [--rpc] URI CONNECTIONS "
                    "SECONDS [GETS]\n");
    return 2;
  }
  int n = atoi(argv[2]), seconds = atoi(argv[3]);
  if (argc > 4)
    gets_max = atol(argv[4]);
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  weft_loop_group *group;
  if (weft_loop_group_new(&group, &o) < 0 || weft_loop_group_start(group) < 0)
    return 1;
  for (int i = 0; i < n; i++) {
    weft_bootstrap b = {.group = group,
                        .connect = argv[1],
                        .init = client_init,
                        .on_connect = client_connected};
    weft_channel_config_init(&b.options);
    if (weft_bootstrap_connect(&b) < 0)
      return 1;
  }
  while (atomic_load(&connected) + atomic_load(&failed) < n)
    usleep(10000);
  printf("connected %d\n", atomic_load(&connected));
  fflush(stdout);
  sleep((unsigned)seconds);
  weft_loop_group_stop(group);
  weft_loop_group_join(group);
  weft_loop_group_free(group);
  return atomic_load(&failed) == 0 ? 0 : 1;
}
