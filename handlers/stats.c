/* SPDX-License-Identifier: Apache-2.0 */
/* The stats handler: bytes and messages in and out. */
#include <weft/buf.h>
#include <weft/error.h>
#include <weft/file_region.h>
#include <weft/stats.h>

static void add(_Atomic uint64_t *c, uint64_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t bytes_of(const void *msg) {
  if (weft_msg_is(msg, &weft_file_region_type))
    return weft_file_region_left(msg);
  return weft_msg_is(msg, &weft_buf_msg_type) ? weft_buf_readable(msg) : 0;
}

static void stats_read(weft_ctx *ctx, void *msg) {
  weft_stats *s = weft_ctx_state(ctx);
  add(&s->msgs_in, 1);
  add(&s->bytes_in, bytes_of(msg));
  weft_ctx_fire_channel_read(ctx, msg);
}

static void stats_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  weft_stats *s = weft_ctx_state(ctx);
  add(&s->msgs_out, 1);
  add(&s->bytes_out, bytes_of(msg));
  weft_ctx_write(ctx, msg, promise);
}

static const weft_handler stats_handler = {
    .name = "stats",
    .channel_read = stats_read,
    .write = stats_write,
    .file_regions = true}; /* counted and passed on: sendfile still */

void weft_stats_reset(weft_stats *s) {
  atomic_store(&s->bytes_in, 0);
  atomic_store(&s->bytes_out, 0);
  atomic_store(&s->msgs_in, 0);
  atomic_store(&s->msgs_out, 0);
}

void weft_stats_get(const weft_stats *s, weft_stats_snapshot *out) {
  out->bytes_in = atomic_load_explicit(&s->bytes_in, memory_order_relaxed);
  out->bytes_out = atomic_load_explicit(&s->bytes_out, memory_order_relaxed);
  out->msgs_in = atomic_load_explicit(&s->msgs_in, memory_order_relaxed);
  out->msgs_out = atomic_load_explicit(&s->msgs_out, memory_order_relaxed);
}

int weft_stats_add_last(weft_pipeline *p, const char *name, weft_stats *stats) {
  if (stats == NULL)
    return WEFT_EINVAL;
  return weft_pipeline_add_last(p, name, &stats_handler, stats);
}
