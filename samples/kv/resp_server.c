/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/resp_server.c: the KV server's RESP side (server_internal.h):
 * a handler after the RESP decoder that runs each command through the
 * executor (command.h) for the connection's session and streams the
 * replies into 16 KiB buffers, in RESP2 or, after HELLO 3, RESP3; one
 * flush per batch of pipelined commands, large values sent from the stored
 * blob without a copy. Pipelined commands run in batches of up to 16, their
 * keys' lookups loaded together first (resp_run_batch), within a work
 * budget per turn of the loop (kv_turn: one client's pipeline of costly
 * commands cannot hold the loop's other clients). It answers protocol
 * errors as Redis does and closes after them, after QUIT, and at once (after
 * Redis' DENIED error) for a client that protected mode refuses. */
#include "server_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

#define RESP_CHUNK 16384      /* bytes of one RESP reply buffer */
#define RESP_ARGS_ON_STACK 64 /* a command with more: its argv on the heap */
#define ZERO_COPY_MIN                                                          \
  16384 /* bulk values at least this large are sent from the stored blob,      \
           not copied */
#define RESP_LINGER_NS                                                         \
  (2 * 1000000000ull) /* a closing RESP connection waits this long for the     \
                         peer to close (resp_linger) */
#define RESP_BATCH                                                             \
  16 /* pipelined commands held until channel_read_complete, so that their     \
        keys' lookups are loaded together (resp_run_batch) */
#define RESP_HINT_KEY_MAX                                                      \
  256 /* bytes: longer first arguments are not hinted (resp_run_batch) */
_Static_assert(RESP_BATCH <= KV_PREFETCH_MAX,
               "a batch's keys are hinted in one kv_store_prefetch");
#define UNKNOWN_TEXT_MAX                                                       \
  128 /* bytes of an unknown command's name, and of its arguments, quoted      \
         in the error (Redis' limits) */

/* ---- the reply writer, streaming into the channel ---- */

typedef struct resp_conn {
  kv_server *srv;
  weft_ctx *ctx;
  kv_session sess;   /* once active (started) */
  bool started;      /* sess was initialised (channel_active) */
  weft_buf *out;     /* replies not yet written down the pipeline */
  bool broken;       /* a reply could not be written whole: every later one
                        would answer the wrong command, so nothing more is
                        written and the channel closes */
  bool closing;      /* QUIT, a protocol error or a broken reply: no more
                        commands run; the channel closes once what was written
                        is sent */
  weft_timer linger; /* ends a lingering close (resp_linger) */
  /* Commands read and not run yet, in order: run at channel_read_complete,
   * when RESP_BATCH are held, before a protocol error's reply and at
   * channel_inactive (resp_run_batch). Each holds a slice of what was read,
   * so at most RESP_BATCH commands' bytes are held. */
  weft_resp_cmd *batch[RESP_BATCH];
  size_t batched;
  kv_turn turn; /* the work budget of this turn (server_internal.h) */
  bool yielded; /* the budget was spent: reading waits for the next turn
                   (weft_channel_yield_read), held commands with it */
} resp_conn;

/* A reply write's result: on failure the connection is broken (see
 * resp_conn) and closes after the command. */
static void resp_check(resp_conn *c, int rc) {
  if (rc >= 0 || c->broken)
    return;
  c->broken = true;
  weft_channel_log(weft_ctx_channel(c->ctx), WEFT_LOG_WARN,
                   "kv: RESP: cannot write a reply: %s", weft_strerror(rc));
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

/* A null: "$-1" in RESP2, "_" in RESP3. */
static void resp_null(void *w) {
  resp_conn *c = w;
  weft_buf *b = resp_room(c, 5);
  if (b != NULL)
    resp_check(c, c->sess.resp == 3 ? weft_resp_write_null3(b)
                                    : weft_resp_write_null(b));
}

static void resp_array(void *w, size_t n) {
  weft_buf *b = resp_room(w, 24);
  if (b != NULL)
    resp_check(w, weft_resp_write_array(b, n));
}

/* A map: RESP3's type, or an array of keys and values in RESP2. */
static void resp_map(void *w, size_t pairs) {
  resp_conn *c = w;
  weft_buf *b = resp_room(c, 24);
  if (b != NULL)
    resp_check(c, c->sess.resp == 3 ? weft_resp_write_map(b, pairs)
                                    : weft_resp_write_array(b, 2 * pairs));
}

/* Text for reading (INFO, CLIENT INFO): a verbatim string in RESP3, a bulk
 * string in RESP2. */
static void resp_verbatim(void *w, const void *text, size_t len) {
  resp_conn *c = w;
  if (c->sess.resp != 3)
    return resp_bulk(c, text, len, NULL);
  weft_buf *b = resp_room(c, weft_resp_verbatim_size(len));
  if (b != NULL)
    resp_check(c, weft_resp_write_verbatim(b, "txt", text, len));
}

static const kv_reply_ops resp_ops = {resp_simple, resp_error,   resp_integer,
                                      resp_bulk,   resp_null,    resp_array,
                                      resp_map,    resp_verbatim};

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

/* Runs one command, unless the connection is closing. Returns true when
 * the connection must close after it (QUIT, or a reply that could not be
 * written): the caller then calls resp_close_after_sent, which may free
 * `c`, last. */
static bool resp_run(resp_conn *c, weft_resp_cmd *cmd) {
  if (c->closing) {
    weft_resp_cmd_release(cmd); /* after QUIT or a failure: not run */
    return false;
  }
  int id = kv_cmd_from_name(cmd->argv[0].ptr, cmd->argv[0].len);
  if (id != 0) {
    kv_arg stack[RESP_ARGS_ON_STACK];
    size_t argc = cmd->argc - 1; /* < KV_RESP_MAX_ARGS: the decoder's */
    kv_arg *argv =
        argc <= RESP_ARGS_ON_STACK ? stack : malloc(argc * sizeof *argv);
    if (argv == NULL) {
      kv_multi_flag(&c->sess);
      resp_ops.error(c, "ERR out of memory for the command's arguments");
    } else {
      for (size_t i = 0; i < argc; i++)
        argv[i] = (kv_arg){cmd->argv[i + 1].ptr, cmd->argv[i + 1].len};
      kv_exec(&c->sess, id, argc, argv, &resp_ops, c);
      if (argv != stack)
        free(argv);
    }
  } else {
    kv_multi_flag(&c->sess); /* EXEC then aborts, as in Redis */
    resp_unknown(c, cmd);
  }
  weft_resp_cmd_release(cmd);
  return c->broken || c->sess.quit;
}

/* Releases n commands without running them. */
static void resp_release_cmds(weft_resp_cmd **cmds, size_t n) {
  for (size_t i = 0; i < n; i++)
    weft_resp_cmd_release(cmds[i]);
}

/* Drops the held commands without running them. */
static void resp_drop_batch(resp_conn *c) {
  resp_release_cmds(c->batch, c->batched);
  c->batched = 0;
}

/* A command left the session blocked (a MIGRATE waits on its target,
 * migrate.h): the commands after it, `rest` of them from `from`, stay held
 * in order, and the channel reads no more (the decoder stops between
 * messages, the socket buffers the rest) until resp_resume. */
static void resp_hold(resp_conn *c, weft_resp_cmd **from, size_t rest) {
  memmove(c->batch, from, rest * sizeof *from);
  c->batched = rest;
  weft_channel_set_option(weft_ctx_channel(c->ctx), WEFT_OPT_AUTO_READ, 0);
}

/* ---- the work budget per turn (server_internal.h, kv_turn) ---- */

/* After a yield: true once the channel reads again (the next turn). */
static bool resp_resumed(resp_conn *c) {
  if (!c->yielded || !weft_channel_is_reading(weft_ctx_channel(c->ctx)))
    return false;
  c->yielded = false;
  kv_turn_reset(&c->turn);
  return true;
}

/* Keeps the `n` commands from `from` for the next turn and yields. */
static void resp_yield(resp_conn *c, size_t from, size_t n) {
  memmove(c->batch, c->batch + from, (n - from) * sizeof c->batch[0]);
  c->batched = n - from;
  c->yielded = true;
  weft_channel_yield_read(weft_ctx_channel(c->ctx));
}

/* Runs the held commands in order, within the turn's budget (`budget`
 * false: all of them, for a closing connection). First, when there are
 * several, it hints
 * the store at each one's first argument (the key of GET, SET and most
 * others; a hint on a non-key costs a hash and a useless line, so only
 * short ones): the loads of their buckets, entries and values then
 * overlap instead of stalling one command each (kv_store_prefetch). A
 * command that ends the connection ends the batch: the rest are dropped
 * (not run, as after QUIT) and the close comes last. Returns true then:
 * `c` may have been freed. Once the budget is spent, the rest wait for the
 * next turn (resp_yield); while yielded it runs nothing. */
static bool resp_run_batch_budget(resp_conn *c, bool budget) {
  size_t n = c->batched;
  if (c->sess.blocked)
    return false; /* they run at resp_resume */
  if (budget && c->yielded)
    return false;
  if (n > 1 && !c->closing) {
    kv_key keys[RESP_BATCH];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      const weft_resp_cmd *cmd = c->batch[i];
      if (cmd->argc >= 2 && cmd->argv[1].len <= RESP_HINT_KEY_MAX)
        keys[k++] = (kv_key){cmd->argv[1].ptr, cmd->argv[1].len};
    }
    kv_store_prefetch(c->srv->shared.store, k, keys);
  }
  c->batched = 0;
  for (size_t i = 0; i < n; i++) {
    if (c->sess.blocked) {
      resp_hold(c, c->batch + i, n - i);
      return false;
    }
    if (budget)
      kv_turn_start(&c->turn);
    if (resp_run(c, c->batch[i])) {
      resp_release_cmds(c->batch + i + 1, n - i - 1);
      resp_close_after_sent(c);
      return true;
    }
    if (budget && !c->closing && !c->sess.blocked && kv_turn_spent(&c->turn)) {
      resp_yield(c, i + 1, n);
      return false;
    }
  }
  if (c->sess.blocked)
    resp_hold(c, c->batch, 0);
  return false;
}

static bool resp_run_batch(resp_conn *c) {
  return resp_run_batch_budget(c, true);
}

/* Holds one command for resp_run_batch, which runs when RESP_BATCH are
 * held or the read ends (channel_read_complete). The first command after
 * a yield runs what the last turn left first: a batch always has room
 * then, as a turn runs at least one command. */
static void resp_read(weft_ctx *ctx, void *msg) {
  resp_conn *c = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_resp_cmd_type)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft_resp_cmd *cmd = msg;
  if (c->closing || !c->started) {
    weft_resp_cmd_release(cmd); /* after QUIT or a failure: not run */
    return;
  }
  if (c->batched == RESP_BATCH && c->sess.blocked) {
    /* a decoder went on reading behind a MIGRATE: never more than the
     * batch */
    weft_resp_cmd_release(cmd);
    weft_channel_log(weft_ctx_channel(ctx), WEFT_LOG_WARN,
                     "kv: RESP: a command came while %d wait behind a "
                     "MIGRATE; closing",
                     RESP_BATCH);
    resp_close_after_sent(c);
    return;
  }
  /* A full batch here (nothing should fire commands while yielded: the
   * decoder stops) runs whole, so that the command has its place. */
  if ((resp_resumed(c) && resp_run_batch(c)) ||
      (c->batched == RESP_BATCH && resp_run_batch_budget(c, false))) {
    weft_resp_cmd_release(cmd); /* the connection closes: not run */
    return;
  }
  c->batch[c->batched++] = cmd;
  /* Before AUTH each command runs as it is read, as Redis does: an AUTH
   * must lift the decoder's limits before the next command is parsed. */
  if (c->batched == RESP_BATCH || !c->sess.authenticated)
    resp_run_batch(c); /* last: it may free c */
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
  if (resp_run_batch_budget(c, false)) /* the replies before the error's,
                                          in order */
    return;
  if (c->closing)
    return;
  weft_channel_log(weft_ctx_channel(ctx), WEFT_LOG_INFO,
                   "kv: RESP: %s; closing", reason);
  char msg[256];
  int n = snprintf(msg, sizeof msg, "ERR %s", reason);
  resp_error_text(c, msg, n < (int)sizeof msg ? (size_t)n : sizeof msg - 1);
  resp_close_after_sent(c);
}

/* Writes and flushes the replies so far. */
static void resp_flush(resp_conn *c) {
  if (c->out != NULL && weft_buf_readable(c->out) > 0) {
    weft_ctx_write(c->ctx, c->out, WEFT_PROMISE_NONE);
    c->out = NULL;
  }
  weft_ctx_flush(c->ctx);
}

/* One flush per batch of commands read together (pipelining); the end of
 * a turn, unless it yielded (then the replies so far still go out). */
static void resp_read_complete(weft_ctx *ctx) {
  resp_conn *c = weft_ctx_state(ctx);
  resp_resumed(c);
  if (resp_run_batch(c))
    return; /* resp_close_after_sent flushed, and may have freed c */
  if (!c->yielded)
    kv_turn_reset(&c->turn);
  resp_flush(c);
}

/* Reading resumed after a yield: the decoder (before this handler) has
 * run what waited in its cumulation, if anything; the commands the last
 * turn left in the batch run now, if nothing ran them yet. */
static void resp_user_event(weft_ctx *ctx, void *event) {
  resp_conn *c = weft_ctx_state(ctx);
  if (event == &weft_event_read_resumed && c->started && !c->closing &&
      (resp_resumed(c) || (!c->yielded && c->batched > 0))) {
    if (resp_run_batch(c))
      return; /* closing: the event goes no further */
    resp_flush(c);
  }
  weft_ctx_fire_user_event(ctx, event);
}

/* The session's MIGRATE ended and its reply is written (session.h,
 * resume): the held commands run, everything is flushed, and the channel
 * reads again unless one of them blocked it anew. */
static void resp_resume(kv_session *s) {
  resp_conn *c = (resp_conn *)((char *)s - offsetof(resp_conn, sess));
  weft_channel *ch = weft_ctx_channel(c->ctx);
  weft_channel_retain(ch); /* resp_read_complete may close it and free c */
  resp_read_complete(c->ctx);
  if (weft_channel_is_active(ch) && !c->closing && !c->sess.blocked)
    weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 1);
  weft_channel_release(ch);
}

