/* SPDX-License-Identifier: Apache-2.0 */
/* The llhttp driver shared by the HTTP codecs (http_parse.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/channel.h>
#include <weft/decoder.h>

#include "codec/http_parse.h"

static weft__http_parse *of(llhttp_t *p) { return p->data; }

static int cb_error(weft__http_parse *s, int status, const char *reason) {
  s->error_status = status;
  snprintf(s->error_reason, sizeof s->error_reason, "%s", reason);
  return HPE_USER;
}

/* Bytes of head from the reader index to the end of `at`..`len`. */
static int head_check(weft__http_parse *s, const char *at, size_t len) {
  size_t end = (size_t)(at - s->exec_base) + len;
  if (end <= s->max_head_bytes)
    return 0;
  return s->nhdrs == 0 && s->span == WEFT__SPAN_NONE
             ? cb_error(s, 414, "start line above max_head_bytes")
             : cb_error(s, 431, "head above max_head_bytes");
}

static int on_message_begin(llhttp_t *p) {
  weft__http_parse *s = of(p);
  s->in_head = true;
  s->between = false;
  s->span = WEFT__SPAN_NONE;
  s->nhdrs = s->line_len = s->url_len = 0;
  s->body_total = 0;
  s->trailer_bytes = 0;
  return 0;
}

/* Joins a span cut by the end of a read with its rest. */
static void span_join(weft__http_parse *s, size_t *off, size_t *len,
                      const char *at, size_t n) {
  size_t o = (size_t)(at - s->exec_base);
  if (*len == 0)
    *off = o;
  *len = o + n - *off;
}

static int on_line(llhttp_t *p, const char *at, size_t n) {
  weft__http_parse *s = of(p);
  span_join(s, &s->line_off, &s->line_len, at, n);
  return head_check(s, at, n);
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  weft__http_parse *s = of(p);
  span_join(s, &s->url_off, &s->url_len, at, n);
  return head_check(s, at, n);
}

/* Trailer fields (after a chunked body) are parsed by llhttp and dropped
 * here; their bytes are consumed as they come, so they are only counted,
 * against max_head_bytes. */
static int trailer(weft__http_parse *s, size_t n) {
  s->trailer_bytes += n;
  return s->trailer_bytes > s->max_head_bytes
             ? cb_error(s, 431, "trailer section above max_head_bytes")
             : 0;
}

static int new_header(weft__http_parse *s) {
  if (s->nhdrs == s->max_headers)
    return cb_error(s, 431, "more header fields than max_headers");
  if (s->nhdrs == s->hdrs_cap) {
    size_t cap = s->hdrs_cap ? 2 * s->hdrs_cap : 16;
    weft__http_hdr_pos *h = realloc(s->hdrs, cap * sizeof *h);
    if (h == NULL)
      return cb_error(s, 500, "out of memory for header fields");
    s->hdrs = h;
    s->hdrs_cap = cap;
  }
  s->hdrs[s->nhdrs++] = (weft__http_hdr_pos){0};
  s->span = WEFT__SPAN_FIELD;
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  weft__http_parse *s = of(p);
  if (!s->in_head)
    return trailer(s, n);
  int rc = head_check(s, at, n);
  if (rc == 0 && s->span != WEFT__SPAN_FIELD)
    rc = new_header(s);
  if (rc != 0)
    return rc;
  weft__http_hdr_pos *h = &s->hdrs[s->nhdrs - 1];
  span_join(s, &h->name_off, &h->name_len, at, n);
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  weft__http_parse *s = of(p);
  if (!s->in_head)
    return trailer(s, n);
  int rc = head_check(s, at, n);
  if (rc != 0)
    return rc;
  weft__http_hdr_pos *h = &s->hdrs[s->nhdrs - 1];
  size_t o = (size_t)(at - s->exec_base);
  /* A second value span that does not continue the first one began on a
   * line of its own: obs-fold, which RFC 9112 5.2 lets a server reject and
   * which smuggles headers past a proxy that unfolds differently. */
  if (s->span == WEFT__SPAN_VALUE && o != h->value_off + h->value_len)
    return cb_error(s, 400, "obs-fold (a header line continuing another)");
  s->span = WEFT__SPAN_VALUE;
  span_join(s, &h->value_off, &h->value_len, at, n);
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  weft__http_parse *s = of(p);
  s->pause = WEFT__PAUSE_HEAD;
  /* What a return of 1 would do (no body: a response to HEAD), kept
   * together with the pause. */
  if (s->skip_body)
    p->flags |= F_SKIPBODY;
  return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  weft__http_parse *s = of(p);
  s->body_total += n;
  if (s->body_total > s->max_body)
    return cb_error(s, 413, "body above max_body");
  span_join(s, &s->body_off, &s->body_len, at, n);
  return 0;
}

static int on_chunk_complete(llhttp_t *p) {
  of(p)->pause = WEFT__PAUSE_CHUNK;
  return HPE_PAUSED;
}

static int on_message_complete(llhttp_t *p) {
  of(p)->pause = WEFT__PAUSE_END;
  return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_line,
    .on_status = on_line,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_complete = on_chunk_complete,
    .on_message_complete = on_message_complete,
};

