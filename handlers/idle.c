/* SPDX-License-Identifier: Apache-2.0 */
/* The idle-state handler: reader / writer / all idle -> user_event. */
#include <stdlib.h>

#include <weft/channel.h>
#include <weft/clock.h>
#include <weft/error.h>
#include <weft/idle.h>
#include <weft/timer.h>

static void idle_event_release(void *msg) { (void)msg; }

const weft_msg_type weft_idle_event_type = {.name = "weft_idle_event",
                                            .release = idle_event_release};

enum { KIND_READER, KIND_WRITER, KIND_ALL, KINDS };

typedef struct idle_handler idle_handler;

typedef struct idle_kind {
  idle_handler *h;
  weft_timer timer;
  uint64_t timeout_ns; /* 0 = off */
  bool first;          /* the next event is the first since activity */
} idle_kind;

struct idle_handler {
  weft_ctx *ctx;
  idle_kind kinds[KINDS];
  uint64_t last_read_ns, last_write_ns;
  bool started;
  bool removed; /* handler_removed ran inside a timer's event */
  int depth;    /* events fired by this handler on the stack */
};

static uint64_t last_activity(const idle_handler *h, int kind) {
  if (kind == KIND_READER)
    return h->last_read_ns;
  if (kind == KIND_WRITER)
    return h->last_write_ns;
  return h->last_read_ns > h->last_write_ns ? h->last_read_ns
                                            : h->last_write_ns;
}

/* The timer is not reset on every read (that would cost a heap update per
 * message): it fires at the old deadline and, if there was activity since,
 * sleeps again until the new one. */
static void on_timer(void *arg) {
  idle_kind *k = arg;
  idle_handler *h = k->h;
  int kind = (int)(k - h->kinds);
  uint64_t now = weft_now_ns();
  uint64_t deadline = last_activity(h, kind) + k->timeout_ns;
  if (now < deadline) {
    weft_timer_start(&k->timer, deadline - now, 0, on_timer, k);
    return;
  }
  weft_timer_start(&k->timer, k->timeout_ns, 0, on_timer, k);
  weft_idle_event ev = {.msg = {&weft_idle_event_type},
                        .state = (weft_idle_state)(kind + 1),
                        .first = k->first};
  k->first = false;
  h->depth++;
  weft_ctx_fire_user_event(h->ctx, &ev);
  if (--h->depth == 0 && h->removed)
    free(h);
}

static void start(idle_handler *h) {
  if (h->started)
    return;
  h->started = true;
  h->last_read_ns = h->last_write_ns = weft_now_ns();
  for (int i = 0; i < KINDS; i++) {
    idle_kind *k = &h->kinds[i];
    k->first = true;
    if (k->timeout_ns > 0)
      weft_timer_start(&k->timer, k->timeout_ns, 0, on_timer, k);
  }
}

static void stop(idle_handler *h) {
  for (int i = 0; i < KINDS; i++)
    weft_timer_stop(&h->kinds[i].timer);
}

static void idle_added(weft_ctx *ctx) {
  idle_handler *h = weft_ctx_state(ctx);
  h->ctx = ctx;
  weft_loop *loop = weft_channel_loop(weft_ctx_channel(ctx));
  for (int i = 0; i < KINDS; i++) {
    h->kinds[i].h = h;
    weft_timer_init(loop, &h->kinds[i].timer);
  }
  if (weft_channel_is_active(weft_ctx_channel(ctx)))
    start(h);
}

static void idle_active(weft_ctx *ctx) {
  start(weft_ctx_state(ctx));
  weft_ctx_fire_channel_active(ctx);
}

static void idle_inactive(weft_ctx *ctx) {
  stop(weft_ctx_state(ctx));
  weft_ctx_fire_channel_inactive(ctx);
}

static void idle_read(weft_ctx *ctx, void *msg) {
  idle_handler *h = weft_ctx_state(ctx);
  h->last_read_ns = weft_now_ns();
  h->kinds[KIND_READER].first = h->kinds[KIND_ALL].first = true;
  weft_ctx_fire_channel_read(ctx, msg);
}

static void idle_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  idle_handler *h = weft_ctx_state(ctx);
  h->last_write_ns = weft_now_ns();
  h->kinds[KIND_WRITER].first = h->kinds[KIND_ALL].first = true;
  weft_ctx_write(ctx, msg, promise);
}

static void idle_removed(weft_ctx *ctx) {
  idle_handler *h = weft_ctx_state(ctx);
  stop(h);
  if (h->depth > 0)
    h->removed = true; /* on_timer frees it on its way out */
  else
    free(h);
}

static const weft_handler idle_handler_ops = {.name = "idle",
                                              .handler_added = idle_added,
                                              .handler_removed = idle_removed,
                                              .channel_active = idle_active,
                                              .channel_inactive = idle_inactive,
                                              .channel_read = idle_read,
                                              .write = idle_write,
                                              /* any message: passed on */
                                              .file_regions = true};

int weft_idle_add_last(weft_pipeline *p, const char *name,
                       const weft_idle_options *opts) {
  if (opts == NULL || (opts->reader_idle_ns == 0 && opts->writer_idle_ns == 0 &&
                       opts->all_idle_ns == 0))
    return WEFT_EINVAL;
  idle_handler *h = calloc(1, sizeof *h);
  if (h == NULL)
    return WEFT_ENOMEM;
  h->kinds[KIND_READER].timeout_ns = opts->reader_idle_ns;
  h->kinds[KIND_WRITER].timeout_ns = opts->writer_idle_ns;
  h->kinds[KIND_ALL].timeout_ns = opts->all_idle_ns;
  int rc = weft_pipeline_add_last(p, name, &idle_handler_ops, h);
  if (rc < 0)
    free(h);
  return rc;
}
