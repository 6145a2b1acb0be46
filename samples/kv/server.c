/* The KV service (server.h): one shared store, served over weft RPC (any
 * transport) and RESP (tcp, uring), with a periodic active-expiry timer. */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/weft.h>

#include "command.h"
#include "proto.h"

#define MAX_ARGS 1024    /* arguments of one command */
#define RESP_CHUNK 16384 /* bytes of one RESP reply buffer */
#define ZERO_COPY_MIN                                                          \
  16384                  /* bulk values at least this large are sent           \
                            from the stored blob, not copied */
#define EXPIRE_BUDGET 64 /* keys one expiry pass may look at */
#define RESP_LINGER_NS                                                         \
  (2 * 1000000000ull) /* a closing RESP connection waits this long for the     \
                         peer to close (resp_linger) */
#define UNKNOWN_TEXT_MAX                                                       \
  128 /* bytes of an unknown command's name, and of its arguments, quoted      \
         in the error (Redis' limits) */

struct kv_server {
  weft_loop_group *group;
  kv_store *store;
  kv_exec_env env;
  kv_server_options opts;
  weft_server *rpc, *resp;
  weft_rpc_method methods[KV_CMD_COUNT_ - 1];
  weft_resp_options resp_opts;
  weft_rpc_codec_options rpc_opts;
  weft_timer expire_timer; /* on loop 0 */
};

/* ---- options ---- */

void kv_server_config_defaults(weft_config *cfg) {
  cfg->max_connections = 10000; /* Redis' maxclients */
  /* Replies a connection may leave unread before it is closed (Redis'
   * client-output-buffer-limit). Flow control keeps a client that reads
   * slowly near the high watermark; this catches the rest. */
  cfg->output_limit = 64 << 20;
}

void kv_server_options_init(kv_server_options *o) {
  *o = (kv_server_options){
      .max_value_bytes = 1 << 20, .stripes = 64, .expire_hz = 10};
  strcpy(o->rpc_listen, "0.0.0.0:7001");
  strcpy(o->resp_listen, "0.0.0.0:6380");
}

static int parse_ulong(const char *v, unsigned long max, unsigned long *out,
                       char *err, size_t err_len) {
  char *end;
  unsigned long n = strtoul(v, &end, 10);
  if (*v == '\0' || *v == '-' || *end != '\0' || n < 1 || n > max) {
    snprintf(err, err_len, "expected an integer from 1 to %lu", max);
    return WEFT_EINVAL;
  }
  *out = n;
  return 0;
}

int kv_server_config_section(void *arg, const char *section, const char *key,
                             const char *value, char *err, size_t err_len) {
  kv_server_options *o = arg;
  unsigned long n;
  if (strcmp(section, "kvbench") == 0)
    return 0; /* weft-kvbench's section, when the file is shared */
  if (strcmp(section, "kv") != 0)
    return WEFT_ENOENT;
  if (strcmp(key, "rpc_listen") == 0 || strcmp(key, "resp_listen") == 0) {
    char *dst = key[1] == 'p' ? o->rpc_listen : o->resp_listen;
    if (strlen(value) >= WEFT_CONFIG_URI_MAX) {
      snprintf(err, err_len, "expected at most %d bytes",
               WEFT_CONFIG_URI_MAX - 1);
      return WEFT_EINVAL;
    }
    strcpy(dst, value);
    return 0;
  }
  if (strcmp(key, "max_value_bytes") == 0) {
    int rc = parse_ulong(value, 512ul << 20, &n, err, err_len);
    o->max_value_bytes = rc == 0 ? n : o->max_value_bytes;
    return rc;
  }
  if (strcmp(key, "stripes") == 0 || strcmp(key, "expire_hz") == 0) {
    bool stripes = key[0] == 's';
    int rc = parse_ulong(value, stripes ? 4096 : 1000, &n, err, err_len);
    if (rc == 0 && stripes && (n & (n - 1)) != 0) {
      snprintf(err, err_len, "expected a power of two from 1 to 4096");
      return WEFT_EINVAL;
    }
    if (rc == 0)
      *(stripes ? &o->stripes : &o->expire_hz) = (unsigned)n;
    return rc;
  }
  return WEFT_ENOENT;
}