void weft__http_parse_init(weft__http_parse *p, llhttp_type_t type) {
  memset(p, 0, sizeof *p);
  p->between = true;
  llhttp_init(&p->parser, type, &settings);
  p->parser.data = p;
}

void weft__http_parse_fini(weft__http_parse *p) { free(p->hdrs); }

enum weft__http_result weft__http_parse_run(weft__http_parse *p, weft_buf *in) {
  size_t avail = weft_buf_readable(in) - p->pos;
  p->exec_base = (const char *)weft_buf_rptr(in);
  p->pause = WEFT__PAUSE_NONE;
  const char *from = p->exec_base + p->pos;
  llhttp_errno_t err = llhttp_execute(&p->parser, from, avail);
  size_t used =
      err == HPE_OK ? avail : (size_t)(llhttp_get_error_pos(&p->parser) - from);
  p->pos += used;
  if (err == HPE_PAUSED_UPGRADE) {
    p->paused = false;
    if (p->pause == WEFT__PAUSE_END) { /* the message ended in this run */
      p->end_pending = true;
      p->between = true;
    }
    return WEFT__HTTP_UPGRADE;
  }
  if (err != HPE_OK && err != HPE_PAUSED) {
    if (p->error_status == 0) {
      p->error_status = 400;
      snprintf(p->error_reason, sizeof p->error_reason, "%s (%s)",
               llhttp_get_error_reason(&p->parser), llhttp_errno_name(err));
    }
    return WEFT__HTTP_ERROR;
  }
  p->paused = err == HPE_PAUSED;
  if (p->paused)
    llhttp_resume(&p->parser);
  if (p->pause == WEFT__PAUSE_HEAD)
    return WEFT__HTTP_HEAD;
  if (p->in_head)
    return WEFT__HTTP_MORE;
  if (p->pause == WEFT__PAUSE_END) {
    p->end_pending = true;
    p->between = true;
    p->paused = false; /* nothing is left to run over zero bytes */
  }
  return WEFT__HTTP_DATA;
}

weft_buf *weft__http_take_head(weft__http_parse *p, weft_buf *in) {
  weft_buf *data = weft_buf_read_slice(in, p->pos);
  if (data != NULL) {
    p->pos = 0;
    p->in_head = false;
  }
  return data;
}

void weft__http_fill_headers(const weft__http_parse *p, const char *base,
                             weft_http_header *out) {
  for (size_t i = 0; i < p->nhdrs; i++)
    out[i] =
        (weft_http_header){{base + p->hdrs[i].name_off, p->hdrs[i].name_len},
                           {base + p->hdrs[i].value_off, p->hdrs[i].value_len}};
}

void weft__http_consume(weft__http_parse *p, weft_buf *in) {
  in->reader_index += p->pos;
  p->pos = 0;
}

weft_buf *weft__http_take_body(weft__http_parse *p, weft_buf *in) {
  size_t start = in->reader_index;
  in->reader_index = start + p->body_off;
  weft_buf *b = weft_buf_read_slice(in, p->body_len);
  in->reader_index = start + p->pos;
  p->pos = 0;
  p->body_len = 0;
  return b;
}

void weft__http_trim_values(weft__http_parse *p, const char *base) {
  for (size_t i = 0; i < p->nhdrs; i++) {
    weft__http_hdr_pos *h = &p->hdrs[i];
    while (h->value_len > 0 && (base[h->value_off + h->value_len - 1] == ' ' ||
                                base[h->value_off + h->value_len - 1] == '\t'))
      h->value_len--;
  }
}

bool weft__http_str_is(const char *s, size_t n, const char *c) {
  size_t cn = strlen(c);
  return n == cn && strncasecmp(s, c, n) == 0;
}

int weft__http_decode_all(weft_decoder *d, weft_ctx *ctx, weft__http_parse *p,
                          const bool *stop, weft_buf *in, void **out,
                          weft__http_step_cb step, void *owner) {
  void *last = NULL;
  bool consumed = false;
  for (;;) {
    if (*stop) { /* after a close or an error: input is dropped */
      consumed |= weft_buf_readable(in) > 0;
      in->reader_index = in->writer_index;
      break;
    }
    if (!p->end_pending && weft_buf_readable(in) <= p->pos && !p->paused)
      break;
    void *m = NULL;
    int rc = step(owner, in, &m);
    if (rc < 0) {
      if (last == NULL)
        return rc;
      weft_ctx_fire_exception_caught(ctx, rc, d->reason);
      break;
    }
    if (rc == 0)
      break;
    consumed = true;
    if (m == NULL)
      continue;
    if (last != NULL) {
      weft_ctx_fire_channel_read(ctx, last);
      if (d->removed) {
        weft_msg_release(m);
        return 1;
      }
    }
    last = m;
    /* Flow control stops between messages, where the rest waits in the
     * cumulation for the read-resumed event. Not after a head or a body
     * slice: the message's end may need a run over no bytes, which no
     * new read and no resume would bring (the cumulation may be empty),
     * so a pipelined request would never end. */
    if (p->between && !p->end_pending &&
        !weft_channel_is_reading(weft_ctx_channel(ctx)))
      break;
  }
  *out = last;
  return last != NULL || consumed ? 1 : 0;
}
