/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP/1.1 server codec: llhttp (strict mode) under the cumulating
 * decoder base for requests, and the response encoder, in one handler so
 * that both halves share the queue of requests waiting for a response
 * (Netty's HttpServerCodec keeps the same queue of methods).
 *
 * Decoding: llhttp is pushed the bytes past what it parsed already and
 * pauses at the end of a head, at the end of a chunk and at the end of a
 * message, so that each decode call yields one message. Positions are kept
 * as offsets from the reader index, which the base keeps valid when it
 * moves unread bytes into its cumulation; a head stays unconsumed until it
 * is complete, so its slices are one contiguous stretch. Body bytes are
 * consumed as they are parsed and passed on as slices. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <llhttp.h>

#include <weft/channel.h>
#include <weft/decoder.h>
#include <weft/error.h>
#include <weft/http.h>
#include <weft/log.h>
#include <weft/timer.h>

#include "codec/http_internal.h"

/* Why llhttp paused. */
enum pause_cause { PAUSE_NONE, PAUSE_HEAD, PAUSE_CHUNK, PAUSE_END };

/* Which span llhttp reported last, so a span cut by the end of a read is
 * joined with its rest and a value line that is not contiguous with the
 * value before it is recognised as obs-fold. */
enum span_kind { SPAN_NONE, SPAN_FIELD, SPAN_VALUE };

/* Flags of a request waiting for its response. */
enum {
  Q_HEAD = 1,      /* HEAD: no body in the response */
  Q_CLOSE = 2,     /* the connection closes after the response */
  Q_V10 = 4,       /* HTTP/1.0: no chunked framing */
  Q_EXPECT = 8,    /* Expect: 100-continue, not answered yet */
  Q_DECODING = 16, /* its body is still being decoded */
};

/* The framing of the response being written. */
enum resp_mode { RESP_NONE, RESP_NOBODY, RESP_LENGTH, RESP_CHUNKED, RESP_EOF };

typedef struct hdr_pos {
  size_t name_off, name_len, value_off, value_len;
} hdr_pos;

typedef struct http_server {
  weft_decoder base;
  weft_http_server_options o;
  llhttp_t parser;
  weft_ctx *ctx;
  weft_timer timer; /* header timeout */
  /* decoding */
  const char *exec_base; /* the reader pointer of the running execute */
  size_t pos;            /* bytes past the reader index parsed already */
  bool in_head;          /* between a request's first byte and its head's end */
  bool between;          /* between messages: no byte of the next one parsed */
  bool stop;             /* no more requests on this connection */
  bool paused;           /* llhttp paused: it runs again even with no new
                            bytes (the end of a bodiless message is found
                            by a run over zero bytes) */
  enum pause_cause pause;
  enum span_kind span;
  size_t method_off, method_len, url_off, url_len;
  hdr_pos *hdrs;
  size_t nhdrs, hdrs_cap;
  size_t body_off, body_len; /* a parsed body span not passed on yet */
  uint64_t body_total;
  size_t trailer_bytes;
  bool end_pending; /* the end marker follows the pending body span */
  int error_status; /* set by a callback: answer this and close */
  char error_reason[96];
  int reject_status; /* answer this once the queued requests are answered */
  /* requests waiting for their response, oldest first */
  uint8_t *queue;
  size_t q_head, q_len;
  bool read_paused; /* we turned auto-read off (queue full) */
  /* encoding */
  enum resp_mode mode;
  uint64_t remaining; /* RESP_LENGTH: body bytes still to come */
  bool resp_close;
} http_server;

static http_server *of(llhttp_t *p) { return p->data; }

/* ---- llhttp callbacks ---- */

static int cb_error(http_server *s, int status, const char *reason) {
  s->error_status = status;
  snprintf(s->error_reason, sizeof s->error_reason, "%s", reason);
  return HPE_USER;
}

/* Bytes of head from the reader index to the end of `at`..`len`. */
static int head_check(http_server *s, const char *at, size_t len) {
  size_t end = (size_t)(at - s->exec_base) + len;
  if (end <= s->o.max_head_bytes)
    return 0;
  return s->nhdrs == 0 && s->span == SPAN_NONE
             ? cb_error(s, 414, "request line above max_head_bytes")
             : cb_error(s, 431, "request head above max_head_bytes");
}

static int on_message_begin(llhttp_t *p) {
  http_server *s = of(p);
  s->in_head = true;
  s->between = false;
  s->span = SPAN_NONE;
  s->nhdrs = s->method_len = s->url_len = 0;
  s->body_total = 0;
  s->trailer_bytes = 0;
  return 0;
}

/* Joins a span cut by the end of a read with its rest. */
static void span_join(http_server *s, size_t *off, size_t *len, const char *at,
                      size_t n) {
  size_t o = (size_t)(at - s->exec_base);
  if (*len == 0)
    *off = o;
  *len = o + n - *off;
}

static int on_method(llhttp_t *p, const char *at, size_t n) {
  http_server *s = of(p);
  span_join(s, &s->method_off, &s->method_len, at, n);
  return head_check(s, at, n);
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  http_server *s = of(p);
  span_join(s, &s->url_off, &s->url_len, at, n);
  return head_check(s, at, n);
}

/* Trailer fields (after a chunked body) are parsed by llhttp and dropped
 * here; their bytes are consumed as they come, so they are only counted,
 * against max_head_bytes. */
static int trailer(http_server *s, size_t n) {
  s->trailer_bytes += n;
  return s->trailer_bytes > s->o.max_head_bytes
             ? cb_error(s, 431, "trailer section above max_head_bytes")
             : 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  http_server *s = of(p);
  if (!s->in_head)
    return trailer(s, n);
  int rc = head_check(s, at, n);
  if (rc != 0)
    return rc;
  if (s->span != SPAN_FIELD) {
    if (s->nhdrs == s->o.max_headers)
      return cb_error(s, 431, "more header fields than max_headers");
    if (s->nhdrs == s->hdrs_cap) {
      size_t cap = s->hdrs_cap ? 2 * s->hdrs_cap : 16;
      hdr_pos *h = realloc(s->hdrs, cap * sizeof *h);
      if (h == NULL)
        return cb_error(s, 500, "out of memory for header fields");
      s->hdrs = h;
      s->hdrs_cap = cap;
    }
    s->hdrs[s->nhdrs++] = (hdr_pos){0};
    s->span = SPAN_FIELD;
  }
  hdr_pos *h = &s->hdrs[s->nhdrs - 1];
  span_join(s, &h->name_off, &h->name_len, at, n);
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  http_server *s = of(p);
  if (!s->in_head)
    return trailer(s, n);
  int rc = head_check(s, at, n);
  if (rc != 0)
    return rc;
  hdr_pos *h = &s->hdrs[s->nhdrs - 1];
  size_t o = (size_t)(at - s->exec_base);
  /* A second value span that does not continue the first one began on a
   * line of its own: obs-fold, which RFC 9112 5.2 lets a server reject and
   * which smuggles headers past a proxy that unfolds differently. */
  if (s->span == SPAN_VALUE && o != h->value_off + h->value_len)
    return cb_error(s, 400, "obs-fold (a header line continuing another)");
  s->span = SPAN_VALUE;
  span_join(s, &h->value_off, &h->value_len, at, n);
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  of(p)->pause = PAUSE_HEAD;
  return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  http_server *s = of(p);
  s->body_total += n;
  if (s->body_total > s->o.max_body)
    return cb_error(s, 413, "chunked body above max_body");
  span_join(s, &s->body_off, &s->body_len, at, n);
  return 0;
}

static int on_chunk_complete(llhttp_t *p) {
  of(p)->pause = PAUSE_CHUNK;
  return HPE_PAUSED;
}

static int on_message_complete(llhttp_t *p) {
  of(p)->pause = PAUSE_END;
  return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_complete = on_chunk_complete,
    .on_message_complete = on_message_complete,
};

/* ---- the queue of requests waiting for a response ---- */

static uint8_t *q_front(http_server *s) {
  return s->q_len > 0 ? &s->queue[s->q_head] : NULL;
}

static uint8_t *q_back(http_server *s) {
  if (s->q_len == 0)
    return NULL;
  return &s->queue[(s->q_head + s->q_len - 1) % s->o.max_pipelined];
}

static void q_push(http_server *s, uint8_t flags) {
  s->queue[(s->q_head + s->q_len) % s->o.max_pipelined] = flags;
  s->q_len++;
}

static void q_pop(http_server *s) {
  s->q_head = (s->q_head + 1) % s->o.max_pipelined;
  s->q_len--;
}

static void set_reading(http_server *s, bool on) {
  s->read_paused = !on;
  weft_channel_set_option(weft_ctx_channel(s->ctx), WEFT_OPT_AUTO_READ, on);
}

/* ---- closing after a response ---- */

static void shutdown_done(void *arg, int status) {
  weft_channel *ch = arg;
  /* Without a half-close (ENOTSUP: verbs, ucx) or on an error, close now.
   * After a FIN the peer reads the response and closes; closing at once
   * would reset the connection when unread request bytes are still in
   * the kernel (RFC 9112 9.6), and the peer could lose the response. */
  if (status != 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  else
    weft_channel_set_option(ch, WEFT_OPT_IDLE_TIMEOUT_MS, 2000);
  weft_channel_release(ch);
}

/* Flushes what is queued, then ends the connection. */
static void close_after_flush(http_server *s) {
  s->stop = true;
  weft_ctx_flush(s->ctx); /* a transport without half-close closes at once */
  weft_channel *ch = weft_channel_retain(weft_ctx_channel(s->ctx));
  weft_channel_shutdown_output(ch, (weft_promise){shutdown_done, ch});
}

/* ---- encoding ---- */

/* A status line and headers: the head of a response to the front request. */
static weft_buf *encode_head(http_server *s, const weft_http_response *r,
                             int64_t cl, bool chunked, bool v10ka,
                             size_t extra) {
  const char *reason = weft_http_reason(r->status);
  const char *server = s->o.server;
  size_t cap = 64 + strlen(reason) + 40 + (server ? strlen(server) + 10 : 0) +
               r->hdr_len + 40 + 30 + extra;
  weft_channel *ch = weft_ctx_channel(s->ctx);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), cap);
  if (b == NULL)
    return NULL;
  char *w = (char *)weft_buf_wptr(b);
  int n = snprintf(w, cap, "HTTP/1.1 %d %s\r\n", r->status, reason);
  if (server != NULL)
    n += snprintf(w + n, cap - (size_t)n, "Server: %s\r\n", server);
  memcpy(w + n, "Date: ", 6);
  memcpy(w + n + 6, weft__http_date(), 29);
  memcpy(w + n + 35, "\r\n", 2);
  n += 37;
  memcpy(w + n, r->hdr, r->hdr_len);
  n += (int)r->hdr_len;
  if (cl >= 0)
    n +=
        snprintf(w + n, cap - (size_t)n, "Content-Length: %" PRId64 "\r\n", cl);
  else if (chunked)
    n += snprintf(w + n, cap - (size_t)n, "Transfer-Encoding: chunked\r\n");
  if (s->resp_close)
    n += snprintf(w + n, cap - (size_t)n, "Connection: close\r\n");
  else if (v10ka)
    n += snprintf(w + n, cap - (size_t)n, "Connection: keep-alive\r\n");
  memcpy(w + n, "\r\n", 2);
  b->writer_index += (size_t)n + 2;
  return b;
}

