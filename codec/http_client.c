/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP/1.1 client codec: requests out, responses in (Netty's
 * HttpClientCodec), one handler so that the decoder knows which request a
 * response answers (a response to HEAD has no body: RFC 9110 9.3.2). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/decoder.h>
#include <weft/error.h>
#include <weft/http.h>

#include "codec/codec_internal.h"
#include "codec/http_internal.h"
#include "codec/http_parse.h"

/* ---- messages ---- */

static void request_release(void *msg) {
  weft_http_client_request *q = msg;
  weft_buf_release(q->body);
  weft__http_fields_free(&q->fields);
  free(q);
}

const weft_msg_type weft_http_client_request_type = {
    .name = "weft_http_client_request", .release = request_release};

static void head_release(void *msg) {
  weft_http_response_head *r = msg;
  weft_buf_release(r->data);
  free(r);
}

const weft_msg_type weft_http_response_head_type = {
    .name = "weft_http_response_head", .release = head_release};

/* RFC 9110 5.6.2's tchar. */
bool weft__http_is_token(const char *s) {
  if (*s == '\0')
    return false;
  for (; *s != '\0'; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s) != NULL))
      return false;
  return true;
}

static bool target_ok(const char *t) {
  if (*t == '\0')
    return false;
  for (; *t != '\0'; t++)
    if ((unsigned char)*t <= ' ' || *t == 0x7f)
      return false;
  return true;
}

weft_http_client_request *weft_http_client_request_new(const char *method,
                                                       const char *target,
                                                       const char *host) {
  if (!weft__http_is_token(method) || !target_ok(target))
    return NULL;
  weft_http_client_request *q = malloc(sizeof *q);
  if (q == NULL)
    return NULL;
  *q = (weft_http_client_request){.msg = {&weft_http_client_request_type},
                                  .head = strcmp(method, "HEAD") == 0};
  weft__http_fields_init(&q->fields);
  int rc = weft__http_fields_append(&q->fields, method, strlen(method));
  if (rc == 0)
    rc = weft__http_fields_append(&q->fields, " ", 1);
  if (rc == 0)
    rc = weft__http_fields_append(&q->fields, target, strlen(target));
  if (rc == 0)
    rc = weft__http_fields_append(&q->fields, " HTTP/1.1\r\n", 11);
  if (rc == 0 && host != NULL)
    rc = weft__http_fields_add(&q->fields, "Host", host);
  if (rc != 0) {
    request_release(q);
    return NULL;
  }
  return q;
}

int weft_http_client_request_add_header(weft_http_client_request *q,
                                        const char *name, const char *value) {
  return weft__http_fields_add(&q->fields, name, value);
}

weft_http_str weft_http_response_head_header(const weft_http_response_head *r,
                                             const char *name) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (weft_http_str_equals(r->headers[i].name, name))
      return r->headers[i].value;
  return (weft_http_str){NULL, 0};
}

void weft_http_client_options_init(weft_http_client_options *o) {
  *o = (weft_http_client_options){.max_head_bytes = 16 * 1024,
                                  .max_headers = 100,
                                  .max_body = 64u << 20,
                                  .max_pipelined = 64};
}

/* ---- the codec ---- */

enum req_mode { REQ_NONE, REQ_LENGTH, REQ_CHUNKED };

typedef struct http_client {
  weft_decoder base;
  weft_http_client_options o;
  weft__http_parse p;
  weft_ctx *ctx;
  bool stop;     /* input is dropped (after a close or an error) */
  bool interim;  /* the message being parsed is a 1xx: dropped */
  bool *is_head; /* per request waiting for its response: HEAD */
  size_t q_head, q_len;
  enum req_mode mode; /* the request body being written */
  uint64_t remaining;
} http_client;

static void fail_write(void *msg, weft_promise pr, int err) {
  weft_msg_release(msg);
  weft_promise_complete(pr, err);
}

