/* SPDX-License-Identifier: Apache-2.0 */
/* The channel pipeline: a doubly linked list of handler contexts between a
 * head (the transport side) and a tail (the application's end), with event
 * dispatch in both directions. See include/weft/pipeline.h for the rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>

#include "channel/channel_internal.h"

/* ---- dispatch bookkeeping ----
 * Handlers may remove themselves (or others) while an event runs, so a
 * removed context is unlinked at once but freed only when no event is
 * running on the pipeline (depth 0): the forwarding calls still on the stack
 * may read its prev/next pointers. */

static void free_ctx(weft_ctx *ctx) {
  free(ctx->name);
  free(ctx);
}

static void enter(weft_pipeline *p) { p->depth++; }

static void leave(weft_pipeline *p) {
  if (--p->depth > 0)
    return;
  while (p->graveyard != NULL) {
    weft_ctx *ctx = p->graveyard;
    p->graveyard = ctx->graveyard_next;
    free_ctx(ctx);
  }
  /* The channel lost its last reference inside this event: `p` is part of
   * it, so nothing may touch either after this. */
  if (p->channel != NULL && p->channel->free_pending)
    weft__channel_free(p->channel);
}

/* Next context from `ctx` along `link` that handles `op`: towards the
 * tail (next) for an inbound op, the head (prev) for an outbound one. The
 * tail handles every inbound op and the head every outbound one, so the
 * walk always ends. */
#define NEXT_ALONG(ctx, op, link)                                              \
  ({                                                                           \
    weft_ctx *n_ = (ctx)->link;                                                \
    while (n_->handler->op == NULL)                                            \
      n_ = n_->link;                                                           \
    n_;                                                                        \
  })
#define NEXT_INBOUND(ctx, op) NEXT_ALONG(ctx, op, next)
#define NEXT_OUTBOUND(ctx, op) NEXT_ALONG(ctx, op, prev)

/* Calls `op` of the next context that has one (NEXT_INBOUND or
 * NEXT_OUTBOUND from `ctx`, as `dir` says) with `args`, in parentheses,
 * where that context is `n`; inside an event of the pipeline, so handlers
 * removed meanwhile are freed after it. */
#define FIRE(dir, ctx, op, args)                                               \
  do {                                                                         \
    weft_ctx *n = NEXT_##dir(ctx, op);                                         \
    enter(n->pipeline);                                                        \
    n->handler->op args;                                                       \
    leave(n->pipeline);                                                        \
  } while (0)

/* ---- inbound ---- */

void weft_ctx_fire_channel_active(weft_ctx *ctx) {
  FIRE(INBOUND, ctx, channel_active, (n));
}

void weft_ctx_fire_channel_inactive(weft_ctx *ctx) {
  FIRE(INBOUND, ctx, channel_inactive, (n));
}

void weft_ctx_fire_channel_read(weft_ctx *ctx, void *msg) {
  FIRE(INBOUND, ctx, channel_read, (n, msg));
}

void weft_ctx_fire_channel_read_complete(weft_ctx *ctx) {
  FIRE(INBOUND, ctx, channel_read_complete, (n));
}

void weft_ctx_fire_writability_changed(weft_ctx *ctx, bool writable) {
  FIRE(INBOUND, ctx, writability_changed, (n, writable));
}

void weft_ctx_fire_user_event(weft_ctx *ctx, void *event) {
  FIRE(INBOUND, ctx, user_event, (n, event));
}

void weft_ctx_fire_exception_caught(weft_ctx *ctx, int err,
                                    const char *reason) {
  FIRE(INBOUND, ctx, exception_caught, (n, err, reason));
}

