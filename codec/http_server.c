/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP/1.1 server codec: llhttp (strict mode) under the cumulating
 * decoder base for requests, and the response encoder, in one handler so
 * that both halves share the queue of requests waiting for a response
 * (Netty's HttpServerCodec keeps the same queue of methods).
 * llhttp is driven by http_parse.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/channel.h>
#include <weft/decoder.h>
#include <weft/error.h>
#include <weft/file_region.h>
#include <weft/http.h>
#include <weft/log.h>
#include <weft/timer.h>

#include "codec/codec_internal.h"
#include "codec/http_internal.h"
#include "codec/http_parse.h"

/* Flags of a request waiting for its response. */
enum {
  Q_HEAD = 1,      /* HEAD: no body in the response */
  Q_CLOSE = 2,     /* the connection closes after the response */
  Q_V10 = 4,       /* HTTP/1.0: no chunked framing */
  Q_EXPECT = 8,    /* Expect: 100-continue, not answered yet */
  Q_DECODING = 16, /* it has a body, still being decoded */
};

/* The framing of the response being written. */
enum resp_mode { RESP_NONE, RESP_NOBODY, RESP_LENGTH, RESP_CHUNKED, RESP_EOF };

typedef struct http_server {
  weft_decoder base;
  weft_http_server_options o;
  weft__http_parse p;
  weft_ctx *ctx;
  weft_timer timer;      /* header timeout */
  weft_timer body_timer; /* body timeout: restarted by each read of body */
  bool body_paused;      /* its last deadline passed while reading paused */
  bool stop;             /* no more requests on this connection */
  bool decoding_close;   /* the request being decoded ends the connection */
  int reject_status;     /* answer this once the queued requests are answered */
  /* requests waiting for their response, oldest first */
  uint8_t *queue;
  size_t q_head, q_len;
  bool read_paused; /* we turned auto-read off (queue full) */
  /* encoding */
  enum resp_mode mode;
  uint64_t remaining; /* RESP_LENGTH: body bytes still to come */
  bool resp_close;
} http_server;

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

/* ---- the header and body timeouts ---- */

static void body_timeout(void *arg);

/* (Re)starts `t` to fire `ms` from now; 0 = no timeout. */
static void arm(http_server *s, weft_timer *t, uint32_t ms, weft_task_cb cb) {
  if (ms != 0)
    weft_timer_start(t, (uint64_t)ms * 1000000, 0, cb, s);
}

/* The server waits for body bytes: the request being decoded has a body
 * whose end has not come, and no 100 Continue it asked for is still owed
 * (until it is sent, the client is right to wait). */
static bool body_awaited(http_server *s) {
  uint8_t *back = q_back(s);
  return !s->stop && back != NULL &&
         (*back & (Q_DECODING | Q_EXPECT)) == Q_DECODING;
}

/* The body timeout counts from now: called when the server starts or goes
 * on waiting for body bytes (after a read, a 100 Continue, a resume). */
static void body_wait(http_server *s) {
  s->body_paused = false;
  if (body_awaited(s))
    arm(s, &s->body_timer, s->o.body_timeout_ms, body_timeout);
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
/* Appenders for the head: by hand, not snprintf, which cost more than
 * llhttp's parse of the request in a profile of pipelined /plaintext. */
static char *put(char *w, const char *src, size_t n) {
  memcpy(w, src, n);
  return w + n;
}

#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

static char *put_u64(char *w, uint64_t v) {
  char digits[20];
  size_t n = 0;
  do {
    digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  return put(w, digits + sizeof digits - n, n);
}

/* A status line and headers: the head of a response to the front request.
 * `extra` bytes of room are left after it (an inline body). */
static weft_buf *encode_head(http_server *s, const weft_http_response *r,
                             int64_t cl, bool chunked, bool v10ka,
                             size_t extra) {
  const char *reason = weft_http_reason(r->status);
  size_t reason_len = strlen(reason);
  const char *server = s->o.server;
  size_t server_len = server != NULL ? strlen(server) : 0;
  /* status line 14 + reason, Server 10 + name, Date 37, Content-Length 38,
   * Connection 24, CRLF 2: 140 covers the fixed parts with room. */
  size_t cap = 140 + reason_len + server_len + r->fields.len + extra;
  weft_channel *ch = weft_ctx_channel(s->ctx);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), cap);
  if (b == NULL)
    return NULL;
  char *start = (char *)weft_buf_wptr(b), *w = start;
  w = PUT_LIT(w, "HTTP/1.1 ");
  w = put_u64(w, (uint64_t)r->status); /* 100..599: checked by the caller */
  *w++ = ' ';
  w = put(w, reason, reason_len);
  w = PUT_LIT(w, "\r\n");
  if (server != NULL) {
    w = PUT_LIT(w, "Server: ");
    w = put(w, server, server_len);
    w = PUT_LIT(w, "\r\n");
  }
  w = PUT_LIT(w, "Date: ");
  w = put(w, weft__http_date(), 29);
  w = PUT_LIT(w, "\r\n");
  w = put(w, r->fields.buf, r->fields.len);
  if (cl >= 0) {
    w = PUT_LIT(w, "Content-Length: ");
    w = put_u64(w, (uint64_t)cl);
    w = PUT_LIT(w, "\r\n");
  } else if (chunked) {
    w = PUT_LIT(w, "Transfer-Encoding: chunked\r\n");
  }
  if (s->resp_close)
    w = PUT_LIT(w, "Connection: close\r\n");
  else if (v10ka)
    w = PUT_LIT(w, "Connection: keep-alive\r\n");
  w = PUT_LIT(w, "\r\n");
  b->writer_index += (size_t)(w - start);
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
    body_wait(s); /* the body is asked for only now */
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
  /* A whole response to a request whose body is still coming: that body
   * would be taken for the next request, so the connection ends (RFC 9110
   * 10.1.1 lets a server answer early, then it must read or close). */
  s->resp_close = r->close || (*front & Q_CLOSE) ||
                  (r->body != NULL && (*front & Q_DECODING));
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

/* A body chunk: `b` is a weft_buf or a weft_file_region (the handler
 * takes regions: their bytes are framed here as a buffer's are, and the
 * region goes on to the head as it is) of `n` bytes. */
static void write_chunk(http_server *s, void *b, uint64_t n, weft_promise pr) {
  switch (s->mode) {
  case RESP_NONE:
    return fail_write(s, b, pr, "body chunk outside a response");
  case RESP_NOBODY: /* HEAD, 204, 304: the body is not sent */
    weft_msg_release(b);
    return weft_promise_complete(pr, 0);
  case RESP_LENGTH:
    if (n > s->remaining) {
      s->resp_close = true; /* the framing is broken: end the connection */
      return fail_write(s, b, pr, "body longer than its Content-Length");
    }
    s->remaining -= n;
    return weft_ctx_write(s->ctx, b, pr);
  case RESP_CHUNKED:
    if (n == 0) { /* an empty chunk would end the body */
      weft_msg_release(b);
      return weft_promise_complete(pr, 0);
    }
    return weft__http_write_chunk(s->ctx, b, n, pr);
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
    write_chunk(s, msg, weft_buf_readable(msg), pr);
  else if (weft_msg_is(msg, &weft_file_region_type))
    write_chunk(s, msg, weft_file_region_left(msg), pr);
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
 * after the requests before it, then the connection closes. Input still
 * held is dropped by the next decode (`stop`). May free `s` with the
 * channel when called from outside a decode (a timer). */
static void refuse(http_server *s, int status) {
  weft_timer_stop(&s->timer);
  weft_timer_stop(&s->body_timer);
  s->stop = true;
  s->p.pos = 0;
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
}

/* refuse() for bad input: the reason logged, the rest of `in` dropped. */
static int reject(http_server *s, weft_buf *in, int status,
                  const char *reason) {
  weft_log(WEFT_LOG_INFO, "channel %" PRIu64 ": http: %d %s: %s",
           weft_channel_id(weft_ctx_channel(s->ctx)), status,
           weft_http_reason(status), reason);
  in->reader_index = in->writer_index;
  refuse(s, status);
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

/* The checks llhttp leaves to the server; 0 or the status to answer. */
static int check_head(http_server *s, const char *base, size_t *hosts,
                      bool *expect, const char **why) {
  if (s->p.parser.http_major != 1 || s->p.parser.http_minor > 1) {
    *why = "HTTP version other than 1.0 and 1.1";
    return 505;
  }
  weft__http_trim_values(&s->p, base);
  for (size_t i = 0; i < s->p.nhdrs; i++) {
    const weft__http_hdr_pos *h = &s->p.hdrs[i];
    const char *name = base + h->name_off;
    if (weft__http_str_is(name, h->name_len, "host"))
      ++*hosts;
    else if (weft__http_str_is(name, h->name_len, "expect"))
      *expect =
          weft__http_str_is(base + h->value_off, h->value_len, "100-continue");
  }
  if (s->p.parser.http_minor == 1 && *hosts != 1) {
    *why = "HTTP/1.1 request without exactly one Host (RFC 9112 3.2)";
    return 400;
  }
  /* RFC 9112 6.3: a request whose last transfer coding is not chunked. */
  if ((s->p.parser.flags & F_TRANSFER_ENCODING) &&
      !(s->p.parser.flags & F_CHUNKED)) {
    *why = "Transfer-Encoding without chunked last";
    return 400;
  }
  if ((s->p.parser.flags & F_CONTENT_LENGTH) &&
      s->p.parser.content_length > s->o.max_body) {
    *why = "Content-Length above max_body";
    return 413;
  }
  return 0;
}

static int emit_head(http_server *s, weft_buf *in, void **out) {
  const char *base = s->p.exec_base;
  size_t hosts = 0;
  bool expect = false;
  const char *why = NULL;
  int status = check_head(s, base, &hosts, &expect, &why);
  if (status != 0)
    return reject(s, in, status, why);
  weft_http_request *req =
      malloc(sizeof *req + s->p.nhdrs * sizeof(weft_http_header));
  weft_buf *data = req != NULL ? weft__http_take_head(&s->p, in) : NULL;
  if (data == NULL) {
    free(req);
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "http: request head");
  }
  const char *p = (const char *)data->base;
  bool chunked = s->p.parser.flags & F_CHUNKED;
  bool has_body = chunked || s->p.parser.content_length > 0;
  *req = (weft_http_request){
      .msg = {&weft_http_request_type},
      .method = method_of(s->p.parser.method),
      .method_name = {p + s->p.line_off, s->p.line_len},
      .target = {p + s->p.url_off, s->p.url_len},
      .version_major = s->p.parser.http_major,
      .version_minor = s->p.parser.http_minor,
      .keep_alive = llhttp_should_keep_alive(&s->p.parser) &&
                    s->p.parser.method != HTTP_CONNECT,
      .expect_continue = expect && s->p.parser.http_minor == 1 && has_body,
      .chunked = chunked,
      .content_length = chunked ? -1 : (int64_t)s->p.parser.content_length,
      .nheaders = s->p.nhdrs,
      .headers = (weft_http_header *)(req + 1),
      .data = data};
  weft__http_fill_headers(&s->p, p, req->headers);
  weft_timer_stop(&s->timer);
  /* A bodiless request is decoded whole once its head is: a handler may
   * answer it at its head, and the connection goes on. */
  uint8_t flags = (s->p.parser.method == HTTP_HEAD ? Q_HEAD : 0) |
                  (req->keep_alive ? 0 : Q_CLOSE) |
                  (req->version_minor == 0 ? Q_V10 : 0) |
                  (has_body ? Q_DECODING : 0);
  s->decoding_close = !req->keep_alive;
  if (req->expect_continue && s->q_len == 0)
    send_continue(s);
  else if (req->expect_continue)
    flags |= Q_EXPECT;
  q_push(s, flags);
  *out = req;
  return 1;
}

static int emit_end(http_server *s, void **out) {
  s->p.end_pending = false;
  uint8_t *back = q_back(s);
  if (back != NULL && (*back & Q_DECODING))
    *back &= (uint8_t)~Q_DECODING;
  weft_timer_stop(&s->body_timer); /* the body has ended */
  if (s->decoding_close)
    s->stop = true; /* nothing after a request that ends the connection */
  *out = weft_http_end();
  return 1;
}

static void log_timeout(http_server *s, const char *what, uint32_t ms) {
  weft_log(WEFT_LOG_INFO,
           "channel %" PRIu64 ": http: 408 Request Timeout: %s within %" PRIu32
           " ms",
           weft_channel_id(weft_ctx_channel(s->ctx)), what, ms);
}

static void header_timeout(void *arg) {
  http_server *s = arg;
  if (s->stop)
    return;
  log_timeout(s, "no complete request head", s->o.header_timeout_ms);
  write_status(s, 408); /* flushes; may free `s` with the channel */
}

static void body_timeout(void *arg) {
  http_server *s = arg;
  if (!body_awaited(s))
    return;
  /* While the server itself does not read (flow control, auto-read off,
   * a yield), the client's silence is not its fault. The decoder's
   * read-resumed event is not the codec's to take, so the deadline moves
   * one period on; and once more after a pause was seen, so the client
   * gets a whole period of the server reading after it. */
  if (!weft_channel_is_reading(weft_ctx_channel(s->ctx)) || s->body_paused) {
    s->body_paused = !weft_channel_is_reading(weft_ctx_channel(s->ctx));
    arm(s, &s->body_timer, s->o.body_timeout_ms, body_timeout);
    return;
  }
  log_timeout(s, "no request body bytes", s->o.body_timeout_ms);
  refuse(s, 408); /* as a reject in the body; may free `s` */
}

/* One run of llhttp and what it yields; returns what decode returns. */
static int execute(void *owner, weft_buf *in, void **out) {
  http_server *s = owner;
  if (s->p.end_pending)
    return emit_end(s, out);
  if (s->p.between && s->q_len >= s->o.max_pipelined) {
    set_reading(s, false); /* resumed by finish_response */
    return 0;
  }
  switch (weft__http_parse_run(&s->p, in)) {
  case WEFT__HTTP_UPGRADE:
    /* weft does not tunnel: after CONNECT (answered, then closed: its
     * request is not keep-alive) the input is dropped. It does not switch
     * protocols either: an Upgrade request is answered in HTTP/1.1 and
     * the next one parsed (RFC 9110 7.8 lets a server ignore Upgrade). */
    if (s->p.parser.method == HTTP_CONNECT) {
      s->stop = true;
      in->reader_index = in->writer_index;
      s->p.pos = 0;
    } else {
      llhttp_resume_after_upgrade(&s->p.parser);
      weft__http_consume(&s->p, in);
    }
    return 1;
  case WEFT__HTTP_ERROR:
    return reject(s, in, s->p.error_status, s->p.error_reason);
  case WEFT__HTTP_HEAD:
    return emit_head(s, in, out);
  case WEFT__HTTP_MORE:
    /* The deadline counts from the first read that left a head
     * incomplete; a head read whole never touches the timer heap. */
    if (!weft_timer_active(&s->timer))
      arm(s, &s->timer, s->o.header_timeout_ms, header_timeout);
    s->base.need = s->o.max_head_bytes + 1;
    return 0;
  case WEFT__HTTP_DATA:
    break;
  }
  if (s->p.body_len > 0) {
    *out = weft__http_take_body(&s->p, in);
    return *out != NULL
               ? 1
               : weft_decoder_fail(&s->base, WEFT_ENOMEM, "http: body slice");
  }
  weft__http_consume(&s->p, in);
  if (s->p.end_pending)
    return emit_end(s, out);
  return 1; /* consumed chunk framing only */
}

static int http_decode(weft_decoder *d, weft_buf *in, void **out) {
  http_server *s = (http_server *)d;
  int rc =
      weft__http_decode_all(d, s->ctx, &s->p, &s->stop, in, out, execute, s);
  /* Once per decode, not per body slice: a body that came whole with its
   * head leaves no timer behind; one still coming counts from this read. */
  body_wait(s);
  return rc;
}

/* ---- the handler ---- */

static void http_free(weft_decoder *d) {
  http_server *s = (http_server *)d;
  weft_timer_stop(&s->timer);
  weft_timer_stop(&s->body_timer);
  weft__http_parse_fini(&s->p);
  free(s->queue);
  free(s);
}

static void http_added(weft_ctx *ctx) {
  http_server *s = weft_ctx_state(ctx);
  s->ctx = ctx;
  weft_loop *loop = weft_channel_loop(weft_ctx_channel(ctx));
  weft_timer_init(loop, &s->timer);
  weft_timer_init(loop, &s->body_timer);
  arm(s, &s->timer, s->o.header_timeout_ms, header_timeout);
}

static const weft_handler http_server_handler = {.name = "http_server_codec",
                                                 .handler_added = http_added,
                                                 WEFT__DECODER_OPS,
                                                 .write = http_write,
                                                 .file_regions = true};

void weft_http_server_options_init(weft_http_server_options *o) {
  *o = (weft_http_server_options){.max_head_bytes = 16 * 1024,
                                  .max_headers = 100,
                                  .max_body = 1024 * 1024,
                                  .header_timeout_ms = 10000,
                                  .body_timeout_ms = 60000,
                                  .max_pipelined = 64,
                                  .server = "weft"};
}

int weft_http_server_codec_add_last(weft_pipeline *p, const char *name,
                                    const weft_http_server_options *opts) {
  http_server *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_http_server_options_init);
  if (s->o.max_pipelined == 0)
    s->o.max_pipelined = 1;
  s->queue = malloc(s->o.max_pipelined);
  if (s->queue == NULL) {
    free(s);
    return WEFT_ENOMEM;
  }
  weft_decoder_init(&s->base, http_decode, http_free);
  weft__http_parse_init(&s->p, HTTP_REQUEST);
  s->p.max_head_bytes = s->o.max_head_bytes;
  s->p.max_headers = s->o.max_headers;
  s->p.max_body = s->o.max_body;
  return weft_decoder_add_last(p, name, &http_server_handler, &s->base);
}