/* ---- RESP: reply writer streaming into the channel ---- */

typedef struct resp_conn {
  kv_server *srv;
  weft_ctx *ctx;
  weft_buf *out;     /* replies not yet written down the pipeline */
  bool broken;       /* a reply could not be written whole: every later one
                        would answer the wrong command, so nothing more is
                        written and the channel closes */
  bool closing;      /* QUIT, a protocol error or a broken reply: no more
                        commands run; the channel closes once what was written
                        is sent */
  weft_timer linger; /* ends a lingering close (resp_linger) */
} resp_conn;

/* A reply write's result: on failure the connection is broken (see
 * resp_conn) and closes after the command. */
static void resp_check(resp_conn *c, int rc) {
  if (rc >= 0 || c->broken)
    return;
  c->broken = true;
  weft_log(WEFT_LOG_WARN, "kv: RESP channel %llu: cannot write a reply: %s",
           (unsigned long long)weft_channel_id(weft_ctx_channel(c->ctx)),
           weft_strerror(rc));
}

/* Makes room for `n` bytes: the current buffer goes down the pipeline when
 * full (written, flushed at channel_read_complete). NULL once broken or out
 * of memory (which breaks the connection). */
static weft_buf *resp_room(resp_conn *c, size_t n) {
  if (c->broken)
    return NULL;
  if (c->out != NULL && weft_buf_writable(c->out) >= n)
    return c->out;
  if (c->out != NULL)
    weft_ctx_write(c->ctx, c->out, WEFT_PROMISE_NONE);
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(c->ctx)));
  c->out = weft_buf_alloc(pool, n > RESP_CHUNK ? n : RESP_CHUNK);
  if (c->out == NULL)
    resp_check(c, WEFT_ENOMEM);
  return c->out;
}

static void resp_simple(void *w, const char *s) {
  weft_buf *b = resp_room(w, strlen(s) + 3);
  if (b != NULL)
    resp_check(w, weft_resp_write_simple(b, s));
}

/* An error reply of `len` bytes of any text: control bytes become spaces
 * (weft_resp_write_error_text), so no text can make a reply go missing. */
static void resp_error_text(resp_conn *c, const void *text, size_t len) {
  weft_buf *b = resp_room(c, len + 3);
  if (b != NULL)
    resp_check(c, weft_resp_write_error_text(b, text, len));
}

static void resp_error(void *w, const char *msg) {
  resp_error_text(w, msg, strlen(msg));
}

static void resp_integer(void *w, int64_t v) {
  weft_buf *b = resp_room(w, 24);
  if (b != NULL)
    resp_check(w, weft_resp_write_integer(b, v));
}

static void free_blob(void *base, size_t capacity, void *arg) {
  (void)base, (void)capacity;
  kv_blob_release(arg);
}

/* Large stored values go out as a buffer over the blob itself: header,
 * value, CRLF, with no copy of the value. */
static void resp_bulk_zero_copy(resp_conn *c, const void *data, size_t len,
                                kv_blob *blob) {
  weft_buf *b = resp_room(c, 24);
  if (b == NULL)
    return;
  b->writer_index +=
      (size_t)snprintf((char *)weft_buf_wptr(b), 24, "$%zu\r\n", len);
  weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
  c->out = NULL;
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(c->ctx)));
  weft_buf *v = weft_buf_wrap(pool, (void *)data, len, len, free_blob,
                              kv_blob_retain(blob));
  if (v == NULL) {
    kv_blob_release(blob);
    resp_check(c, WEFT_ENOMEM); /* the header went out without its value */
    return;
  }
  weft_ctx_write(c->ctx, v, WEFT_PROMISE_NONE);
  if ((b = resp_room(c, 2)) != NULL)
    resp_check(c, weft_buf_write_bytes(b, "\r\n", 2));
}