static void send_continue(http_server *s) {
  static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
  weft_ctx_write_bytes(s->ctx, line, sizeof line - 1, WEFT_PROMISE_NONE);
  weft_ctx_flush(s->ctx);
}

static void write_status(http_server *s, int status);

/* The response to the front request is complete. */
static void finish_response(http_server *s) {
  uint8_t front = *q_front(s);
  q_pop(s);
  s->mode = RESP_NONE;
  /* Answered before its body was read: the body's bytes would be taken
   * for the next request, so the connection ends (RFC 9110 10.1.1). */
  if (front & Q_DECODING)
    s->resp_close = true;
  if (s->resp_close) {
    close_after_flush(s);
    return;
  }
  if (s->q_len == 0 && s->reject_status != 0) {
    write_status(s, s->reject_status);
    return;
  }
  uint8_t *next = q_front(s);
  if (next != NULL && (*next & Q_EXPECT)) {
    *next &= (uint8_t)~Q_EXPECT;
    send_continue(s);
  }
  if (s->read_paused && !s->stop && s->q_len < s->o.max_pipelined)
    set_reading(s, true);
}

static void fail_write(http_server *s, void *msg, weft_promise pr,
                       const char *why) {
  weft_log(WEFT_LOG_WARN, "channel %" PRIu64 ": http: %s",
           weft_channel_id(weft_ctx_channel(s->ctx)), why);
  weft_msg_release(msg);
  weft_promise_complete(pr, WEFT_EINVAL);
}