void weft_pipeline_fire_channel_active(weft_pipeline *p) {
  weft_ctx_fire_channel_active(&p->head);
}
void weft_pipeline_fire_channel_inactive(weft_pipeline *p) {
  weft_ctx_fire_channel_inactive(&p->head);
}
void weft_pipeline_fire_channel_read(weft_pipeline *p, void *msg) {
  p->channel->limits.activity++; /* what the idle timeout watches */
  weft_ctx_fire_channel_read(&p->head, msg);
}
void weft_pipeline_fire_channel_read_complete(weft_pipeline *p) {
  weft_ctx_fire_channel_read_complete(&p->head);
}
void weft_pipeline_fire_writability_changed(weft_pipeline *p, bool writable) {
  weft_ctx_fire_writability_changed(&p->head, writable);
}
void weft_pipeline_fire_user_event(weft_pipeline *p, void *event) {
  weft_ctx_fire_user_event(&p->head, event);
}
void weft_pipeline_fire_exception_caught(weft_pipeline *p, int err,
                                         const char *reason) {
  weft_ctx_fire_exception_caught(&p->head, err, reason);
}

/* ---- outbound ---- */

static void head_write(weft_ctx *ctx, void *msg, weft_promise promise);
static void write_region_as_bufs(weft_ctx *ctx, weft_file_region *r,
                                 weft_promise promise);

/* Whether handler context `n` takes a file region as it is: the head when
 * its transport sends from files, another handler when it says so. */
static bool takes_regions(const weft_ctx *n) {
  if (n->handler->write == head_write)
    return n->pipeline->channel->transport->caps &
           WEFT_TRANSPORT_CAP_FILE_REGION;
  return n->handler->file_regions;
}

bool weft_ctx_file_region_direct(weft_ctx *ctx) {
  weft_ctx *n = NEXT_OUTBOUND(ctx, write);
  while (n->handler->write != head_write && takes_regions(n))
    n = NEXT_OUTBOUND(n, write);
  return takes_regions(n);
}

void weft_ctx_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  weft_ctx *n = NEXT_OUTBOUND(ctx, write);
  if (weft_msg_is(msg, &weft_file_region_type) && !takes_regions(n)) {
    write_region_as_bufs(ctx, msg, promise);
    return;
  }
  enter(n->pipeline);
  n->handler->write(n, msg, promise);
  leave(n->pipeline);
}

/* The read of region `r` stopped at `err`: releases it and, unless the
 * channel is closing anyway (closed, or past its output limit), closes it
 * with the reason, then fails the promise. The reason first: a promise
 * callback may close the channel quietly. */
static void region_read_failed(weft_channel *ch, weft_file_region *r, int err,
                               weft_promise promise) {
  char reason[160];
  weft_file_region_failure(reason, sizeof reason, r, "pread", err);
  weft_file_region_release(r);
  if (err != WEFT_ECLOSED && err != WEFT_ENOBUFS &&
      ch->state == WEFT_CHANNEL_ACTIVE)
    weft_channel_transport_closed(ch, err, reason);
  weft_promise_complete(promise, err);
}

/* File regions where the next writer cannot take one: the region's bytes
 * are read into buffers (64 KiB each, pread) and written from `ctx` in
 * order, the promise on the last. Netty leaves this to each handler (its
 * SslHandler refuses a FileRegion; ChunkedWriteHandler converts); one
 * place in the pipeline keeps every handler and transport correct without
 * code of its own (docs/architecture.md, "File regions"). A file shorter
 * than the region fails the promise and closes the channel with the
 * reason. Inside an event of the pipeline: the writes may close the
 * channel, which must stay valid until the loop ends. */
static void write_region_as_bufs(weft_ctx *ctx, weft_file_region *r,
                                 weft_promise promise) {
  weft_pipeline *p = ctx->pipeline;
  weft_channel *ch = p->channel;
  enter(p);
  for (;;) {
    weft_buf *b;
    int err = ch->state >= WEFT_CHANNEL_INACTIVE ? WEFT_ECLOSED
              : weft__limits_refuse_write(ch)
                  ? WEFT_ENOBUFS /* past the output limit: read no more */
                  : weft_file_region_read(r, weft_loop_pool(ch->loop),
                                          WEFT_POOL_MAX_CLASS, &b);
    if (err < 0) {
      region_read_failed(ch, r, err, promise);
      break;
    }
    bool last = weft_file_region_left(r) == 0;
    weft_ctx_write(ctx, b, last ? promise : WEFT_PROMISE_NONE);
    if (last) {
      weft_file_region_release(r);
      break;
    }
  }
  leave(p);
}

