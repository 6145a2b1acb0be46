/* SPDX-License-Identifier: Apache-2.0 */
/* weft/http.h: HTTP/1.1 on the pipeline (RFC 9110, RFC 9112), Netty's
 * HttpServerCodec shape, parsed by llhttp (Node.js' parser, built into
 * weft from Debian's node-llhttp sources in strict mode; its names never
 * appear here).
 *
 * Inbound, the server codec turns the byte stream into, per request:
 *
 *   weft_http_request   the head: method, target, version, headers as
 *                       slices into the received bytes (no copy)
 *   weft_buf ...        zero or more body chunks (chunked framing removed)
 *   weft_http_end       the end marker (weft_http_end_type), always last
 *
 * Outbound, the handler writes, in request order:
 *
 *   weft_http_response  a head (status, headers, framing); with `body` set
 *                       it is the whole response and nothing else follows
 *   weft_buf ...        otherwise body chunks (chunked on the wire when no
 *                       content length was given and the client speaks 1.1)
 *                       or weft_file_region (weft/file_region.h): passed
 *                       on as it is, so a transport that can sends it with
 *                       sendfile(2)
 *   weft_http_end()     the end marker
 *
 * The codec keeps the rules a handler should not have to: responses to
 * pipelined requests leave in request order (the handler writes them in
 * that order; the codec remembers each request's method and version), no
 * body for HEAD, 1xx, 204 and 304, "Connection: close" and the close after
 * the response when the request or the response asks for it, HTTP/1.0
 * keep-alive, "100 Continue" for "Expect: 100-continue", a Date header
 * formatted once per second per loop thread, and a bound on requests
 * waiting for their response (max_pipelined: reading pauses past it).
 * weft speaks HTTP/1.1 only: a request asking to Upgrade (h2c, websocket)
 * is answered in HTTP/1.1 and the connection goes on; CONNECT is answered
 * and the connection then closes (nothing is tunnelled).
 *
 * Hostile input gets the status code RFC 9110/9112 names, with
 * "Connection: close", and the channel closes once it is sent (the reason
 * is logged at WEFT_LOG_INFO): a request line longer than max_head_bytes
 * 414, a head longer than that or more than max_headers fields 431, a
 * declared or chunked body above max_body 413, a head not complete within
 * header_timeout_ms of the first read that left it incomplete (or of the
 * connection's start) 408 (slowloris), a body that sends nothing for
 * body_timeout_ms 408 (see the option), an HTTP version
 * other than 1.0 and 1.1 505, and 400 for everything that can smuggle a
 * request: Content-Length together with Transfer-Encoding, a duplicate or
 * malformed Content-Length, a Transfer-Encoding whose last coding is not
 * chunked, obs-fold (a header line that continues the previous one), a
 * bare LF, a missing or repeated Host in HTTP/1.1, and any other parse
 * error. Flow control, output limits and idle timeouts are the channel's
 * (channel.h), as for every weft server.
 *
 * Ownership: every message is passed with one reference, as msg.h says.
 * A weft_http_request owns a reference to `data`, the bytes its slices
 * point into; weft_msg_release() frees both (keep a slice with
 * weft_http_slice_buf(), or copy). A body chunk is a weft_buf slice of the
 * received memory; release it when done, or pass it on. Heads and chunks
 * may pin a transport's receive slots (io_uring provided buffers, verbs
 * SRQ buffers) while held: a handler that keeps them long copies them. The
 * end marker is a static object whose release does nothing. Outbound, the
 * codec takes the response (and its body) and every chunk written to it;
 * a write the codec refuses (a response with no request waiting for it,
 * a chunk outside a response, a body longer than its Content-Length)
 * completes its promise with WEFT_EINVAL and is logged.
 *
 * Build: present when weft was configured with WEFT_WITH_HTTP (on where
 * Debian's node-llhttp sources are installed); weft.h includes this header
 * either way.
 *
 * Threads: a codec lives on its channel's loop; every function here runs
 * on that loop's thread, except the response builders, which touch no
 * channel until the response is written.
 */
#ifndef WEFT_HTTP_H
#define WEFT_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** `len` bytes at `ptr`: not NUL-terminated. */
typedef struct weft_http_str {
  const char *ptr; /* the first byte (inside a received buffer) */
  size_t len;      /* bytes */
} weft_http_str;