static bool status_has_body(int status) {
  return status >= 200 && status != 204 && status != 304;
}

static void write_response(http_server *s, weft_http_response *r,
                           weft_promise pr) {
  uint8_t *front = q_front(s);
  if (front == NULL || s->mode != RESP_NONE || r->status < 100 ||
      r->status > 599)
    return fail_write(s, r, pr,
                      "response without a request waiting for it, or during "
                      "another response, or with a bad status");
  if (r->status < 200) { /* interim (103 Early Hints): the final follows */
    weft_buf *b = encode_head(s, r, -1, false, false, 0);
    weft_msg_release(r);
    return b != NULL ? weft_ctx_write(s->ctx, b, pr)
                     : weft_promise_complete(pr, WEFT_ENOMEM);
  }
  bool body_allowed = !(*front & Q_HEAD) && status_has_body(r->status);
  int64_t cl =
      r->body != NULL ? (int64_t)weft_buf_readable(r->body) : r->content_length;
  if (!status_has_body(r->status))
    cl = -1;
  bool v10 = *front & Q_V10;
  s->resp_close = r->close || (*front & Q_CLOSE);
  if (cl < 0 && r->body == NULL && status_has_body(r->status) && v10)
    s->resp_close = true; /* a 1.0 client reads to the close */
  bool chunked = cl < 0 && !v10 && status_has_body(r->status);
  size_t inline_body =
      r->body != NULL && body_allowed && cl <= 4096 ? (size_t)cl : 0;
  weft_buf *b =
      encode_head(s, r, cl, chunked, v10 && !s->resp_close, inline_body);
  if (b == NULL) {
    weft_msg_release(r);
    weft_promise_complete(pr, WEFT_ENOMEM);
    return;
  }
  if (r->body != NULL) {
    weft_buf *body = r->body;
    r->body = NULL;
    weft_msg_release(r);
    if (inline_body > 0 || !body_allowed) {
      weft_buf_write_bytes(b, weft_buf_rptr(body), inline_body);
      weft_buf_release(body);
      weft_ctx_write(s->ctx, b, pr);
    } else {
      weft_ctx_write(s->ctx, b, WEFT_PROMISE_NONE);
      weft_ctx_write(s->ctx, body, pr);
    }
    finish_response(s);
    return;
  }
  weft_msg_release(r);
  s->mode = !body_allowed ? RESP_NOBODY
            : cl >= 0     ? RESP_LENGTH
            : chunked     ? RESP_CHUNKED
                          : RESP_EOF;
  s->remaining = cl >= 0 ? (uint64_t)cl : 0;
  weft_ctx_write(s->ctx, b, pr);
}