/* The bytes go straight into the queue's tail buffer when the next writer
 * is the head and the channel is open (head_write's checks). No
 * enter/leave: weft__outbound_add_bytes touches nothing after the handlers
 * a writability change runs (they enter and leave themselves), and
 * changes nothing when it returns false. After a true return the channel
 * may be gone: callers return at once. */
bool weft__pipeline_write_bytes_fast(weft_ctx *ctx, const void *data,
                                     size_t len, weft_promise promise) {
  weft_ctx *n = NEXT_OUTBOUND(ctx, write);
  weft_channel *ch = n->pipeline->channel;
  return n->handler->write == head_write && ch->state < WEFT_CHANNEL_INACTIVE &&
         data != NULL && weft__outbound_add_bytes(ch, data, len, promise);
}

void weft__pipeline_write_bytes_slow(weft_ctx *ctx, const void *data,
                                     size_t len, weft_promise promise) {
  weft_channel *ch = ctx->pipeline->channel;
  weft_buf *b = weft_buf_alloc(weft_loop_pool(ch->loop), len);
  if (b == NULL) {
    weft_promise_complete(promise, WEFT_ENOMEM);
    return;
  }
  int rc = weft_buf_write_bytes(b, data, len);
  if (rc < 0) { /* data NULL with len > 0 */
    weft_buf_release(b);
    weft_promise_complete(promise, rc);
    return;
  }
  weft_ctx_write(ctx, b, promise);
}

/* Anything the fast path does not take goes the general way with a buffer
 * of its own, so handlers, errors and promises behave exactly as for
 * weft_ctx_write. */
void weft_ctx_write_bytes(weft_ctx *ctx, const void *data, size_t len,
                          weft_promise promise) {
  if (!weft__pipeline_write_bytes_fast(ctx, data, len, promise))
    weft__pipeline_write_bytes_slow(ctx, data, len, promise);
}

void weft_ctx_flush(weft_ctx *ctx) { FIRE(OUTBOUND, ctx, flush, (n)); }

void weft_ctx_write_and_flush(weft_ctx *ctx, void *msg, weft_promise promise) {
  weft_ctx_write(ctx, msg, promise);
  weft_ctx_flush(ctx);
}

void weft_ctx_close(weft_ctx *ctx, weft_promise promise) {
  FIRE(OUTBOUND, ctx, close, (n, promise));
}

/* ---- head and tail ---- */

static void head_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  weft_channel *ch = ctx->pipeline->channel;
  int err = 0;
  if (ch->state >= WEFT_CHANNEL_INACTIVE)
    err = WEFT_ECLOSED;
  else if (weft_msg_is(msg, &weft_file_region_type))
    err = weft__outbound_add_region(ch, msg, promise); /* takes_regions */
  else if (!weft_msg_is(msg, &weft_buf_msg_type))
    err = WEFT_EINVAL;
  else
    err = weft__outbound_add(ch, (weft_buf *)msg, promise);
  if (err == 0)
    return;
  if (err == WEFT_EINVAL)
    weft_channel_log(ch, WEFT_LOG_WARN,
                     "a %s reached the head; only weft_buf can be "
                     "written (is an encoder missing?)",
                     weft_msg_type_name(msg));
  weft_msg_release(msg);
  weft_promise_complete(promise, err);
}