static void write_request(http_client *c, weft_http_client_request *q,
                          weft_promise pr) {
  if (c->mode != REQ_NONE || c->q_len == c->o.max_pipelined)
    return fail_write(q, pr, c->mode != REQ_NONE ? WEFT_EINVAL : WEFT_ENOBUFS);
  int64_t cl =
      q->body != NULL ? (int64_t)weft_buf_readable(q->body) : q->content_length;
  char framing[48];
  int n = cl >= 0 ? snprintf(framing, sizeof framing,
                             "Content-Length: %" PRId64 "\r\n\r\n", cl)
                  : snprintf(framing, sizeof framing,
                             "Transfer-Encoding: chunked\r\n\r\n");
  if (cl == 0 && q->body == NULL)
    n = snprintf(framing, sizeof framing, "\r\n");
  weft_channel *ch = weft_ctx_channel(c->ctx);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)),
                               q->fields.len + (size_t)n);
  if (b == NULL)
    return fail_write(q, pr, WEFT_ENOMEM);
  weft_buf_write_bytes(b, q->fields.buf, q->fields.len);
  weft_buf_write_bytes(b, framing, (size_t)n);
  c->is_head[(c->q_head + c->q_len++) % c->o.max_pipelined] = q->head;
  weft_buf *body = q->body;
  q->body = NULL;
  weft_msg_release(q);
  if (body != NULL) {
    weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
    weft_ctx_write(c->ctx, body, pr);
    return;
  }
  c->mode = cl > 0 ? REQ_LENGTH : cl < 0 ? REQ_CHUNKED : REQ_NONE;
  c->remaining = cl > 0 ? (uint64_t)cl : 0;
  weft_ctx_write(c->ctx, b, pr);
}

static void write_chunk(http_client *c, weft_buf *b, weft_promise pr) {
  size_t n = weft_buf_readable(b);
  if (c->mode == REQ_NONE || (c->mode == REQ_LENGTH && n > c->remaining))
    return fail_write(b, pr, WEFT_EINVAL);
  if (c->mode == REQ_LENGTH) {
    c->remaining -= n;
    return weft_ctx_write(c->ctx, b, pr);
  }
  if (n == 0) /* an empty chunk would end the body */
    return fail_write(b, pr, 0);
  weft__http_write_chunk(c->ctx, b, weft_buf_readable(b), pr);
}

static void write_end(http_client *c, weft_promise pr) {
  if (c->mode == REQ_NONE || (c->mode == REQ_LENGTH && c->remaining != 0))
    return weft_promise_complete(pr, WEFT_EINVAL);
  if (c->mode == REQ_CHUNKED)
    weft_ctx_write_bytes(c->ctx, "0\r\n\r\n", 5, pr);
  else
    weft_promise_complete(pr, 0);
  c->mode = REQ_NONE;
}

static void client_write(weft_ctx *ctx, void *msg, weft_promise pr) {
  http_client *c = weft_ctx_state(ctx);
  if (weft_msg_is(msg, &weft_http_client_request_type))
    write_request(c, msg, pr);
  else if (weft_msg_is(msg, &weft_buf_msg_type))
    write_chunk(c, msg, pr);
  else if (weft_msg_is(msg, &weft_http_end_type))
    write_end(c, pr);
  else
    weft_ctx_write(ctx, msg, pr);
}

/* Limits and parse errors: the decoder reports them and drops the rest. */
static int fail(http_client *c, int status, const char *reason) {
  c->stop = true;
  return weft_decoder_fail(&c->base,
                           status == 413 || status == 414 || status == 431
                               ? WEFT_ETOOLONG
                               : WEFT_EBADFRAME,
                           "http client: %s", reason);
}

static int emit_head(http_client *c, weft_buf *in, void **out) {
  llhttp_t *lp = &c->p.parser;
  c->interim = lp->status_code < 200;
  if (c->interim) { /* 100 Continue, 103 Early Hints: not passed on */
    weft__http_consume(&c->p, in);
    c->p.in_head = false;
    return lp->status_code == 101 ? fail(c, 400, "101 Switching Protocols") : 1;
  }
  if ((lp->flags & F_CONTENT_LENGTH) && lp->content_length > c->o.max_body &&
      !c->is_head[c->q_head])
    return fail(c, 413, "Content-Length above max_body");
  const char *base = c->p.exec_base;
  weft__http_trim_values(&c->p, base);
  weft_http_response_head *r =
      malloc(sizeof *r + c->p.nhdrs * sizeof(weft_http_header));
  weft_buf *data = r != NULL ? weft__http_take_head(&c->p, in) : NULL;
  if (data == NULL) {
    free(r);
    return weft_decoder_fail(&c->base, WEFT_ENOMEM, "http client: head");
  }
  const char *p = (const char *)data->base;
  bool chunked = lp->flags & F_CHUNKED;
  *r = (weft_http_response_head){.msg = {&weft_http_response_head_type},
                                 .status = lp->status_code,
                                 .reason = {p + c->p.line_off, c->p.line_len},
                                 .version_major = lp->http_major,
                                 .version_minor = lp->http_minor,
                                 .keep_alive = llhttp_should_keep_alive(lp),
                                 .chunked = chunked,
                                 .content_length =
                                     chunked || !(lp->flags & F_CONTENT_LENGTH)
                                         ? -1
                                         : (int64_t)lp->content_length,
                                 .nheaders = c->p.nhdrs,
                                 .headers = (weft_http_header *)(r + 1),
                                 .data = data};
  if (c->is_head[c->q_head] || r->status == 204 || r->status == 304)
    r->content_length = 0;
  weft__http_fill_headers(&c->p, p, r->headers);
  *out = r;
  return 1;
}

