/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the TLS handler (handlers/tls_*.c).
 *
 * Every input starts from a completed TLS 1.3 handshake between a client
 * and a server handler on two embedded channels (certificates made once by
 * tests/tls/make-certs.sh in a temporary directory). The input is then a
 * list of operations, each an opcode byte and a length byte followed by
 * that many bytes:
 *
 *   0  the bytes go to the server as they are (raw ciphertext)
 *   1  the bytes go to the server inside a record header of our own: the
 *      first byte is the content type, the record length is the rest's
 *   2  the client encrypts the bytes, the records reach the server cut in
 *      two at a point the first byte chooses
 *   3  like 2, with one byte of the records flipped (first two bytes: where
 *      and how)
 *   4  the server's reading is switched off or on (auto-read; flow control)
 *   5  the server writes the bytes back to the client
 *   6  the client closes (close_notify)
 *
 * No crash, no leaked buffer (weft_embedded_free), no leaked memory
 * (LeakSanitizer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/tls.h>
#include <weft/weft.h>

#ifndef WEFT_TLS_MAKE_CERTS
#error "WEFT_TLS_MAKE_CERTS: the path of tests/tls/make-certs.sh"
#endif

static char certs[64];
static weft_tls_context *client_ctx, *server_ctx;

static void quiet(weft_log_level level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

static void remove_certs(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", certs);
  if (system(cmd) != 0)
    fprintf(stderr, "fuzz_tls: could not remove %s\n", certs);
  weft_tls_context_release(client_ctx);
  weft_tls_context_release(server_ctx);
}

static weft_tls_context *make(weft_tls_mode mode) {
  weft_tls_options o;
  weft_tls_options_init(&o);
  o.min_protocol = WEFT_TLS_1_3;
  if (mode == WEFT_TLS_SERVER) {
    snprintf(o.cert_file, sizeof o.cert_file, "%s/server.pem", certs);
    snprintf(o.key_file, sizeof o.key_file, "%s/server.key", certs);
  } else {
    snprintf(o.ca_file, sizeof o.ca_file, "%s/ca.pem", certs);
    snprintf(o.server_name, sizeof o.server_name, "localhost");
  }
  weft_tls_context *c;
  char err[256];
  if (weft_tls_context_new(&c, mode, &o, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_tls: %s\n", err);
    abort();
  }
  return c;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(certs, sizeof certs, "/tmp/weft-fuzz-tls-XXXXXX");
  char cmd[512];
  if (mkdtemp(certs) == NULL ||
      (snprintf(cmd, sizeof cmd, "%s %s", WEFT_TLS_MAKE_CERTS, certs),
       system(cmd) != 0)) {
    fprintf(stderr, "fuzz_tls: cannot make certificates\n");
    abort();
  }
  client_ctx = make(WEFT_TLS_CLIENT);
  server_ctx = make(WEFT_TLS_SERVER);
  atexit(remove_certs);
  weft_log_set_handler(quiet, NULL); /* every bad record is logged */
  return 0;
}

static void init(weft_channel *ch, void *arg) {
  if (weft_tls_add_first(weft_channel_pipeline(ch), arg, NULL) != 0)
    abort();
}

/* The client is made first, so the server's embedded loop is the current
 * one: it takes bytes with weft_embedded_write_inbound, the client
 * through its pipeline. */
typedef struct pair {
  weft_embedded *cli, *srv;
} pair;

static bool srv_open(pair *p) {
  return weft_channel_is_active(weft_embedded_channel(p->srv));
}

static void to_client(pair *p, weft_buf *b) {
  weft_channel *ch = weft_embedded_channel(p->cli);
  if (!weft_channel_is_active(ch)) {
    weft_buf_release(b);
    return;
  }
  weft_pipeline_fire_channel_read(weft_channel_pipeline(ch), b);
  if (weft_channel_is_active(ch))
    weft_pipeline_fire_channel_read_complete(weft_channel_pipeline(ch));
}

static void drop_inbound(weft_embedded *e) {
  void *m;
  while ((m = weft_embedded_read_inbound(e)) != NULL)
    weft_msg_release(m);
}

/* Server to client, until quiet. */
static void server_out(pair *p) {
  weft_buf *b;
  while ((b = weft_embedded_read_outbound(p->srv)) != NULL)
    to_client(p, b);
  drop_inbound(p->cli);
}

/* What the client sent, as one buffer (NULL if nothing). */
static weft_buf *client_out(pair *p) {
  size_t total = 0;
  weft_buf *parts[64];
  size_t n = 0;
  weft_buf *b;
  while ((b = weft_embedded_read_outbound(p->cli)) != NULL) {
    if (n == 64) {
      weft_buf_release(b);
      continue;
    }
    parts[n++] = b;
    total += weft_buf_readable(b);
  }
  if (n == 0)
    return NULL;
  weft_buf *all = weft_buf_alloc(weft_embedded_pool(p->srv), total);
  for (size_t i = 0; i < n; i++) {
    if (all != NULL)
      weft_buf_write_bytes(all, weft_buf_rptr(parts[i]),
                           weft_buf_readable(parts[i]));
    weft_buf_release(parts[i]);
  }
  return all;
}

static void to_server(pair *p, const uint8_t *data, size_t n) {
  if (n > 0 && srv_open(p))
    weft_embedded_write_inbound_bytes(p->srv, data, n);
  drop_inbound(p->srv);
  server_out(p);
}

static void handshake(pair *p) {
  for (int round = 0; round < 8; round++) {
    weft_buf *b = client_out(p);
    if (b == NULL)
      break;
    to_server(p, weft_buf_rptr(b), weft_buf_readable(b));
    weft_buf_release(b);
  }
}

/* The client encrypts `data`; the records reach the server in two pieces,
 * with one byte flipped if `flip` (at `where`, xor `mask`). */
static void client_records(pair *p, const uint8_t *data, size_t n, size_t cut,
                           bool flip, size_t where, uint8_t mask) {
  weft_channel *ch = weft_embedded_channel(p->cli);
  if (!weft_channel_is_active(ch))
    return;
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(p->cli), n > 0 ? n : 1);
  if (b == NULL)
    return;
  weft_buf_write_bytes(b, data, n);
  weft_channel_write_and_flush(ch, b, WEFT_PROMISE_NONE);
  weft_buf *rec = client_out(p);
  if (rec == NULL)
    return;
  size_t len = weft_buf_readable(rec);
  if (flip && len > 0)
    weft_buf_rptr(rec)[where % len] ^= mask | 1;
  cut = len > 0 ? cut % len : 0;
  to_server(p, weft_buf_rptr(rec), cut);
  to_server(p, weft_buf_rptr(rec) + cut, len - cut);
  weft_buf_release(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pair p;
  if (weft_embedded_new(&p.cli, init, client_ctx) != 0 ||
      weft_embedded_new(&p.srv, init, server_ctx) != 0)
    abort();
  handshake(&p);
  size_t off = 0;
  while (off + 2 <= size && srv_open(&p)) {
    uint8_t op = data[off] % 7;
    size_t n = data[off + 1];
    off += 2;
    if (n > size - off)
      n = size - off;
    const uint8_t *arg = data + off;
    off += n;
    weft_channel *sch = weft_embedded_channel(p.srv);
    switch (op) {
    case 0:
      to_server(&p, arg, n);
      break;
    case 1: {
      uint8_t rec[5 + 255];
      size_t body = n > 0 ? n - 1 : 0;
      rec[0] = n > 0 ? arg[0] : 23;
      rec[1] = 3, rec[2] = 3, rec[3] = 0, rec[4] = (uint8_t)body;
      memcpy(rec + 5, arg + (n > 0), body);
      to_server(&p, rec, 5 + body);
      break;
    }
    case 2:
    case 3: {
      size_t skip = op == 3 ? 2 : 1;
      if (n < skip)
        break;
      client_records(&p, arg + skip, n - skip, arg[0], op == 3, arg[0],
                     op == 3 ? arg[1] : 0);
      break;
    }
    case 4: {
      int64_t on = n > 0 ? arg[0] & 1 : 1;
      weft_channel_set_option(sch, WEFT_OPT_AUTO_READ, on);
      weft_embedded_run_pending(p.srv);
      drop_inbound(p.srv);
      server_out(&p);
      break;
    }
    case 5: {
      weft_buf *b = weft_buf_alloc(weft_embedded_pool(p.srv), n > 0 ? n : 1);
      if (b == NULL)
        break;
      weft_buf_write_bytes(b, arg, n);
      weft_channel_write_and_flush(sch, b, WEFT_PROMISE_NONE);
      server_out(&p);
      break;
    }
    default:
      weft_channel_close(weft_embedded_channel(p.cli), WEFT_PROMISE_NONE);
      handshake(&p); /* the close_notify to the server */
      break;
    }
  }
  drop_inbound(p.srv);
  if (weft_embedded_free(p.srv) != 0) /* the current loop first */
    abort();
  drop_inbound(p.cli);
  if (weft_embedded_free(p.cli) != 0)
    abort(); /* leaked buffers */
  return 0;
}