static void resp_bulk(void *w, const void *data, size_t len, kv_blob *blob) {
  resp_conn *c = w;
  if (blob != NULL && len >= ZERO_COPY_MIN)
    return resp_bulk_zero_copy(c, data, len, blob);
  weft_buf *b = resp_room(c, weft_resp_bulk_size(len));
  if (b != NULL)
    resp_check(c, weft_resp_write_bulk(b, data, len));
}

static void resp_null(void *w) {
  weft_buf *b = resp_room(w, 5);
  if (b != NULL)
    resp_check(w, weft_resp_write_null(b));
}

static void resp_array(void *w, size_t n) {
  weft_buf *b = resp_room(w, 24);
  if (b != NULL)
    resp_check(w, weft_resp_write_array(b, n));
}

static const kv_reply_ops resp_ops = {resp_simple, resp_error, resp_integer,
                                      resp_bulk,   resp_null,  resp_array};

/* The end of a lingering close (resp_linger): the peer did not close in
 * time. */
static void resp_linger_end(void *arg) {
  resp_conn *c = arg;
  weft_channel_close(weft_ctx_channel(c->ctx), WEFT_PROMISE_NONE);
}

/* The promise of a lingering close's half-close: the channel (a reference
 * taken for it) closes at once if the half-close failed. */