static int emit_end(http_client *c, void **out) {
  c->p.end_pending = false;
  if (c->interim) {
    c->interim = false;
    return 1;
  }
  c->q_head = (c->q_head + 1) % c->o.max_pipelined;
  c->q_len--;
  if (!llhttp_should_keep_alive(&c->p.parser))
    c->stop = true; /* the server closes: nothing more is a response */
  *out = weft_http_end();
  return 1;
}

static int step(void *owner, weft_buf *in, void **out) {
  http_client *c = owner;
  if (c->p.end_pending)
    return emit_end(c, out);
  if (c->p.between && c->q_len == 0)
    return fail(c, 400, "a response without a request waiting for it");
  c->p.skip_body = c->is_head[c->q_head];
  switch (weft__http_parse_run(&c->p, in)) {
  case WEFT__HTTP_UPGRADE:
    return fail(c, 400, "a protocol upgrade");
  case WEFT__HTTP_ERROR:
    return fail(c, c->p.error_status, c->p.error_reason);
  case WEFT__HTTP_HEAD:
    return emit_head(c, in, out);
  case WEFT__HTTP_MORE:
    c->base.need = c->o.max_head_bytes + 1;
    return 0;
  case WEFT__HTTP_DATA:
    break;
  }
  if (c->p.body_len > 0) {
    *out = weft__http_take_body(&c->p, in);
    return *out != NULL ? 1
                        : weft_decoder_fail(&c->base, WEFT_ENOMEM,
                                            "http client: body slice");
  }
  weft__http_consume(&c->p, in);
  return c->p.end_pending ? emit_end(c, out) : 1;
}

static int client_decode(weft_decoder *d, weft_buf *in, void **out) {
  http_client *c = (http_client *)d;
  return weft__http_decode_all(d, c->ctx, &c->p, &c->stop, in, out, step, c);
}

/* A body that runs to the close ends here (RFC 9112 6.3, point 8). */
static void client_inactive(weft_ctx *ctx) {
  http_client *c = weft_ctx_state(ctx);
  if (!c->stop && !c->p.between && !c->p.in_head &&
      llhttp_message_needs_eof(&c->p.parser)) {
    c->p.pause = WEFT__PAUSE_NONE;
    llhttp_errno_t err = llhttp_finish(&c->p.parser);
    void *end = NULL;
    if ((err == HPE_OK || err == HPE_PAUSED) && c->p.pause == WEFT__PAUSE_END &&
        emit_end(c, &end) == 1 && end)
      weft_ctx_fire_channel_read(ctx, end);
  }
  weft_ctx_fire_channel_inactive(ctx);
}

static void client_free(weft_decoder *d) {
  http_client *c = (http_client *)d;
  weft__http_parse_fini(&c->p);
  free(c->is_head);
  free(c);
}

static void client_added(weft_ctx *ctx) {
  http_client *c = weft_ctx_state(ctx);
  c->ctx = ctx;
}

static const weft_handler http_client_handler = {.name = "http_client_codec",
                                                 .handler_added = client_added,
                                                 WEFT__DECODER_OPS,
                                                 .channel_inactive =
                                                     client_inactive,
                                                 .write = client_write};

int weft_http_client_codec_add_last(weft_pipeline *p, const char *name,
                                    const weft_http_client_options *opts) {
  http_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return WEFT_ENOMEM;
  WEFT__OPTIONS_OR_DEFAULTS(&c->o, opts, weft_http_client_options_init);
  if (c->o.max_pipelined == 0)
    c->o.max_pipelined = 1;
  c->is_head = calloc(c->o.max_pipelined, sizeof *c->is_head);
  if (c->is_head == NULL) {
    free(c);
    return WEFT_ENOMEM;
  }
  weft_decoder_init(&c->base, client_decode, client_free);
  weft__http_parse_init(&c->p, HTTP_RESPONSE);
  c->p.max_head_bytes = c->o.max_head_bytes;
  c->p.max_headers = c->o.max_headers;
  c->p.max_body = c->o.max_body;
  return weft_decoder_add_last(p, name, &http_client_handler, &c->base);
}
