/* SPDX-License-Identifier: Apache-2.0 */
/* The logging handler (Netty's LoggingHandler). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/logging.h>

#include "codec/codec_internal.h"

/* Bytes one formatted line of 16 input bytes takes, with room to spare. */
#define DUMP_LINE 80

typedef struct log_handler {
  weft_logging_options o;
} log_handler;

void weft_logging_options_init(weft_logging_options *o) {
  *o = (weft_logging_options){.level = WEFT_LOG_DEBUG, .max_dump_bytes = 256};
}

static size_t dump_line(char *out, size_t cap, const uint8_t *p, size_t off,
                        size_t n) {
  size_t w = (size_t)snprintf(out, cap, "%08zx ", off);
  for (size_t i = 0; i < 16 && w < cap; i++)
    w += (size_t)(i < n ? snprintf(out + w, cap - w, " %02x", p[i])
                        : snprintf(out + w, cap - w, "   "));
  if (w < cap)
    w += (size_t)snprintf(out + w, cap - w, "  |");
  for (size_t i = 0; i < n && w + 1 < cap; i++)
    out[w++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
  if (w < cap)
    w += (size_t)snprintf(out + w, cap - w, "|\n");
  return w < cap ? w : cap - 1;
}

size_t weft_hex_dump(char *out, size_t cap, const void *data, size_t len) {
  if (cap == 0)
    return 0;
  out[0] = '\0';
  const uint8_t *p = data;
  size_t w = 0;
  for (size_t off = 0; off < len && cap - w > 1; off += 16) {
    size_t n = len - off < 16 ? len - off : 16;
    w += dump_line(out + w, cap - w, p + off, off, n);
  }
  return w;
}

static bool enabled(const log_handler *h) {
  return h->o.level <= weft_log_get_level();
}

static void log_event(weft_ctx *ctx, const char *what) {
  log_handler *h = weft_ctx_state(ctx);
  if (enabled(h))
    weft_log(h->o.level, "channel %llu [%s]: %s",
             (unsigned long long)weft_channel_id(weft_ctx_channel(ctx)),
             weft_ctx_name(ctx), what);
}

/* Logs a message, then (hex_dump on) its bytes, a few lines per log call so
 * no call exceeds weft_log's 1023-byte limit. */
static void log_msg(weft_ctx *ctx, const char *what, const void *msg) {
  log_handler *h = weft_ctx_state(ctx);
  if (!enabled(h))
    return;
  unsigned long long id = weft_channel_id(weft_ctx_channel(ctx));
  if (!weft_msg_is(msg, &weft_buf_msg_type)) {
    weft_log(h->o.level, "channel %llu [%s]: %s %s", id, weft_ctx_name(ctx),
             what, weft_msg_type_name(msg));
    return;
  }
  const weft_buf *b = msg;
  size_t len = weft_buf_readable(b);
  weft_log(h->o.level, "channel %llu [%s]: %s %zu bytes", id,
           weft_ctx_name(ctx), what, len);
  if (!h->o.hex_dump)
    return;
  size_t n = len < h->o.max_dump_bytes ? len : h->o.max_dump_bytes;
  char text[12 * DUMP_LINE];
  for (size_t off = 0; off < n; off += 12 * 16) {
    size_t chunk = n - off < 12 * 16 ? n - off : 12 * 16;
    weft_hex_dump(text, sizeof text, weft_buf_rptr(b) + off, chunk);
    weft_log(h->o.level, "%s", text);
  }
}

static void lg_active(weft_ctx *ctx) {
  log_event(ctx, "ACTIVE");
  weft_ctx_fire_channel_active(ctx);
}
static void lg_inactive(weft_ctx *ctx) {
  log_event(ctx, "INACTIVE");
  weft_ctx_fire_channel_inactive(ctx);
}
static void lg_read(weft_ctx *ctx, void *msg) {
  log_msg(ctx, "READ", msg);
  weft_ctx_fire_channel_read(ctx, msg);
}
static void lg_read_complete(weft_ctx *ctx) {
  log_event(ctx, "READ_COMPLETE");
  weft_ctx_fire_channel_read_complete(ctx);
}
static void lg_writability(weft_ctx *ctx, bool writable) {
  log_event(ctx, writable ? "WRITABLE" : "UNWRITABLE");
  weft_ctx_fire_writability_changed(ctx, writable);
}
static void lg_user_event(weft_ctx *ctx, void *event) {
  log_event(ctx, "USER_EVENT");
  weft_ctx_fire_user_event(ctx, event);
}
static void lg_exception(weft_ctx *ctx, int err, const char *reason) {
  log_handler *h = weft_ctx_state(ctx);
  if (enabled(h))
    weft_log(h->o.level, "channel %llu [%s]: EXCEPTION %s: %s",
             (unsigned long long)weft_channel_id(weft_ctx_channel(ctx)),
             weft_ctx_name(ctx), weft_err_name(err), reason);
  weft_ctx_fire_exception_caught(ctx, err, reason);
}
static void lg_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  log_msg(ctx, "WRITE", msg);
  weft_ctx_write(ctx, msg, promise);
}
static void lg_flush(weft_ctx *ctx) {
  log_event(ctx, "FLUSH");
  weft_ctx_flush(ctx);
}
static void lg_close(weft_ctx *ctx, weft_promise promise) {
  log_event(ctx, "CLOSE");
  weft_ctx_close(ctx, promise);
}
static void lg_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler log_handler_ops = {
    .name = "logging",
    .handler_removed = lg_removed,
    .channel_active = lg_active,
    .channel_inactive = lg_inactive,
    .channel_read = lg_read,
    .channel_read_complete = lg_read_complete,
    .writability_changed = lg_writability,
    .user_event = lg_user_event,
    .exception_caught = lg_exception,
    .write = lg_write,
    .flush = lg_flush,
    .close = lg_close};

int weft_logging_add_last(weft_pipeline *p, const char *name,
                          const weft_logging_options *opts) {
  log_handler *h = malloc(sizeof *h);
  if (h == NULL)
    return WEFT_ENOMEM;
  WEFT__OPTIONS_OR_DEFAULTS(&h->o, opts, weft_logging_options_init);
  int rc = weft_pipeline_add_last(p, name, &log_handler_ops, h);
  if (rc < 0)
    free(h);
  return rc;
}
