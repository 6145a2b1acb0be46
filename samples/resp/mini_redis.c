/* SPDX-License-Identifier: Apache-2.0 */
/* weft-mini-redis: how a protocol server is built on weft, in one file.
 *
 *   weft-mini-redis [-c FILE] [-o section.key=value ...]
 *
 * A teaching program, not a product (the product is samples/kv). It serves
 * a handful of Redis commands (PING, ECHO, SET, GET, DEL, EXISTS, DBSIZE,
 * COMMAND, QUIT) to redis-cli or any Redis client, with weft's RESP codec
 * and nothing else:
 *
 *   bytes --> [resp decoder] --weft_resp_cmd--> [mini-redis] --bytes-->
 *
 * The decoder (weft/resp.h) turns the client's bytes into commands whose
 * arguments point into the received buffer (no copy); the handler looks the
 * command up, runs it on a small hash table and writes the reply with the
 * weft_resp_write_* encoders. A malformed request reaches the handler as
 * exception_caught with Redis' reason text: the handler answers "-ERR
 * <reason>" and closes, as Redis does. Limits (argument count and size,
 * request size) are the decoder's defaults (weft_resp_options_init).
 *
 * Threads: every loop of the group runs channels, so the table is shared
 * by several loop threads and one mutex guards it. (samples/kv stripes its
 * store instead; this file keeps to the shape of a server.)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

/* ---- the store: a chained hash table of byte strings, one lock ---- */

#define TABLE_SIZE 4096u    /* buckets (fixed: a teaching program) */
#define MAX_KEYS (1u << 20) /* SET refuses a new key past this */
/* bytes: SET refuses a longer value, so GET's reply has a bound too */
#define MAX_VALUE (1u << 20)

typedef struct entry {
  struct entry *next;
  size_t klen, vlen;
  char bytes[]; /* key, then value */
} entry;

static entry *table[TABLE_SIZE];
static size_t n_keys;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a: short and good enough for a fixed table. */
static size_t bucket_of(const uint8_t *k, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++)
    h = (h ^ k[i]) * 1099511628211ull;
  return (size_t)(h % TABLE_SIZE);
}

/* The link that points at `key`'s entry (or the bucket's end). Locked. */
static entry **find(const weft_resp_arg *key) {
  entry **p = &table[bucket_of(key->ptr, key->len)];
  while (*p != NULL && !((*p)->klen == key->len &&
                         memcmp((*p)->bytes, key->ptr, key->len) == 0))
    p = &(*p)->next;
  return p;
}

/* Frees every entry (at exit, after the loops stopped). */
static void table_free(void) {
  for (size_t i = 0; i < TABLE_SIZE; i++)
    while (table[i] != NULL) {
      entry *e = table[i];
      table[i] = e->next;
      free(e);
    }
  n_keys = 0;
}

/* ---- replies: one small buffer per reply, written to the channel ---- */

/* A buffer of `size` bytes from the channel's loop pool, or NULL. */
static weft_buf *reply_buf(weft_ctx *ctx, size_t size) {
  weft_loop *loop = weft_channel_loop(weft_ctx_channel(ctx));
  return weft_buf_alloc(weft_loop_pool(loop), size);
}

/* Queues `b` (flushed at read_complete), or closes when there was none. */
static void send_reply(weft_ctx *ctx, weft_buf *b) {
  if (b == NULL) {
    weft_ctx_close(ctx, WEFT_PROMISE_NONE);
    return;
  }
  weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
}

static void reply_error(weft_ctx *ctx, const char *fmt, const char *name) {
  char msg[160];
  snprintf(msg, sizeof msg, fmt, name);
  weft_buf *b = reply_buf(ctx, strlen(msg) + 8);
  if (b != NULL)
    weft_resp_write_error(b, msg);
  send_reply(ctx, b);
}

static void reply_simple(weft_ctx *ctx, const char *s) {
  weft_buf *b = reply_buf(ctx, strlen(s) + 8);
  if (b != NULL)
    weft_resp_write_simple(b, s);
  send_reply(ctx, b);
}

static void reply_integer(weft_ctx *ctx, int64_t v) {
  weft_buf *b = reply_buf(ctx, 24);
  if (b != NULL)
    weft_resp_write_integer(b, v);
  send_reply(ctx, b);
}

static void reply_bulk(weft_ctx *ctx, const void *data, size_t len) {
  weft_buf *b = reply_buf(ctx, weft_resp_bulk_size(len));
  if (b != NULL)
    weft_resp_write_bulk(b, data, len);
  send_reply(ctx, b);
}

/* ---- the commands ---- */