/** One header field as received: name (case as sent) and value (without
 *  the whitespace around it). */
typedef struct weft_http_header {
  weft_http_str name;  /* the field name, case as sent */
  weft_http_str value; /* the value, without surrounding whitespace */
} weft_http_header;

/** The methods the codec treats specially, and the rest. */
typedef enum weft_http_method {
  WEFT_HTTP_OTHER = 0, /* a registered method without special rules: see
                          method_name */
  WEFT_HTTP_GET,
  WEFT_HTTP_HEAD, /* the response has no body (RFC 9110 9.3.2) */
  WEFT_HTTP_POST,
  WEFT_HTTP_PUT,
  WEFT_HTTP_DELETE,
  WEFT_HTTP_OPTIONS,
  WEFT_HTTP_CONNECT /* the connection closes after the response: weft does
                       not tunnel */
} weft_http_method;

/** A decoded request head. Fields are read-only. */
typedef struct weft_http_request {
  weft_msg msg;              /* type weft_http_request_type */
  weft_http_method method;   /* WEFT_HTTP_OTHER for the rest: method_name */
  weft_http_str method_name; /* "GET", "PROPFIND", ... */
  weft_http_str target;      /* the request-target as sent: "/a?b=c" */
  uint8_t version_major;     /* 1 */
  uint8_t version_minor;     /* 0 or 1 */
  bool keep_alive;           /* the connection may carry another request after
                                this one's response (RFC 9112 9.3) */
  bool expect_continue;      /* "Expect: 100-continue": the codec sends
                                "100 Continue" before the body is read */
  bool chunked;              /* the body comes with chunked framing */
  int64_t content_length;    /* body bytes; -1 when chunked */
  size_t nheaders;           /* entries of `headers` */
  weft_http_header *headers; /* nheaders fields, in the order sent */
  weft_buf *data; /* owned reference: the bytes the slices point into */
} weft_http_request;

/** The message type of every weft_http_request. */
extern const weft_msg_type weft_http_request_type;

/** The message type of the end marker (inbound and outbound). */
extern const weft_msg_type weft_http_end_type;

/** The end marker: a static message; releasing it does nothing. */
void *weft_http_end(void);

/**
 * The value of the first header named `name` (ASCII case ignored), or a
 * weft_http_str with ptr NULL when there is none.
 */
weft_http_str weft_http_request_header(const weft_http_request *req,
                                       const char *name);

/** True when `s` equals the C string `c` ignoring ASCII case. */
bool weft_http_str_equals(weft_http_str s, const char *c);

/**
 * A new buffer viewing `s`, which must point into `req->data` (zero-copy;
 * it holds the memory past the request). NULL on ENOMEM or when `s` lies
 * outside. Loop thread (the pool's owner).
 */
weft_buf *weft_http_slice_buf(const weft_http_request *req, weft_http_str s);

/** Header lines being built: private to the codec (fill them with the
 *  add_header functions). */
typedef struct weft_http_fields {
  char *buf;            /* inline_buf or the heap */
  size_t len, cap;      /* bytes used, bytes of room */
  char inline_buf[256]; /* most heads fit here: no allocation */
} weft_http_fields;

/**
 * A response head (and, with `body`, the whole response), built by the
 * handler and written down the pipeline. Fields marked public may be set
 * directly; add headers with weft_http_response_add_header().
 */
typedef struct weft_http_response {
  weft_msg msg;            /* type weft_http_response_type */
  int status;              /* public: 100..599 */
  int64_t content_length;  /* public: body bytes that follow, or -1
                              (default) for chunked framing (a 1.0 client:
                              the body ends at the close). Ignored when
                              `body` is set */
  bool close;              /* public: close the connection after it */
  weft_buf *body;          /* public: the whole body, owned by the response
                              (released by the codec); NULL = chunks and an
                              end marker follow */
  weft_http_fields fields; /* private: "Name: value\r\n" lines */
} weft_http_response;

/** The message type of every weft_http_response. */
extern const weft_msg_type weft_http_response_type;

/** A new response with `status`, content_length -1, no headers, or NULL
 *  on ENOMEM. Release it with weft_msg_release() if not written. */
weft_http_response *weft_http_response_new(int status);