static void write_chunk(http_server *s, weft_buf *b, weft_promise pr) {
  size_t n = weft_buf_readable(b);
  switch (s->mode) {
  case RESP_NONE:
    return fail_write(s, b, pr, "body chunk outside a response");
  case RESP_NOBODY: /* HEAD, 204, 304: the body is not sent */
    weft_buf_release(b);
    return weft_promise_complete(pr, 0);
  case RESP_LENGTH:
    if (n > s->remaining) {
      s->resp_close = true; /* the framing is broken: end the connection */
      return fail_write(s, b, pr, "body longer than its Content-Length");
    }
    s->remaining -= n;
    return weft_ctx_write(s->ctx, b, pr);
  case RESP_CHUNKED: {
    if (n == 0) { /* an empty chunk would end the body */
      weft_buf_release(b);
      return weft_promise_complete(pr, 0);
    }
    char line[24];
    int len = snprintf(line, sizeof line, "%zx\r\n", n);
    weft_ctx_write_bytes(s->ctx, line, (size_t)len, WEFT_PROMISE_NONE);
    weft_ctx_write(s->ctx, b, WEFT_PROMISE_NONE);
    return weft_ctx_write_bytes(s->ctx, "\r\n", 2, pr);
  }
  case RESP_EOF:
    return weft_ctx_write(s->ctx, b, pr);
  }
}

