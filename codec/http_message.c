/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1.1 messages: request heads, the end marker, response heads and
 * their header lines, reason phrases, and the chunk framing of both codecs.
 * No parsing here (http_server.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/http.h>

#include "codec/http_internal.h"

static void request_release(void *msg) {
  weft_http_request *req = msg;
  weft_buf_release(req->data);
  free(req);
}

const weft_msg_type weft_http_request_type = {.name = "weft_http_request",
                                              .release = request_release};

static void end_release(void *msg) { (void)msg; }

const weft_msg_type weft_http_end_type = {.name = "weft_http_end",
                                          .release = end_release};

static weft_msg end_marker = {&weft_http_end_type};

void *weft_http_end(void) { return &end_marker; }

bool weft_http_str_equals(weft_http_str s, const char *c) {
  size_t n = strlen(c);
  return s.ptr != NULL && s.len == n && strncasecmp(s.ptr, c, n) == 0;
}

weft_http_str weft_http_request_header(const weft_http_request *req,
                                       const char *name) {
  for (size_t i = 0; i < req->nheaders; i++)
    if (weft_http_str_equals(req->headers[i].name, name))
      return req->headers[i].value;
  return (weft_http_str){NULL, 0};
}

weft_buf *weft_http_slice_buf(const weft_http_request *req, weft_http_str s) {
  const char *base = (const char *)req->data->base;
  if (s.ptr < base || s.ptr + s.len > base + req->data->capacity)
    return NULL;
  return weft_buf_slice(req->data, (size_t)(s.ptr - base), s.len);
}

/* ---- responses ---- */

static void response_release(void *msg) {
  weft_http_response *r = msg;
  weft_buf_release(r->body);
  weft__http_fields_free(&r->fields);
  free(r);
}

const weft_msg_type weft_http_response_type = {.name = "weft_http_response",
                                               .release = response_release};

weft_http_response *weft_http_response_new(int status) {
  weft_http_response *r = malloc(sizeof *r);
  if (r == NULL)
    return NULL;
  r->msg.type = &weft_http_response_type;
  r->status = status;
  r->content_length = -1;
  r->close = false;
  r->body = NULL;
  weft__http_fields_init(&r->fields);
  return r;
}

/* CR, LF and NUL in a field would let a value forge headers or a second
 * response (response splitting, RFC 9110 5.5). */
static bool field_safe(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] == '\r' || s[i] == '\n')
      return false;
  return true;
}

void weft__http_fields_init(weft_http_fields *f) {
  f->buf = f->inline_buf;
  f->len = 0;
  f->cap = sizeof f->inline_buf;
}

void weft__http_fields_free(weft_http_fields *f) {
  if (f->buf != f->inline_buf)
    free(f->buf);
}

int weft__http_fields_append(weft_http_fields *f, const char *s, size_t n) {
  if (f->cap - f->len < n) {
    size_t cap = 2 * f->cap;
    while (cap - f->len < n)
      cap *= 2;
    char *p = f->buf == f->inline_buf ? malloc(cap) : realloc(f->buf, cap);
    if (p == NULL)
      return WEFT_ENOMEM;
    if (f->buf == f->inline_buf)
      memcpy(p, f->inline_buf, f->len);
    f->buf = p;
    f->cap = cap;
  }
  memcpy(f->buf + f->len, s, n);
  f->len += n;
  return 0;
}

int weft__http_fields_add(weft_http_fields *f, const char *name,
                          const char *value) {
  size_t n = strlen(name), v = strlen(value);
  if (n == 0 || !field_safe(name, n) || !field_safe(value, v) ||
      memchr(name, ':', n) != NULL)
    return WEFT_EINVAL;
  size_t len = f->len;
  if (weft__http_fields_append(f, name, n) != 0 ||
      weft__http_fields_append(f, ": ", 2) != 0 ||
      weft__http_fields_append(f, value, v) != 0 ||
      weft__http_fields_append(f, "\r\n", 2) != 0) {
    f->len = len;
    return WEFT_ENOMEM;
  }
  return 0;
}

int weft_http_response_add_header(weft_http_response *r, const char *name,
                                  const char *value) {
  return weft__http_fields_add(&r->fields, name, value);
}

int weft_http_respond(weft_ctx *ctx, int status, const char *content_type,
                      const void *body, size_t len) {
  weft_http_response *r = weft_http_response_new(status);
  if (r == NULL)
    return WEFT_ENOMEM;
  int rc = content_type != NULL
               ? weft_http_response_add_header(r, "Content-Type", content_type)
               : 0;
  if (rc != 0) {
    weft_msg_release(r);
    return rc;
  }
  weft_channel *ch = weft_ctx_channel(ctx);
  r->body =
      weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), len > 0 ? len : 1);
  if (r->body == NULL) {
    weft_msg_release(r);
    return WEFT_ENOMEM;
  }
  weft_buf_write_bytes(r->body, body, len);
  weft_ctx_write(ctx, r, WEFT_PROMISE_NONE);
  return 0;
}

/* RFC 9110 section 15's phrases. */
const char *weft_http_reason(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 101:
    return "Switching Protocols";
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 202:
    return "Accepted";
  case 204:
    return "No Content";
  case 206:
    return "Partial Content";
  case 301:
    return "Moved Permanently";
  case 302:
    return "Found";
  case 303:
    return "See Other";
  case 304:
    return "Not Modified";
  case 307:
    return "Temporary Redirect";
  case 308:
    return "Permanent Redirect";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 409:
    return "Conflict";
  case 411:
    return "Length Required";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 415:
    return "Unsupported Media Type";
  case 416:
    return "Range Not Satisfiable";
  case 417:
    return "Expectation Failed";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "";
  }
}

/* The IMF-fixdate of now (RFC 9110 5.6.7), formatted once per second per
 * thread: each loop is one thread, so this is the per-loop cache, and a
 * response costs a time() (vDSO) and a 29-byte copy. */
const char *weft__http_date(void) {
  static _Thread_local time_t cached_sec = -1;
  static _Thread_local char text[32];
  time_t now = time(NULL);
  if (now != cached_sec) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    cached_sec = now;
  }
  return text;
}

void weft__http_write_chunk(weft_ctx *ctx, void *chunk, uint64_t n,
                            weft_promise pr) {
  char line[24];
  int len = snprintf(line, sizeof line, "%" PRIx64 "\r\n", n);
  weft_ctx_write_bytes(ctx, line, (size_t)len, WEFT_PROMISE_NONE);
  weft_ctx_write(ctx, chunk, WEFT_PROMISE_NONE);
  weft_ctx_write_bytes(ctx, "\r\n", 2, pr);
}