/**
 * Appends "name: value" (copied). Returns 0, WEFT_EINVAL when either holds
 * CR, LF or NUL or the name is empty (response splitting), WEFT_ENOMEM.
 * The codec writes Date, Server, Content-Length, Transfer-Encoding and
 * Connection itself: do not add them.
 */
int weft_http_response_add_header(weft_http_response *r, const char *name,
                                  const char *value);

/** The reason phrase of a status code ("Not Found"), "" if unknown. */
const char *weft_http_reason(int status);

/**
 * Writes a whole response (status, "Content-Type: content_type" unless
 * NULL, a copy of `len` body bytes) to `ctx`'s next handler, without
 * flushing. The quick path for small replies such as /plaintext. Returns
 * 0, WEFT_ENOMEM or WEFT_EINVAL (content_type holds CR or LF).
 */
int weft_http_respond(weft_ctx *ctx, int status, const char *content_type,
                      const void *body, size_t len);

/** Options of the server codec. */
typedef struct weft_http_server_options {
  size_t max_head_bytes;      /* request line plus header fields, bytes; default
                                 16 KiB (Node.js' maxHeaderSize). A longer request
                                 line gets 414, a longer head 431 */
  size_t max_headers;         /* header fields per request; default 100 (431) */
  uint64_t max_body;          /* body bytes per request; default 1 MiB; a larger
                                 Content-Length or chunked total gets 413 */
  uint32_t header_timeout_ms; /* from a request's first byte to the end of
                                 its head; default 10000; 0 = none (408) */
  uint32_t body_timeout_ms;   /* between two reads of a request's body
                                 (nginx's client_body_timeout, whose default
                                 it takes): default 60000; 0 = none. See
                                 below */
  size_t max_pipelined;       /* requests decoded and not answered; default 64;
                                 reading pauses past it */
  const char *server;         /* the Server header's value; default "weft";
                                 NULL = none. Borrowed: must outlive the codec */
} weft_http_server_options;

/*
 * body_timeout_ms, as nginx's client_body_timeout: the time allowed
 * between two successive reads of a request's body, not for the whole
 * body. It starts when a head whose body is expected (Content-Length > 0
 * or chunked) is complete, or, for "Expect: 100-continue" held behind
 * earlier responses, when its 100 Continue is sent; each read that
 * brings body bytes restarts it; the body's end stops it. When it fires
 * the reason is logged at WEFT_LOG_INFO, the request gets 408 with
 * "Connection: close" (or, when its response has begun or earlier
 * requests still wait for theirs, which a 408 cannot overtake, the
 * connection just closes) and the channel closes.
 * It does not fire while the server itself is not reading (flow control,
 * auto-read off, a yield): the client cannot send into a paused read.
 * A deadline that passes then moves one period on, and once more after
 * reading resumes, so the client gets at least a whole period of the
 * server reading after a pause the codec saw; what the client sent during
 * a pause is read at the resume and restarts the timeout.
 * header_timeout_ms has no such rule: the codec's own pause (past
 * max_pipelined) comes between requests, before that timer starts, but
 * a flow-control pause during a head already begun counts against it.
 */

/** Fills `o` with the defaults documented on each field. */
void weft_http_server_options_init(weft_http_server_options *o);

/**
 * Adds the server codec at the tail end of `p` under `name`: bytes in,
 * requests out; responses in, bytes out (see the file comment). Put the
 * application's handler after it (and TLS, if any, before it). Returns 0,
 * WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_http_server_codec_add_last(weft_pipeline *p, const char *name,
                                    const weft_http_server_options *opts);

/* ---- the client side ---- */

/**
 * A request the client writes: the request line and headers are built
 * here (copied); the body is `body`, or chunks and an end marker written
 * after it. Fields marked public may be set directly.
 */
typedef struct weft_http_client_request {
  weft_msg msg;            /* type weft_http_client_request_type */
  int64_t content_length;  /* public: body bytes that follow; 0 (default) =
                              no body; -1 = chunked. Ignored when `body` is
                              set */
  weft_buf *body;          /* public: the whole body, owned (released by the
                              codec); NULL = none, or chunks follow */
  bool head;               /* read-only: the method is HEAD */
  weft_http_fields fields; /* private: request line and header lines */
} weft_http_client_request;

/** The message type of every weft_http_client_request. */
extern const weft_msg_type weft_http_client_request_type;