static void write_end(http_server *s, weft_promise pr) {
  if (s->mode == RESP_NONE)
    return fail_write(s, weft_http_end(), pr, "end marker outside a response");
  if (s->mode == RESP_CHUNKED)
    weft_ctx_write_bytes(s->ctx, "0\r\n\r\n", 5, pr);
  else
    weft_promise_complete(pr, 0);
  if (s->mode == RESP_LENGTH && s->remaining != 0) {
    weft_log(WEFT_LOG_WARN,
             "channel %" PRIu64 ": http: body %" PRIu64
             " bytes short of its Content-Length; closing",
             weft_channel_id(weft_ctx_channel(s->ctx)), s->remaining);
    s->resp_close = true;
  }
  if (s->mode == RESP_EOF)
    s->resp_close = true;
  finish_response(s);
}

static void http_write(weft_ctx *ctx, void *msg, weft_promise pr) {
  http_server *s = weft_ctx_state(ctx);
  if (weft_msg_is(msg, &weft_http_response_type))
    write_response(s, msg, pr);
  else if (weft_msg_is(msg, &weft_buf_msg_type))
    write_chunk(s, msg, pr);
  else if (weft_msg_is(msg, &weft_http_end_type))
    write_end(s, pr);
  else
    weft_ctx_write(ctx, msg, pr);
}

/* A response of the codec's own (an error, a timeout): the status, no
 * body, and the close. */
static void write_status(http_server *s, int status) {
  s->reject_status = 0;
  s->stop = true;
  if (s->q_len != 0) {
    /* Responses are pending: this one would overtake them. */
    weft_channel_close(weft_ctx_channel(s->ctx), WEFT_PROMISE_NONE);
    return;
  }
  q_push(s, Q_CLOSE);
  weft_http_response *r = weft_http_response_new(status);
  if (r == NULL) {
    weft_channel_close(weft_ctx_channel(s->ctx), WEFT_PROMISE_NONE);
    return;
  }
  r->content_length = 0;
  r->close = true;
  write_response(s, r, WEFT_PROMISE_NONE);
  write_end(s, WEFT_PROMISE_NONE);
}

/* ---- decoding ---- */

/* Refuses the connection's input from here on with `status`: answered
 * after the requests before it, then the connection closes. */
static int reject(http_server *s, weft_buf *in, int status,
                  const char *reason) {
  weft_log(WEFT_LOG_INFO, "channel %" PRIu64 ": http: %d %s: %s",
           weft_channel_id(weft_ctx_channel(s->ctx)), status,
           weft_http_reason(status), reason);
  weft_timer_stop(&s->timer);
  s->stop = true;
  s->pos = 0;
  in->reader_index = in->writer_index;
  uint8_t *back = q_back(s);
  if (back != NULL && (*back & Q_DECODING)) {
    /* The error is in the body of a request the handler has seen: its
     * response is this status, unless one has begun, which the status
     * cannot follow: then the connection just closes. */
    if (s->q_len == 1 && s->mode == RESP_NONE) {
      q_pop(s);
      write_status(s, status);
    } else {
      weft_channel_close(weft_ctx_channel(s->ctx), WEFT_PROMISE_NONE);
    }
  } else if (s->q_len == 0) {
    write_status(s, status);
  } else {
    s->reject_status = status; /* after the responses before it */
  }
  return 1;
}