static void head_flush(weft_ctx *ctx) {
  weft_channel *ch = ctx->pipeline->channel;
  if (ch->state != WEFT_CHANNEL_ACTIVE)
    return; /* queued writes fail when the channel closes */
  weft__outbound_mark_flushed(&ch->out);
  if (weft_outbound_is_empty(ch))
    return;
  int rc = ch->transport->flush(ch);
  if (rc < 0)
    weft_channel_transport_closed(ch, rc, "write failed");
}

static void head_close(weft_ctx *ctx, weft_promise promise) {
  weft__channel_close(ctx->pipeline->channel, promise);
}

static void tail_read(weft_ctx *ctx, void *msg) {
  weft_channel *ch = ctx->pipeline->channel;
  if (ch->tail_hooks != NULL && ch->tail_hooks->read(ch, msg))
    return;
  weft_log(WEFT_LOG_DEBUG,
           "channel %llu: a %s reached the tail of the pipeline and was "
           "released (no handler consumed it)",
           (unsigned long long)ch->id, weft_msg_type_name(msg));
  weft_msg_release(msg);
}

static void tail_exception(weft_ctx *ctx, int err, const char *reason) {
  weft_channel *ch = ctx->pipeline->channel;
  if (ch->tail_hooks != NULL)
    ch->tail_hooks->exception(ch, err);
  /* A peer that resets its connection, or is gone when we write, is the
   * peer's doing and routine for a server (wrk resets every connection at
   * its end): INFO, as nginx logs it, so that one WARN line per client
   * does not bury the warnings that need a look. */
  bool peer_gone = err == WEFT_ECONNRESET || err == WEFT_EPIPE;
  weft_channel_log(ch, peer_gone ? WEFT_LOG_INFO : WEFT_LOG_WARN,
                   "unhandled exception %s (%s): %s; closing the channel",
                   weft_err_name(err), weft_strerror(err),
                   reason != NULL ? reason : "");
  weft__channel_close(ch, WEFT_PROMISE_NONE);
}

static void tail_ignore(weft_ctx *ctx) { (void)ctx; }
static void tail_ignore_writable(weft_ctx *ctx, bool w) { (void)ctx, (void)w; }
static void tail_ignore_event(weft_ctx *ctx, void *e) { (void)ctx, (void)e; }

static const weft_handler head_handler = {.name = "head",
                                          .write = head_write,
                                          .flush = head_flush,
                                          .close = head_close};

static const weft_handler tail_handler = {.name = "tail",
                                          .channel_active = tail_ignore,
                                          .channel_inactive = tail_ignore,
                                          .channel_read = tail_read,
                                          .channel_read_complete = tail_ignore,
                                          .writability_changed =
                                              tail_ignore_writable,
                                          .user_event = tail_ignore_event,
                                          .exception_caught = tail_exception};

void weft__pipeline_init(weft_pipeline *p, weft_channel *ch) {
  memset(p, 0, sizeof *p);
  p->channel = ch;
  p->head = (weft_ctx){.pipeline = p,
                       .next = &p->tail,
                       .handler = &head_handler,
                       .name = "head"};
  p->tail = (weft_ctx){.pipeline = p,
                       .prev = &p->head,
                       .handler = &tail_handler,
                       .name = "tail"};
}

/* ---- building ---- */

static weft_ctx *find(weft_pipeline *p, const char *name) {
  for (weft_ctx *c = p->head.next; c != &p->tail; c = c->next)
    if (strcmp(c->name, name) == 0)
      return c;
  return NULL;
}

/* Links a new context between `prev` and prev->next. */
static int insert_after(weft_pipeline *p, weft_ctx *prev, const char *name,
                        const weft_handler *h, void *state) {
  if (name == NULL || h == NULL)
    return WEFT_EINVAL;
  if (find(p, name) != NULL)
    return WEFT_EEXIST;
  weft_ctx *ctx = calloc(1, sizeof *ctx);
  char *copy = strdup(name);
  if (ctx == NULL || copy == NULL) {
    free(ctx);
    free(copy);
    return WEFT_ENOMEM;
  }
  *ctx = (weft_ctx){.pipeline = p,
                    .prev = prev,
                    .next = prev->next,
                    .handler = h,
                    .state = state,
                    .name = copy};
  prev->next->prev = ctx;
  prev->next = ctx;
  if (h->handler_added != NULL) {
    enter(p);
    h->handler_added(ctx);
    leave(p);
  }
  return 0;
}