/**
 * A new request "METHOD target HTTP/1.1" with a Host header when `host`
 * is not NULL (HTTP/1.1 requires one: RFC 9112 3.2). NULL when `method` is
 * not a token, `target` is empty or holds a space or a control byte
 * (request splitting), or on ENOMEM. Release it with weft_msg_release()
 * if not written.
 */
weft_http_client_request *weft_http_client_request_new(const char *method,
                                                       const char *target,
                                                       const char *host);

/** As weft_http_response_add_header(); the codec writes Content-Length
 *  and Transfer-Encoding itself. */
int weft_http_client_request_add_header(weft_http_client_request *q,
                                        const char *name, const char *value);

/** A decoded response head (client side). Fields are read-only. */
typedef struct weft_http_response_head {
  weft_msg msg;          /* type weft_http_response_head_type */
  int status;            /* 200..599 (interim 1xx responses are dropped) */
  weft_http_str reason;  /* the reason phrase as sent */
  uint8_t version_major; /* 1 */
  uint8_t version_minor; /* 0 or 1 */
  bool keep_alive;       /* the server keeps the connection after this response;
                            when false, the codec reads nothing more: close it */
  bool chunked;          /* the body comes with chunked framing */
  int64_t content_length;    /* -1: chunked, or read until the close */
  size_t nheaders;           /* entries of `headers` */
  weft_http_header *headers; /* nheaders fields, in the order sent */
  weft_buf *data; /* owned reference: the bytes the slices point into */
} weft_http_response_head;

/** The message type of every weft_http_response_head. */
extern const weft_msg_type weft_http_response_head_type;

/** The value of the first header named `name` (ASCII case ignored), or a
 *  weft_http_str with ptr NULL. */
weft_http_str weft_http_response_head_header(const weft_http_response_head *r,
                                             const char *name);

/** Options of the client codec. */
typedef struct weft_http_client_options {
  size_t max_head_bytes; /* status line plus headers; default 16 KiB */
  size_t max_headers;    /* default 100 */
  uint64_t max_body;     /* response body bytes; default 64 MiB */
  size_t max_pipelined;  /* requests written and not answered; default 64;
                            a write past it fails with WEFT_ENOBUFS */
} weft_http_client_options;

/** Fills `o` with the defaults documented on each field. */
void weft_http_client_options_init(weft_http_client_options *o);

/**
 * Adds the client codec at the tail end of `p`: requests (a
 * weft_http_client_request, then chunks and weft_http_end() when it has
 * neither `body` nor content_length 0) in, bytes out; bytes in, per
 * response a weft_http_response_head, body chunks (weft_buf slices) and
 * the end marker out, in the order of the requests (pipelining is
 * allowed). A response to HEAD has no body; one without framing ends at
 * the close (its end marker comes before channel_inactive). A malformed
 * response, one above a limit, or one without a request waiting for it is
 * reported with exception_caught (WEFT_EBADFRAME, WEFT_ETOOLONG,
 * WEFT_EPROTO) and the rest of the input is dropped. Returns 0,
 * WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_http_client_codec_add_last(weft_pipeline *p, const char *name,
                                    const weft_http_client_options *opts);

/* ---- aggregation ---- */

/**
 * A whole message: its head (a weft_http_request on a server, a
 * weft_http_response_head on a client; one reference, released with this
 * message) and its body in one buffer (NULL when empty). Read-only.
 */
typedef struct weft_http_full {
  weft_msg msg;   /* type weft_http_full_type */
  void *head;     /* the request or response head (one reference) */
  weft_buf *body; /* the whole body, or NULL when empty */
} weft_http_full;

/** The message type of every weft_http_full. */
extern const weft_msg_type weft_http_full_type;

/**
 * Adds an aggregator after the codec (at the tail end of `p`): it turns a
 * head, its chunks and the end marker into one weft_http_full (Netty's
 * HttpObjectAggregator). A body of one chunk is passed on without a copy;
 * more are copied into one buffer. Above `max_content` bytes a request
 * gets 413 and the connection closes after it; a response is reported
 * with exception_caught (WEFT_ETOOLONG). Returns 0, WEFT_EEXIST or
 * WEFT_ENOMEM. Loop thread.
 */
int weft_http_aggregator_add_last(weft_pipeline *p, const char *name,
                                  size_t max_content);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_HTTP_H */