static weft_http_method method_of(uint8_t m) {
  switch (m) {
  case HTTP_GET:
    return WEFT_HTTP_GET;
  case HTTP_HEAD:
    return WEFT_HTTP_HEAD;
  case HTTP_POST:
    return WEFT_HTTP_POST;
  case HTTP_PUT:
    return WEFT_HTTP_PUT;
  case HTTP_DELETE:
    return WEFT_HTTP_DELETE;
  case HTTP_OPTIONS:
    return WEFT_HTTP_OPTIONS;
  case HTTP_CONNECT:
    return WEFT_HTTP_CONNECT;
  default:
    return WEFT_HTTP_OTHER;
  }
}

static bool str_is(const char *p, size_t n, const char *c) {
  size_t cn = strlen(c);
  return n == cn && strncasecmp(p, c, n) == 0;
}

/* Header values without the whitespace llhttp leaves at their end. */
static void trim_value(const char *base, hdr_pos *h) {
  while (h->value_len > 0 && (base[h->value_off + h->value_len - 1] == ' ' ||
                              base[h->value_off + h->value_len - 1] == '\t'))
    h->value_len--;
}

/* The checks llhttp leaves to the server; 0 or the status to answer. */
static int check_head(http_server *s, const char *base, size_t *hosts,
                      bool *expect, const char **why) {
  if (s->parser.http_major != 1 || s->parser.http_minor > 1) {
    *why = "HTTP version other than 1.0 and 1.1";
    return 505;
  }
  for (size_t i = 0; i < s->nhdrs; i++) {
    hdr_pos *h = &s->hdrs[i];
    trim_value(base, h);
    const char *name = base + h->name_off;
    if (str_is(name, h->name_len, "host"))
      ++*hosts;
    else if (str_is(name, h->name_len, "expect"))
      *expect = str_is(base + h->value_off, h->value_len, "100-continue");
  }
  if (s->parser.http_minor == 1 && *hosts != 1) {
    *why = "HTTP/1.1 request without exactly one Host (RFC 9112 3.2)";
    return 400;
  }
  /* RFC 9112 6.3: a request whose last transfer coding is not chunked. */
  if ((s->parser.flags & F_TRANSFER_ENCODING) &&
      !(s->parser.flags & F_CHUNKED)) {
    *why = "Transfer-Encoding without chunked last";
    return 400;
  }
  if ((s->parser.flags & F_CONTENT_LENGTH) &&
      s->parser.content_length > s->o.max_body) {
    *why = "Content-Length above max_body";
    return 413;
  }
  return 0;
}

static int emit_head(http_server *s, weft_buf *in, void **out) {
  const char *base = s->exec_base;
  size_t hosts = 0;
  bool expect = false;
  const char *why = NULL;
  int status = check_head(s, base, &hosts, &expect, &why);
  if (status != 0)
    return reject(s, in, status, why);
  weft_http_request *req =
      malloc(sizeof *req + s->nhdrs * sizeof(weft_http_header));
  weft_buf *data = req != NULL ? weft_buf_read_slice(in, s->pos) : NULL;
  if (data == NULL) {
    free(req);
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "http: request head");
  }
  const char *p = (const char *)data->base;
  bool chunked = s->parser.flags & F_CHUNKED;
  bool has_body = chunked || s->parser.content_length > 0;
  *req = (weft_http_request){
      .msg = {&weft_http_request_type},
      .method = method_of(s->parser.method),
      .method_name = {p + s->method_off, s->method_len},
      .target = {p + s->url_off, s->url_len},
      .version_major = s->parser.http_major,
      .version_minor = s->parser.http_minor,
      .keep_alive = llhttp_should_keep_alive(&s->parser) &&
                    s->parser.method != HTTP_CONNECT,
      .expect_continue = expect && s->parser.http_minor == 1 && has_body,
      .chunked = chunked,
      .content_length = chunked ? -1 : (int64_t)s->parser.content_length,
      .nheaders = s->nhdrs,
      .headers = (weft_http_header *)(req + 1),
      .data = data};
  for (size_t i = 0; i < s->nhdrs; i++)
    req->headers[i] =
        (weft_http_header){{p + s->hdrs[i].name_off, s->hdrs[i].name_len},
                           {p + s->hdrs[i].value_off, s->hdrs[i].value_len}};
  s->pos = 0;
  s->in_head = false;
  weft_timer_stop(&s->timer);
  uint8_t flags = (s->parser.method == HTTP_HEAD ? Q_HEAD : 0) |
                  (req->keep_alive ? 0 : Q_CLOSE) |
                  (req->version_minor == 0 ? Q_V10 : 0) | Q_DECODING;
  if (req->expect_continue && s->q_len == 0)
    send_continue(s);
  else if (req->expect_continue)
    flags |= Q_EXPECT;
  q_push(s, flags);
  *out = req;
  return 1;
}