typedef struct command {
  const char *name;
  int arity; /* argc with the name; negative: at least -arity */
  void (*run)(weft_ctx *ctx, const weft_resp_cmd *c);
} command;

static void cmd_ping(weft_ctx *ctx, const weft_resp_cmd *c) {
  if (c->argc == 2)
    reply_bulk(ctx, c->argv[1].ptr, c->argv[1].len);
  else if (c->argc == 1)
    reply_simple(ctx, "PONG");
  else
    reply_error(ctx, "ERR wrong number of arguments for '%s' command", "ping");
}

static void cmd_echo(weft_ctx *ctx, const weft_resp_cmd *c) {
  reply_bulk(ctx, c->argv[1].ptr, c->argv[1].len);
}

static void cmd_set(weft_ctx *ctx, const weft_resp_cmd *c) {
  const weft_resp_arg *k = &c->argv[1], *v = &c->argv[2];
  if (v->len > MAX_VALUE) {
    char max[24];
    snprintf(max, sizeof max, "%u", MAX_VALUE);
    return reply_error(ctx, "ERR value over %s bytes", max);
  }
  entry *e = malloc(sizeof *e + k->len + v->len);
  if (e == NULL)
    return reply_error(ctx, "OOM %s", "command not allowed");
  e->klen = k->len;
  e->vlen = v->len;
  memcpy(e->bytes, k->ptr, k->len);
  memcpy(e->bytes + k->len, v->ptr, v->len);
  pthread_mutex_lock(&table_lock);
  entry **p = find(k);
  entry *old = *p;
  bool full = old == NULL && n_keys >= MAX_KEYS;
  if (!full) {
    e->next = old != NULL ? old->next : NULL;
    *p = e; /* replaces the old entry in place */
    n_keys += old == NULL;
  }
  pthread_mutex_unlock(&table_lock);
  free(full ? e : old);
  if (full)
    return reply_error(ctx, "OOM %s", "too many keys");
  reply_simple(ctx, "OK");
}

static void cmd_get(weft_ctx *ctx, const weft_resp_cmd *c) {
  /* The value is copied into the reply under the lock: another loop's SET
   * may free the entry as soon as the lock is released. */
  pthread_mutex_lock(&table_lock);
  entry *e = *find(&c->argv[1]);
  weft_buf *b = reply_buf(ctx, e ? weft_resp_bulk_size(e->vlen) : 8);
  if (b != NULL && e != NULL)
    weft_resp_write_bulk(b, e->bytes + e->klen, e->vlen);
  else if (b != NULL)
    weft_resp_write_null(b);
  pthread_mutex_unlock(&table_lock);
  send_reply(ctx, b);
}

/* DEL and EXISTS: how many of the keys were there (and deletes them). */
static int64_t count_keys(const weft_resp_cmd *c, bool delete) {
  int64_t n = 0;
  pthread_mutex_lock(&table_lock);
  for (size_t i = 1; i < c->argc; i++) {
    entry **p = find(&c->argv[i]);
    entry *e = *p;
    if (e == NULL)
      continue;
    n++;
    if (delete) {
      *p = e->next;
      n_keys--;
      free(e);
    }
  }
  pthread_mutex_unlock(&table_lock);
  return n;
}

static void cmd_del(weft_ctx *ctx, const weft_resp_cmd *c) {
  reply_integer(ctx, count_keys(c, true));
}

static void cmd_exists(weft_ctx *ctx, const weft_resp_cmd *c) {
  reply_integer(ctx, count_keys(c, false));
}

static void cmd_dbsize(weft_ctx *ctx, const weft_resp_cmd *c) {
  (void)c;
  pthread_mutex_lock(&table_lock);
  int64_t n = (int64_t)n_keys;
  pthread_mutex_unlock(&table_lock);
  reply_integer(ctx, n);
}

/* redis-cli asks COMMAND DOCS at start; an empty array is a fine answer. */
static void cmd_command(weft_ctx *ctx, const weft_resp_cmd *c) {
  (void)c;
  weft_buf *b = reply_buf(ctx, 8);
  if (b != NULL)
    weft_resp_write_array(b, 0);
  send_reply(ctx, b);
}

static void cmd_quit(weft_ctx *ctx, const weft_resp_cmd *c) {
  (void)c;
  reply_simple(ctx, "OK");
  weft_ctx_flush(ctx);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE); /* after the queued replies */
}

static const command commands[] = {
    {"ping", -1, cmd_ping},    {"echo", 2, cmd_echo},
    {"set", 3, cmd_set},       {"get", 2, cmd_get},
    {"del", -2, cmd_del},      {"exists", -2, cmd_exists},
    {"dbsize", 1, cmd_dbsize}, {"command", -1, cmd_command},
    {"quit", -1, cmd_quit},
};

