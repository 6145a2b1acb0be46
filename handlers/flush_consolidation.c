/* SPDX-License-Identifier: Apache-2.0 */
/* Flush consolidation (Netty's FlushConsolidationHandler). */
#include <stdlib.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/flush_consolidation.h>
#include <weft/loop.h>

#include "codec/codec_internal.h"

typedef struct consolidator {
  weft_ctx *ctx;
  weft_flush_consolidation_options o;
  int held;            /* flushes held back since the last one sent */
  bool reading;        /* between channel_read and channel_read_complete */
  bool task_scheduled; /* a flush task is queued on the loop */
  bool removed;        /* removed while the task was queued: it frees */
} consolidator;

void weft_flush_consolidation_options_init(
    weft_flush_consolidation_options *o) {
  *o = (weft_flush_consolidation_options){.explicit_flush_after_flushes = 256};
}

static void flush_held(consolidator *s) {
  if (s->held == 0)
    return;
  s->held = 0;
  weft_ctx_flush(s->ctx);
}

static void flush_task(void *arg) {
  consolidator *s = arg;
  s->task_scheduled = false;
  if (s->removed) {
    free(s);
    return;
  }
  flush_held(s);
}

/* Holds one more flush; sends them once the limit is reached. */
static bool hold(consolidator *s) {
  if (++s->held < s->o.explicit_flush_after_flushes)
    return true;
  flush_held(s);
  return false;
}

static void fc_flush(weft_ctx *ctx) {
  consolidator *s = weft_ctx_state(ctx);
  if (s->reading) {
    hold(s); /* channel_read_complete sends it */
    return;
  }
  if (!s->o.consolidate_when_no_read) {
    weft_ctx_flush(ctx);
    return;
  }
  if (!hold(s) || s->task_scheduled)
    return;
  weft_loop *loop = weft_channel_loop(weft_ctx_channel(ctx));
  if (weft_loop_execute(loop, flush_task, s) == 0)
    s->task_scheduled = true;
  else
    flush_held(s); /* the loop is closing: send now */
}

static void fc_read(weft_ctx *ctx, void *msg) {
  consolidator *s = weft_ctx_state(ctx);
  s->reading = true;
  weft_ctx_fire_channel_read(ctx, msg);
}

static void fc_read_complete(weft_ctx *ctx) {
  consolidator *s = weft_ctx_state(ctx);
  s->reading = false;
  flush_held(s);
  weft_ctx_fire_channel_read_complete(ctx);
}

static void fc_writability(weft_ctx *ctx, bool writable) {
  consolidator *s = weft_ctx_state(ctx);
  if (!writable)
    flush_held(s); /* let the queue drain rather than sit on it */
  weft_ctx_fire_writability_changed(ctx, writable);
}

static void fc_exception(weft_ctx *ctx, int err, const char *reason) {
  consolidator *s = weft_ctx_state(ctx);
  s->reading = false;
  flush_held(s);
  weft_ctx_fire_exception_caught(ctx, err, reason);
}

static void fc_close(weft_ctx *ctx, weft_promise promise) {
  consolidator *s = weft_ctx_state(ctx);
  s->reading = false;
  flush_held(s);
  weft_ctx_close(ctx, promise);
}

static void fc_inactive(weft_ctx *ctx) {
  consolidator *s = weft_ctx_state(ctx);
  s->reading = false;
  s->held = 0; /* nothing can be sent any more */
  weft_ctx_fire_channel_inactive(ctx);
}

static void fc_added(weft_ctx *ctx) {
  consolidator *s = weft_ctx_state(ctx);
  s->ctx = ctx;
}

static void fc_removed(weft_ctx *ctx) {
  consolidator *s = weft_ctx_state(ctx);
  flush_held(s);
  if (s->task_scheduled)
    s->removed = true;
  else
    free(s);
}

static const weft_handler fc_handler = {.name = "flush_consolidation",
                                        .handler_added = fc_added,
                                        .handler_removed = fc_removed,
                                        .channel_read = fc_read,
                                        .channel_read_complete =
                                            fc_read_complete,
                                        .channel_inactive = fc_inactive,
                                        .writability_changed = fc_writability,
                                        .exception_caught = fc_exception,
                                        .flush = fc_flush,
                                        .close = fc_close};

int weft_flush_consolidation_add_last(
    weft_pipeline *p, const char *name,
    const weft_flush_consolidation_options *opts) {
  consolidator *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_flush_consolidation_options_init);
  int rc = s->o.explicit_flush_after_flushes > 0 ? 0 : WEFT_EINVAL;
  if (rc == 0)
    rc = weft_pipeline_add_last(p, name, &fc_handler, s);
  if (rc < 0)
    free(s);
  return rc;
}