static void resp_shut(void *arg, int status) {
  weft_channel *ch = arg;
  if (status < 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

/* The promise of a closing connection's last write: the replies are with
 * the kernel. Closing now would reset the connection if the peer is still
 * sending (the rest of an oversized value: redis-cli then reports the
 * reset, not the error), so this half-closes (FIN after the replies) and
 * goes on reading, dropping what comes, until the peer closes, which
 * closes the channel, or RESP_LINGER_NS pass. */
static void resp_linger(void *arg, int status) {
  resp_conn *c = arg; /* alive: a write's promise completes before close
                         removes the handler */
  weft_channel *ch = weft_ctx_channel(c->ctx);
  if (!weft_channel_is_active(ch))
    return; /* closing already */
  if (status < 0 ||
      weft_timer_start(&c->linger, RESP_LINGER_NS, 0, resp_linger_end, c) < 0) {
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  weft_channel_shutdown_output(
      ch, (weft_promise){resp_shut, weft_channel_retain(ch)});
}

/* Stops running commands and closes the channel once the replies written
 * so far are sent (resp_linger): the last buffer (allocated empty if need
 * be; the transports complete an empty write in order) carries the
 * promise. Only without memory for that buffer does it close at once. */
static void resp_close_after_sent(resp_conn *c) {
  if (c->closing)
    return;
  c->closing = true;
  weft_channel *ch = weft_ctx_channel(c->ctx);
  weft_buf *last = c->out;
  c->out = NULL;
  if (last == NULL)
    last = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), 1);
  if (last == NULL) {
    weft_ctx_flush(c->ctx);
    weft_ctx_close(c->ctx, WEFT_PROMISE_NONE);
    return;
  }
  weft_ctx_write(c->ctx, last, (weft_promise){resp_linger, c});
  weft_ctx_flush(c->ctx);
}

/* ---- RESP: commands only Redis clients send ---- */

/* CONFIG GET <parameter>: redis-benchmark asks for "save" and "appendonly"
 * at start; answer as a Redis with persistence off would. */
static void resp_config(resp_conn *c, const weft_resp_cmd *cmd) {
  if (cmd->argc != 3 || !weft_resp_arg_equals(cmd, 1, "GET"))
    return resp_error(c, "ERR CONFIG: only CONFIG GET <parameter> is "
                         "supported");
  const char *value = weft_resp_arg_equals(cmd, 2, "save")         ? ""
                      : weft_resp_arg_equals(cmd, 2, "appendonly") ? "no"
                                                                   : NULL;
  if (value == NULL)
    return resp_array(c, 0);
  resp_array(c, 2);
  resp_bulk(c, cmd->argv[2].ptr, cmd->argv[2].len, NULL);
  resp_bulk(c, value, strlen(value), NULL);
}

/* Returns true when the command was one of Redis' connection commands. */
static bool resp_builtin(resp_conn *c, const weft_resp_cmd *cmd) {
  if (weft_resp_arg_equals(cmd, 0, "COMMAND")) {
    resp_array(c, 0); /* redis-cli asks for command docs: we have none */
  } else if (weft_resp_arg_equals(cmd, 0, "CONFIG")) {
    resp_config(c, cmd);
  } else if (weft_resp_arg_equals(cmd, 0, "SELECT")) {
    bool zero =
        cmd->argc == 2 && cmd->argv[1].len == 1 && cmd->argv[1].ptr[0] == '0';
    zero ? resp_simple(c, "OK") : resp_error(c, "ERR DB index is out of range");
  } else if (weft_resp_arg_equals(cmd, 0, "ECHO") && cmd->argc == 2) {
    resp_bulk(c, cmd->argv[1].ptr, cmd->argv[1].len, NULL);
  } else if (weft_resp_arg_equals(cmd, 0, "CLIENT")) {
    resp_simple(c, "OK");
  } else if (weft_resp_arg_equals(cmd, 0, "QUIT")) {
    resp_simple(c, "OK");
    resp_close_after_sent(c);
  } else {
    return false;
  }
  return true;
}

/* Appends at most `max` bytes of `src` to the `cap`-byte `dst` holding
 * `*n`; returns the bytes appended. */
static size_t append_capped(char *dst, size_t cap, size_t *n, const void *src,
                            size_t len, size_t max) {
  size_t k = len < max ? len : max;
  if (k > cap - *n)
    k = cap - *n;
  memcpy(dst + *n, src, k);
  *n += k;
  return k;
}

/* Redis' reply to an unknown command: "ERR unknown command '<name>', with
 * args beginning with: '<arg>' ..." with the name cut at 128 bytes and the
 * arguments at 128 in all; control bytes become spaces when written. */
static void resp_unknown(resp_conn *c, const weft_resp_cmd *cmd) {
  static const char head[] = "ERR unknown command '",
                    mid[] = "', with args beginning with: ";
  char msg[sizeof head + sizeof mid + 2 * UNKNOWN_TEXT_MAX + 8];
  size_t n = 0, args = 0;
  append_capped(msg, sizeof msg, &n, head, sizeof head - 1, SIZE_MAX);
  append_capped(msg, sizeof msg, &n, cmd->argv[0].ptr, cmd->argv[0].len,
                UNKNOWN_TEXT_MAX);
  append_capped(msg, sizeof msg, &n, mid, sizeof mid - 1, SIZE_MAX);
  for (size_t i = 1; i < cmd->argc && args < UNKNOWN_TEXT_MAX; i++) {
    size_t room = UNKNOWN_TEXT_MAX - args; /* as Redis: '%.*s' with this */
    args += append_capped(msg, sizeof msg, &n, "'", 1, 1);
    args += append_capped(msg, sizeof msg, &n, cmd->argv[i].ptr,
                          cmd->argv[i].len, room);
    args += append_capped(msg, sizeof msg, &n, "' ", 2, 2);
  }
  resp_error_text(c, msg, n);
}

/* Runs one command, unless the connection is closing; a reply that could
 * not be written closes it. */
static void resp_read(weft_ctx *ctx, void *msg) {
  resp_conn *c = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_resp_cmd_type)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft_resp_cmd *cmd = msg;
  if (c->closing) {
    weft_resp_cmd_release(cmd); /* after QUIT or a failure: not run */
    return;
  }
  int id = kv_cmd_from_name(cmd->argv[0].ptr, cmd->argv[0].len);
  if (id != 0) {
    kv_arg argv[MAX_ARGS];
    size_t argc = cmd->argc - 1; /* < MAX_ARGS: the decoder's max_args */
    for (size_t i = 0; i < argc; i++)
      argv[i] = (kv_arg){cmd->argv[i + 1].ptr, cmd->argv[i + 1].len};
    kv_exec(&c->srv->env, id, argc, argv, &resp_ops, c);
  } else if (!resp_builtin(c, cmd)) {
    resp_unknown(c, cmd);
  }
  weft_resp_cmd_release(cmd);
  if (c->broken)
    resp_close_after_sent(c);
}