/* The pending body span as a slice; everything parsed is consumed. */
static int emit_body(http_server *s, weft_buf *in, void **out) {
  size_t start = in->reader_index;
  in->reader_index = start + s->body_off;
  weft_buf *b = weft_buf_read_slice(in, s->body_len);
  in->reader_index = start + s->pos;
  s->pos = 0;
  s->body_len = 0;
  if (b == NULL)
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "http: body slice");
  *out = b;
  return 1;
}

static int emit_end(http_server *s, void **out) {
  s->end_pending = false;
  uint8_t *back = q_back(s);
  if (back != NULL && (*back & Q_DECODING)) {
    *back &= (uint8_t)~Q_DECODING;
    if (*back & Q_CLOSE)
      s->stop = true; /* nothing after a request that ends the connection */
  }
  *out = weft_http_end();
  return 1;
}

static void header_timeout(void *arg) {
  http_server *s = arg;
  if (s->stop)
    return;
  weft_log(WEFT_LOG_INFO,
           "channel %" PRIu64 ": http: 408 Request Timeout: no complete "
           "request head within %" PRIu32 " ms",
           weft_channel_id(weft_ctx_channel(s->ctx)), s->o.header_timeout_ms);
  write_status(s, 408); /* flushes; may free `s` with the channel */
}

static int parse_error(http_server *s, weft_buf *in, llhttp_errno_t err) {
  if (s->error_status != 0)
    return reject(s, in, s->error_status, s->error_reason);
  char why[128];
  snprintf(why, sizeof why, "%s (%s)", llhttp_get_error_reason(&s->parser),
           llhttp_errno_name(err));
  return reject(s, in, 400, why);
}

/* Runs llhttp over the bytes not parsed yet; returns what decode returns. */
static int execute(http_server *s, weft_buf *in, void **out) {
  size_t avail = weft_buf_readable(in) - s->pos;
  if (s->between && s->q_len >= s->o.max_pipelined) {
    set_reading(s, false); /* resumed by finish_response */
    return 0;
  }
  s->exec_base = (const char *)weft_buf_rptr(in);
  s->pause = PAUSE_NONE;
  const char *from = s->exec_base + s->pos;
  llhttp_errno_t err = llhttp_execute(&s->parser, from, avail);
  size_t used =
      err == HPE_OK ? avail : (size_t)(llhttp_get_error_pos(&s->parser) - from);
  s->pos += used;
  if (err == HPE_PAUSED_UPGRADE) { /* weft does not switch protocols */
    s->stop = true;
    in->reader_index = in->writer_index;
    s->pos = 0;
    return 1;
  }
  if (err != HPE_OK && err != HPE_PAUSED)
    return parse_error(s, in, err);
  s->paused = err == HPE_PAUSED;
  if (s->paused)
    llhttp_resume(&s->parser);
  if (s->pause == PAUSE_HEAD)
    return emit_head(s, in, out);
  if (s->in_head) { /* the head is incomplete: keep its bytes */
    /* The deadline counts from the first read that left a head
     * incomplete; a head read whole never touches the timer heap. */
    if (s->o.header_timeout_ms != 0 && !weft_timer_active(&s->timer))
      weft_timer_start(&s->timer, (uint64_t)s->o.header_timeout_ms * 1000000, 0,
                       header_timeout, s);
    s->base.need = s->o.max_head_bytes + 1;
    return 0;
  }
  if (s->pause == PAUSE_END) {
    s->end_pending = true;
    s->between = true;
    s->paused = false; /* nothing is left to run over zero bytes */
  }
  if (s->body_len > 0)
    return emit_body(s, in, out);
  in->reader_index += s->pos;
  s->pos = 0;
  if (s->end_pending)
    return emit_end(s, out);
  return 1; /* consumed chunk framing only */
}