int weft_pipeline_add_first(weft_pipeline *p, const char *name,
                            const weft_handler *h, void *state) {
  return insert_after(p, &p->head, name, h, state);
}

int weft_pipeline_add_last(weft_pipeline *p, const char *name,
                           const weft_handler *h, void *state) {
  return insert_after(p, p->tail.prev, name, h, state);
}

int weft_pipeline_add_before(weft_pipeline *p, const char *base,
                             const char *name, const weft_handler *h,
                             void *state) {
  weft_ctx *b = find(p, base);
  return b == NULL ? WEFT_ENOENT : insert_after(p, b->prev, name, h, state);
}

int weft_pipeline_add_after(weft_pipeline *p, const char *base,
                            const char *name, const weft_handler *h,
                            void *state) {
  weft_ctx *b = find(p, base);
  return b == NULL ? WEFT_ENOENT : insert_after(p, b, name, h, state);
}

/* Unlinks `ctx` (keeping its own pointers), calls handler_removed and puts
 * it in the graveyard until no event is running. */
static void unlink_ctx(weft_pipeline *p, weft_ctx *ctx) {
  ctx->prev->next = ctx->next;
  ctx->next->prev = ctx->prev;
  ctx->removed = true;
  enter(p);
  if (ctx->handler->handler_removed != NULL)
    ctx->handler->handler_removed(ctx);
  ctx->graveyard_next = p->graveyard;
  p->graveyard = ctx;
  leave(p);
}

int weft_pipeline_remove(weft_pipeline *p, const char *name) {
  weft_ctx *ctx = name != NULL ? find(p, name) : NULL;
  if (ctx == NULL)
    return WEFT_ENOENT;
  unlink_ctx(p, ctx);
  return 0;
}

int weft_pipeline_replace(weft_pipeline *p, const char *old_name,
                          const char *new_name, const weft_handler *h,
                          void *state) {
  weft_ctx *old = old_name != NULL ? find(p, old_name) : NULL;
  if (old == NULL)
    return WEFT_ENOENT;
  if (new_name == NULL || h == NULL)
    return WEFT_EINVAL;
  if (strcmp(old_name, new_name) != 0 && find(p, new_name) != NULL)
    return WEFT_EEXIST;
  weft_ctx *prev = old->prev;
  unlink_ctx(p, old);
  return insert_after(p, prev, new_name, h, state);
}

void weft__pipeline_destroy(weft_pipeline *p) {
  enter(p);
  while (p->tail.prev != &p->head)
    unlink_ctx(p, p->tail.prev);
  leave(p);
}

weft_ctx *weft_pipeline_context(weft_pipeline *p, const char *name) {
  return name != NULL ? find(p, name) : NULL;
}

weft_channel *weft_pipeline_channel(weft_pipeline *p) { return p->channel; }

void *weft_ctx_state(weft_ctx *ctx) { return ctx->state; }
const weft_handler *weft_ctx_handler(const weft_ctx *ctx) {
  return ctx->handler;
}
void weft_ctx_set_state(weft_ctx *ctx, void *state) { ctx->state = state; }
const char *weft_ctx_name(const weft_ctx *ctx) { return ctx->name; }
weft_channel *weft_ctx_channel(weft_ctx *ctx) { return ctx->pipeline->channel; }
weft_pipeline *weft_ctx_pipeline(weft_ctx *ctx) { return ctx->pipeline; }
bool weft_ctx_is_removed(const weft_ctx *ctx) { return ctx->removed; }