/* The connection is up: its session starts. A client that protected
 * mode refuses gets Redis' DENIED error and the close, as Redis does on
 * accept; what it sends is not run. */
static void resp_active(weft_ctx *ctx) {
  resp_conn *c = weft_ctx_state(ctx);
  kv_session_init(&c->sess, &c->srv->shared, weft_ctx_channel(ctx), false);
  c->sess.resume = resp_resume;
  c->started = true;
  if (c->sess.denied) {
    resp_error(c, KV_DENIED_TEXT);
    resp_close_after_sent(c);
  }
  weft_ctx_fire_channel_active(ctx);
}

/* The connection is gone: the held commands still run, for their effect
 * on the store (they would have, run as they were read); their replies go
 * nowhere. */
static void resp_inactive(weft_ctx *ctx) {
  resp_run_batch_budget(weft_ctx_state(ctx),
                        false); /* the channel is closed already:
                                   resp_close_after_sent frees nothing */
  weft_ctx_fire_channel_inactive(ctx);
}

static void resp_removed(weft_ctx *ctx) {
  resp_conn *c = weft_ctx_state(ctx);
  resp_drop_batch(c);
  weft_timer_stop(&c->linger);
  weft_buf_release(c->out);
  if (c->started)
    kv_session_fini(&c->sess);
  free(c);
}

static const weft_handler resp_handler = {.name = "kv-resp",
                                          .channel_active = resp_active,
                                          .channel_inactive = resp_inactive,
                                          .channel_read = resp_read,
                                          .channel_read_complete =
                                              resp_read_complete,
                                          .exception_caught = resp_exception,
                                          .user_event = resp_user_event,
                                          .handler_removed = resp_removed};

void kv_resp_channel_init(weft_channel *ch, void *arg) {
  kv_server *srv = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  resp_conn *c = calloc(1, sizeof *c);
  if (c != NULL) {
    c->srv = srv;
    weft_timer_init(weft_channel_loop(ch), &c->linger);
  }
  const weft_resp_options *o = srv->shared.auth.default_pass
                                   ? &srv->limits.resp_unauth
                                   : &srv->limits.resp;
  if (c == NULL || weft_resp_decoder_add_last(p, "resp", o) < 0 ||
      kv_conn_limits_watch(&srv->limits, ch, "resp") < 0 ||
      weft_pipeline_add_last(p, "kv", &resp_handler, c) < 0) {
    free(c);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  c->ctx = weft_pipeline_context(p, "kv");
}