/* Decodes every message of the bytes at hand, not just one: the base
 * calls decode only while bytes are left, but the end of a message may
 * need a run of llhttp over no bytes (a bodiless request) or follow the
 * body slice that consumed the last byte. So each message but the last is
 * fired here and the last is returned; between messages it stops where
 * the base would (the channel stopped reading, the handler went). */
static int http_decode(weft_decoder *d, weft_buf *in, void **out) {
  http_server *s = (http_server *)d;
  void *last = NULL;
  bool consumed = false;
  for (;;) {
    if (s->stop) { /* after a close request or an error: input is dropped */
      consumed |= weft_buf_readable(in) > 0;
      in->reader_index = in->writer_index;
      break;
    }
    void *m = NULL;
    int rc = 1;
    if (s->end_pending)
      rc = emit_end(s, &m);
    else if (weft_buf_readable(in) > s->pos || s->paused)
      rc = execute(s, in, &m);
    else
      break;
    if (rc < 0) {
      if (last == NULL)
        return rc;
      weft_ctx_fire_exception_caught(s->ctx, rc, s->base.reason);
      break;
    }
    if (rc == 0)
      break;
    consumed = true;
    if (m == NULL)
      continue;
    if (last != NULL) {
      weft_ctx_fire_channel_read(s->ctx, last);
      if (s->base.removed) {
        weft_msg_release(m);
        return 1;
      }
    }
    last = m;
    if (!weft_channel_is_reading(weft_ctx_channel(s->ctx)))
      break; /* flow control: the rest waits in the cumulation */
  }
  *out = last;
  return last != NULL || consumed ? 1 : 0;
}

/* ---- the handler ---- */

static void http_free(weft_decoder *d) {
  http_server *s = (http_server *)d;
  weft_timer_stop(&s->timer);
  free(s->hdrs);
  free(s->queue);
  free(s);
}

static void http_added(weft_ctx *ctx) {
  http_server *s = weft_ctx_state(ctx);
  s->ctx = ctx;
  weft_timer_init(weft_channel_loop(weft_ctx_channel(ctx)), &s->timer);
  if (s->o.header_timeout_ms != 0)
    weft_timer_start(&s->timer, (uint64_t)s->o.header_timeout_ms * 1000000, 0,
                     header_timeout, s);
}

static const weft_handler http_server_handler = {
    .name = "http_server_codec",
    .handler_added = http_added,
    .channel_read = weft_decoder_channel_read,
    .handler_removed = weft_decoder_handler_removed,
    .user_event = weft_decoder_user_event,
    .write = http_write};

void weft_http_server_options_init(weft_http_server_options *o) {
  *o = (weft_http_server_options){.max_head_bytes = 16 * 1024,
                                  .max_headers = 100,
                                  .max_body = 1024 * 1024,
                                  .header_timeout_ms = 10000,
                                  .max_pipelined = 64,
                                  .server = "weft"};
}

int weft_http_server_codec_add_last(weft_pipeline *p, const char *name,
                                    const weft_http_server_options *opts) {
  http_server *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  if (opts != NULL)
    s->o = *opts;
  else
    weft_http_server_options_init(&s->o);
  if (s->o.max_pipelined == 0)
    s->o.max_pipelined = 1;
  s->queue = malloc(s->o.max_pipelined);
  if (s->queue == NULL) {
    free(s);
    return WEFT_ENOMEM;
  }
  weft_decoder_init(&s->base, http_decode, http_free);
  s->between = true;
  llhttp_init(&s->parser, HTTP_REQUEST, &settings);
  s->parser.data = s;
  return weft_decoder_add_last(p, name, &http_server_handler, &s->base);
}