/* A protocol error (the decoder's WEFT_EBADFRAME or WEFT_ETOOLONG) is
 * answered as Redis does, "-ERR Protocol error: ...", after the replies to
 * the commands before it; the channel closes once that is sent. Other
 * errors go on to the tail, which logs them and closes. */
static void resp_exception(weft_ctx *ctx, int err, const char *reason) {
  resp_conn *c = weft_ctx_state(ctx);
  if (err != WEFT_EBADFRAME && err != WEFT_ETOOLONG) {
    weft_ctx_fire_exception_caught(ctx, err, reason);
    return;
  }
  if (c->closing)
    return;
  weft_log(WEFT_LOG_INFO, "kv: RESP channel %llu: %s; closing",
           (unsigned long long)weft_channel_id(weft_ctx_channel(ctx)), reason);
  char msg[256];
  int n = snprintf(msg, sizeof msg, "ERR %s", reason);
  resp_error_text(c, msg, n < (int)sizeof msg ? (size_t)n : sizeof msg - 1);
  resp_close_after_sent(c);
}

/* One flush per batch of commands read together (pipelining). */
static void resp_read_complete(weft_ctx *ctx) {
  resp_conn *c = weft_ctx_state(ctx);
  if (c->out != NULL && weft_buf_readable(c->out) > 0) {
    weft_ctx_write(ctx, c->out, WEFT_PROMISE_NONE);
    c->out = NULL;
  }
  weft_ctx_flush(ctx);
}

static void resp_removed(weft_ctx *ctx) {
  resp_conn *c = weft_ctx_state(ctx);
  weft_timer_stop(&c->linger);
  weft_buf_release(c->out);
  free(c);
}

static const weft_handler resp_handler = {.name = "kv-resp",
                                          .channel_read = resp_read,
                                          .channel_read_complete =
                                              resp_read_complete,
                                          .exception_caught = resp_exception,
                                          .handler_removed = resp_removed};

static void resp_init(weft_channel *ch, void *arg) {
  kv_server *srv = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  resp_conn *c = calloc(1, sizeof *c);
  if (c != NULL) {
    c->srv = srv;
    weft_timer_init(weft_channel_loop(ch), &c->linger);
  }
  if (c == NULL || weft_resp_decoder_add_last(p, "resp", &srv->resp_opts) < 0 ||
      weft_pipeline_add_last(p, "kv", &resp_handler, c) < 0) {
    free(c);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  c->ctx = weft_pipeline_context(p, "kv");
}

/* ---- RPC: reply writer into one growing payload ---- */

typedef struct rpc_writer {
  weft_pool *pool;
  weft_buf *out;
  bool failed; /* ENOMEM on the way: the call fails as a whole */
} rpc_writer;

static weft_buf *rpc_room(rpc_writer *w, size_t n) {
  if (w->failed)
    return NULL;
  if (w->out != NULL && weft_buf_writable(w->out) >= n)
    return w->out;
  size_t have = w->out != NULL ? weft_buf_readable(w->out) : 0;
  size_t cap = w->out != NULL ? w->out->capacity * 2 : 256;
  if (cap < have + n)
    cap = have + n;
  weft_buf *b = weft_buf_alloc(w->pool, cap);
  if (b == NULL) {
    w->failed = true;
    return NULL;
  }
  if (w->out != NULL) {
    weft_buf_write_bytes(b, weft_buf_rptr(w->out), have);
    weft_buf_release(w->out);
  }
  return w->out = b;
}

static void rpc_simple(void *w, const char *s) {
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(strlen(s)));
  if (b != NULL)
    kv_proto_write_simple(b, s);
}