/* ---- the handler: a command in, a reply out ---- */

static void redis_read(weft_ctx *ctx, void *msg) {
  const weft_resp_cmd *c = msg; /* the decoder sends nothing else */
  const command *k = NULL;
  for (size_t i = 0; i < sizeof commands / sizeof *commands && !k; i++)
    if (weft_resp_arg_equals(c, 0, commands[i].name))
      k = &commands[i];
  if (k == NULL) { /* named as sent (up to 40 bytes), as Redis does */
    char name[64];
    snprintf(name, sizeof name, "%.*s",
             (int)(c->argv[0].len < 40 ? c->argv[0].len : 40),
             (const char *)c->argv[0].ptr);
    reply_error(ctx, "ERR unknown command '%s'", name);
  } else if (k->arity > 0 ? c->argc != (size_t)k->arity
                          : c->argc < (size_t)-k->arity)
    reply_error(ctx, "ERR wrong number of arguments for '%s' command",
                k->name); /* Redis names it in lower case */
  else
    k->run(ctx, c);
  weft_msg_release(msg); /* the arguments' bytes go back to the pool */
}

/* One flush per read, not per reply: pipelined commands share a write. */
static void redis_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

/* A malformed request: Redis answers "-ERR Protocol error: ..." and
 * closes; so do we. Other errors (a reset peer) just close. */
static void redis_exception(weft_ctx *ctx, int err, const char *reason) {
  if (err == WEFT_EBADFRAME || err == WEFT_ETOOLONG) {
    reply_error(ctx, "ERR %s", reason);
    weft_ctx_flush(ctx);
  }
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler redis_handler = {.name = "mini-redis",
                                           .channel_read = redis_read,
                                           .channel_read_complete =
                                               redis_read_complete,
                                           .exception_caught = redis_exception};

/* Every accepted channel gets the decoder, then the handler. */
static void child_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  weft_resp_options o;
  weft_resp_options_init(&o);
  if (weft_resp_decoder_add_last(p, "resp", &o) < 0 ||
      weft_pipeline_add_last(p, "mini-redis", &redis_handler, NULL) < 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
}

/* ---- main: configuration, loops, a server, and a signal to stop ---- */

static weft_cli cli = {
    .prog = "weft-mini-redis",
    .synopsis = "[-c FILE] [-o section.key=value ...]",
    .about =
        "A teaching program: a few Redis commands (PING, ECHO, SET, GET, "
        "DEL, EXISTS,\nDBSIZE, COMMAND, QUIT) served on [server] listen "
        "with weft's RESP codec.\nThe key-value service is weft-kv-server.",
    .examples = "weft-mini-redis -o server.listen=127.0.0.1:6390 &\n"
                "redis-cli -p 6390 set greeting hello"};

int main(int argc, char **argv) {
  weft_config cfg;
  weft_config_init(&cfg);
  int first = weft_cli_parse(&cli, &cfg, argc, argv);
  if (first <= 0)
    return first == 0 ? 0 : 2; /* --help / --version, or an error shown */
  if (first != argc) {
    weft_cli_usage_error(&cli, "unexpected argument '%s'", argv[first]);
    return 2;
  }
  /* SIGINT/SIGTERM are taken by weft_cli_wait_stop below: blocked before
   * the loop threads start, so that they inherit the mask. */
  sigset_t stop;
  weft_loop_group *group;
  int rc = weft_cli_loops_start(&cli, &cfg.loop, &stop, &group);
  if (rc < 0)
    return 1;
  weft_server_bootstrap sb = {.group = group, .child_init = child_init};
  weft_config_server_bootstrap(&cfg, &sb);
  weft_endpoint ep;
  weft_server *srv = NULL;
  rc = weft_config_endpoint_parse(&cfg, cfg.listen, &ep, NULL, 0);
  if (rc == 0)
    rc = weft_server_bind_endpoint(&srv, &sb, &ep);
  if (rc < 0) {
    fprintf(stderr, "weft-mini-redis: [server] listen = %s: %s\n", cfg.listen,
            weft_strerror(rc));
  } else {
    char uri[WEFT_CONFIG_URI_MAX + 16];
    weft_server_address(srv, uri, sizeof uri);
    fprintf(stderr, "weft-mini-redis: listening on %s\n", uri);
    weft_cli_wait_stop(&stop);
    weft_server_close(srv);
  }
  weft_loop_group_stop(group);
  weft_loop_group_join(group);
  weft_loop_group_free(group);
  table_free();
  return rc < 0 ? 2 : 0;
}
