/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP aggregator (Netty's HttpObjectAggregator): a head, its body
 * chunks and the end marker become one weft_http_full. */
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/http.h>

static void full_release(void *msg) {
  weft_http_full *f = msg;
  weft_msg_release(f->head);
  weft_buf_release(f->body);
  free(f);
}

const weft_msg_type weft_http_full_type = {.name = "weft_http_full",
                                           .release = full_release};

typedef struct aggregator {
  size_t max_content;
  weft_http_full *cur; /* the message being gathered */
  size_t have;         /* body bytes so far */
  bool dropping;       /* over the limit: chunks are dropped to the end */
} aggregator;

static int64_t declared_length(const void *head) {
  if (weft_msg_is(head, &weft_http_request_type))
    return ((const weft_http_request *)head)->content_length;
  return ((const weft_http_response_head *)head)->content_length;
}

/* Appends `b` to the body: the first chunk is kept as it is, a second
 * one makes a buffer of the declared length (or twice what is needed). */
static int append(weft_ctx *ctx, aggregator *a, weft_buf *b) {
  weft_http_full *f = a->cur;
  size_t n = weft_buf_readable(b);
  if (f->body == NULL) {
    f->body = b;
    return 0;
  }
  weft_buf *body = f->body;
  if (weft_buf_refcnt(body) > 1 || weft_buf_writable(body) < n) {
    int64_t declared = declared_length(f->head);
    size_t cap = declared > 0 && (uint64_t)declared >= a->have + n
                     ? (size_t)declared
                     : 2 * (a->have + n);
    weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
    weft_buf *grown = weft_buf_alloc(pool, cap);
    if (grown == NULL) {
      weft_buf_release(b);
      return WEFT_ENOMEM;
    }
    weft_buf_write_bytes(grown, weft_buf_rptr(body), weft_buf_readable(body));
    weft_buf_release(body);
    f->body = body = grown;
  }
  weft_buf_write_bytes(body, weft_buf_rptr(b), n);
  weft_buf_release(b);
  return 0;
}

static void too_large(weft_ctx *ctx, aggregator *a) {
  bool request = weft_msg_is(a->cur->head, &weft_http_request_type);
  weft_msg_release(a->cur);
  a->cur = NULL;
  a->dropping = true;
  if (!request) {
    weft_ctx_fire_exception_caught(ctx, WEFT_ETOOLONG,
                                   "http aggregator: body above max_content");
    return;
  }
  /* The server codec closes after a response written before the request's
   * end (its body would otherwise be taken for the next request). */
  static const char msg[] = "Content Too Large\n";
  weft_http_respond(ctx, 413, "text/plain", msg, sizeof msg - 1);
  weft_ctx_flush(ctx);
}

static void agg_read(weft_ctx *ctx, void *msg) {
  aggregator *a = weft_ctx_state(ctx);
  if (weft_msg_is(msg, &weft_http_request_type) ||
      weft_msg_is(msg, &weft_http_response_head_type)) {
    weft_msg_release(a->cur);
    a->dropping = false;
    a->have = 0;
    a->cur = calloc(1, sizeof *a->cur);
    if (a->cur == NULL) {
      weft_msg_release(msg);
      weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "http aggregator");
      return;
    }
    a->cur->msg.type = &weft_http_full_type;
    a->cur->head = msg;
    if (declared_length(msg) > (int64_t)a->max_content)
      too_large(ctx, a);
    return;
  }
  if (weft_msg_is(msg, &weft_buf_msg_type)) {
    size_t n = weft_buf_readable(msg);
    if (a->dropping || a->cur == NULL) {
      weft_buf_release(msg);
      return;
    }
    if (n > a->max_content - a->have) {
      weft_buf_release(msg);
      too_large(ctx, a);
      return;
    }
    a->have += n;
    if (append(ctx, a, msg) != 0)
      weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "http aggregator");
    return;
  }
  if (weft_msg_is(msg, &weft_http_end_type)) {
    weft_http_full *f = a->cur;
    a->cur = NULL;
    a->dropping = false;
    if (f != NULL)
      weft_ctx_fire_channel_read(ctx, f);
    return;
  }
  weft_ctx_fire_channel_read(ctx, msg);
}

static void agg_removed(weft_ctx *ctx) {
  aggregator *a = weft_ctx_state(ctx);
  weft_msg_release(a->cur);
  free(a);
}

static const weft_handler aggregator_handler = {.name = "http_aggregator",
                                                .channel_read = agg_read,
                                                .handler_removed = agg_removed};

int weft_http_aggregator_add_last(weft_pipeline *p, const char *name,
                                  size_t max_content) {
  aggregator *a = calloc(1, sizeof *a);
  if (a == NULL)
    return WEFT_ENOMEM;
  a->max_content = max_content;
  int rc = weft_pipeline_add_last(p, name, &aggregator_handler, a);
  if (rc < 0)
    free(a);
  return rc;
}