static void rpc_error(void *w, const char *msg) {
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(strlen(msg)));
  if (b != NULL)
    kv_proto_write_error(b, msg);
}

static void rpc_integer(void *w, int64_t v) {
  weft_buf *b = rpc_room(w, 9);
  if (b != NULL)
    kv_proto_write_integer(b, v);
}

static void rpc_bulk(void *w, const void *data, size_t len, kv_blob *blob) {
  (void)blob;
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(len));
  if (b != NULL)
    kv_proto_write_bulk(b, data, len);
}

static void rpc_null(void *w) {
  weft_buf *b = rpc_room(w, 1);
  if (b != NULL)
    kv_proto_write_null(b);
}

static void rpc_array(void *w, size_t n) {
  weft_buf *b = rpc_room(w, 11);
  if (b != NULL)
    kv_proto_write_array(b, n);
}

static const kv_reply_ops rpc_ops = {rpc_simple, rpc_error, rpc_integer,
                                     rpc_bulk,   rpc_null,  rpc_array};

static void rpc_method(weft_rpc_call *call, weft_rpc_msg *req, void *arg) {
  kv_server *srv = arg;
  kv_arg argv[MAX_ARGS];
  size_t argc;
  int rc = kv_proto_read_args(req->payload, MAX_ARGS, argv, &argc);
  if (rc < 0) {
    weft_rpc_msg_release(req);
    weft_rpc_reply_error(call, rc, NULL);
    return;
  }
  weft_channel *ch = weft_rpc_call_channel(call);
  rpc_writer w = {.pool = weft_loop_pool(weft_channel_loop(ch))};
  kv_exec(&srv->env, weft_rpc_call_method(call), argc, argv, &rpc_ops, &w);
  weft_rpc_msg_release(req); /* argv pointed into its payload */
  if (w.failed) {
    weft_buf_release(w.out);
    weft_rpc_reply_error(call, WEFT_ENOMEM, NULL);
    return;
  }
  weft_rpc_reply(call, 0, w.out);
}

