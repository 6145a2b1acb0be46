/* SPDX-License-Identifier: Apache-2.0 */
/* The llhttp driver shared by the server and client codecs (private).
 *
 * llhttp is pushed the bytes of a cumulating decoder's buffer past what it
 * parsed already, and pauses at the end of a head, of a chunk and of a
 * message. Positions are offsets from the reader index, which stay valid
 * when the decoder base moves unread bytes into its cumulation; a head
 * stays unconsumed until it is complete, so its slices are one stretch.
 * Body bytes are consumed as they are parsed and taken as slices. */
#ifndef WEFT_CODEC_HTTP_PARSE_H
#define WEFT_CODEC_HTTP_PARSE_H

#include <llhttp.h>

#include <weft/buf.h>
#include <weft/decoder.h>
#include <weft/http.h>

/* Why llhttp paused. */
enum weft__http_pause {
  WEFT__PAUSE_NONE,
  WEFT__PAUSE_HEAD,
  WEFT__PAUSE_CHUNK,
  WEFT__PAUSE_END
};

/* Which span llhttp reported last, so a span cut by the end of a read is
 * joined with its rest and a value line that is not contiguous with the
 * value before it is recognised as obs-fold. */
enum weft__http_span { WEFT__SPAN_NONE, WEFT__SPAN_FIELD, WEFT__SPAN_VALUE };

typedef struct weft__http_hdr_pos {
  size_t name_off, name_len, value_off, value_len;
} weft__http_hdr_pos;

typedef struct weft__http_parse {
  llhttp_t parser;
  /* limits, set by the codec */
  size_t max_head_bytes;
  size_t max_headers;
  uint64_t max_body;
  bool skip_body; /* client: the message being parsed answers a HEAD */
  /* progress */
  const char *exec_base; /* the reader pointer of the running execute */
  size_t pos;            /* bytes past the reader index parsed already */
  bool in_head;          /* between a message's first byte and its head's end */
  bool between;          /* between messages: no byte of the next parsed */
  bool paused;           /* llhttp paused: it runs again even with no new bytes
                            (a bodiless message ends in a run over zero bytes) */
  bool end_pending;      /* the message ended; its end marker is not out yet */
  enum weft__http_pause pause;
  enum weft__http_span span;
  size_t line_off, line_len; /* the method, or the status' reason phrase */
  size_t url_off, url_len;
  weft__http_hdr_pos *hdrs;
  size_t nhdrs, hdrs_cap;
  size_t body_off, body_len; /* a parsed body span not taken yet */
  uint64_t body_total;
  size_t trailer_bytes;
  int error_status; /* after WEFT__HTTP_ERROR: the status that fits */
  char error_reason[128];
} weft__http_parse;

/* What weft__http_parse_run found. */
enum weft__http_result {
  WEFT__HTTP_MORE,    /* an incomplete head: its bytes stay unconsumed */
  WEFT__HTTP_HEAD,    /* a complete head of `pos` bytes */
  WEFT__HTTP_DATA,    /* body bytes and/or framing parsed, maybe the end */
  WEFT__HTTP_UPGRADE, /* a CONNECT or Upgrade message ended */
  WEFT__HTTP_ERROR    /* error_status and error_reason say what */
};

/* Sets up `p` for requests (HTTP_REQUEST) or responses (HTTP_RESPONSE);
 * the limits are set by the caller afterwards. */
void weft__http_parse_init(weft__http_parse *p, llhttp_type_t type);
void weft__http_parse_fini(weft__http_parse *p);

/* Runs llhttp over the bytes of `in` past `pos`, up to its next pause. */
enum weft__http_result weft__http_parse_run(weft__http_parse *p, weft_buf *in);

/* After WEFT__HTTP_HEAD: the head's bytes as a slice (consumed), or NULL
 * on ENOMEM; its header slices are filled by weft__http_fill_headers. */
weft_buf *weft__http_take_head(weft__http_parse *p, weft_buf *in);
void weft__http_fill_headers(const weft__http_parse *p, const char *base,
                             weft_http_header *out);

/* After WEFT__HTTP_DATA: the pending body span as a slice (NULL on
 * ENOMEM), with everything parsed consumed; or, with no span, consume. */
weft_buf *weft__http_take_body(weft__http_parse *p, weft_buf *in);
void weft__http_consume(weft__http_parse *p, weft_buf *in);

/* Header values lose the whitespace llhttp leaves at their end (`base`:
 * the reader pointer the offsets count from). */
void weft__http_trim_values(weft__http_parse *p, const char *base);

/* True when `n` bytes at `s` equal `c` ignoring ASCII case. */
bool weft__http_str_is(const char *s, size_t n, const char *c);

/* One step of a codec: a run of the parser and the message it yields, as
 * a decode callback returns (1 with *m or not, 0 for more bytes, < 0). */
typedef int (*weft__http_step_cb)(void *owner, weft_buf *in, void **m);

/*
 * The decode callback of both codecs. It decodes every message of the
 * bytes at hand, not just one: the base calls decode only while bytes are
 * left, but the end of a message may need a run of llhttp over no bytes (a
 * bodiless message) or follow the body slice that consumed the last byte.
 * So each message but the last is fired here and the last is returned;
 * between messages it stops where the base would (the channel stopped
 * reading), never inside one: a message whose head is out gets its body
 * and end from the bytes at hand. It stops at once when the handler went.
 * `*stop` set: input is dropped.
 */
int weft__http_decode_all(weft_decoder *d, weft_ctx *ctx, weft__http_parse *p,
                          const bool *stop, weft_buf *in, void **out,
                          weft__http_step_cb step, void *owner);

#endif /* WEFT_CODEC_HTTP_PARSE_H */