static void rpc_init(weft_channel *ch, void *arg) {
  kv_server *srv = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (weft_rpc_codec_add_last(p, "rpc", &srv->rpc_opts) < 0 ||
      weft_flush_consolidation_add_last(p, "flush", NULL) < 0 ||
      weft_rpc_server_add_last(p, "kv", srv->methods, KV_CMD_COUNT_ - 1) < 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
}

/* ---- start and stop ---- */

static void expire_tick(void *arg) {
  kv_server *srv = arg;
  kv_store_expire_some(srv->store, EXPIRE_BUDGET);
}

static int expire_start(void *arg) {
  kv_server *srv = arg;
  uint64_t period = 1000000000ull / srv->opts.expire_hz;
  weft_timer_start(&srv->expire_timer, period, period, expire_tick, srv);
  return 0;
}

static int expire_stop(void *arg) {
  weft_timer_stop(&((kv_server *)arg)->expire_timer);
  return 0;
}

/* `reject` is what a client past [server] max_connections reads before
 * the close (NULL: the close alone). */
static int bind_one(kv_server *srv, const weft_config *cfg, const char *uri,
                    weft_channel_init_cb init, const char *reject,
                    weft_server **out) {
  char full[WEFT_CONFIG_URI_MAX + 32];
  int rc = weft_config_endpoint(cfg, uri, full, sizeof full);
  if (rc < 0)
    return rc;
  weft_server_bootstrap sb = {.group = srv->group,
                              .listen = full,
                              .child_init = init,
                              .child_init_arg = srv,
                              .reject_message = reject};
  weft_config_server_bootstrap(cfg, &sb);
  return weft_server_bind(out, &sb); /* a failure is logged there */
}

/* RESP is for Redis' clients, which speak TCP: a listener on a message
 * transport (ucx, verbs) would accept nothing they can send. Refused at
 * start, naming the setting. */
static int resp_transport_check(const weft_config *cfg, const char *uri) {
  char full[WEFT_CONFIG_URI_MAX + 32];
  weft_endpoint ep;
  if (weft_config_endpoint(cfg, uri, full, sizeof full) < 0 ||
      weft_endpoint_parse(full, &ep, NULL, 0) < 0 ||
      !weft_transport_available(ep.transport, NULL, 0) ||
      weft_transport_speaks_tcp(ep.transport))
    return 0; /* bind reports bad or unavailable endpoints itself */
  weft_log(WEFT_LOG_ERROR,
           "kv: [kv] resp_listen = %s: the Redis protocol needs a transport "
           "that is TCP on the wire (tcp or uring), and %s is not; set "
           "[kv] resp_listen = tcp://HOST:PORT (or empty to turn RESP off)",
           full, ep.transport);
  return WEFT_ENOTSUP;
}

static void setup_codecs(kv_server *srv) {
  weft_resp_options_init(&srv->resp_opts);
  srv->resp_opts.max_args = MAX_ARGS; /* resp_read's argv has room */
  /* A SET of the largest value must fit, with room for the key. */
  srv->resp_opts.max_bulk = srv->opts.max_value_bytes;
  srv->resp_opts.max_command = srv->opts.max_value_bytes + 128 * 1024;
  weft_rpc_codec_options_init(&srv->rpc_opts);
  srv->rpc_opts.max_payload = srv->opts.max_value_bytes + 128 * 1024;
  for (int c = 1; c < KV_CMD_COUNT_; c++)
    srv->methods[c - 1] = (weft_rpc_method){(uint16_t)c, rpc_method, srv};
}

int kv_server_bind(kv_server **out, weft_loop_group *group,
                   const weft_config *cfg, const kv_server_options *opts) {
  kv_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL)
    return WEFT_ENOMEM;
  srv->group = group;
  srv->opts = *opts;
  kv_store_options so;
  kv_store_options_init(&so);
  so.n_stripes = opts->stripes;
  so.max_value_len = opts->max_value_bytes;
  int rc = kv_store_new(&srv->store, &so);
  if (rc < 0)
    goto failed_store;
  srv->env = (kv_exec_env){.store = srv->store};
  setup_codecs(srv);
  if (opts->rpc_listen[0] != '\0' &&
      (rc = bind_one(srv, cfg, opts->rpc_listen, rpc_init, NULL, &srv->rpc)) <
          0)
    goto failed_rpc;
  if (opts->resp_listen[0] != '\0' &&
      (rc = resp_transport_check(cfg, opts->resp_listen)) < 0)
    goto failed_resp;
  if (opts->resp_listen[0] != '\0' &&
      (rc = bind_one(srv, cfg, opts->resp_listen, resp_init,
                     "-ERR max number of clients reached\r\n", &srv->resp)) < 0)
    goto failed_resp;
  weft_loop *loop0 = weft_loop_group_get(group, 0);
  weft_timer_init(loop0, &srv->expire_timer);
  weft_loop_call(loop0, expire_start, srv);
  *out = srv;
  return 0;
failed_resp:
  weft_server_close(srv->rpc);
failed_rpc:
  kv_store_free(srv->store);
failed_store:
  free(srv);
  return rc;
}

int kv_server_address(const kv_server *s, int which, char *buf, size_t len) {
  weft_server *ws = which == 0 ? s->rpc : s->resp;
  if (ws == NULL)
    return WEFT_ENOENT;
  return weft_server_address(ws, buf, len);
}

kv_store *kv_server_store(kv_server *s) { return s->store; }

void kv_server_close(kv_server *s) {
  if (s == NULL)
    return;
  weft_loop_call(weft_loop_group_get(s->group, 0), expire_stop, s);
  weft_server_close(s->rpc);
  weft_server_close(s->resp);
  kv_store_free(s->store);
  free(s);
}
