/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the HTTP/1.1 codec files (codec/http_*.c). */
#ifndef WEFT_CODEC_HTTP_INTERNAL_H
#define WEFT_CODEC_HTTP_INTERNAL_H

#include <time.h>

#include <weft/http.h>

/* The IMF-fixdate of now, "Sun, 06 Nov 1994 08:49:37 GMT" (29 bytes),
 * refreshed at most once per second per thread. Valid until the thread's
 * next call. */
const char *weft__http_date(void);

/* Header lines (weft_http_fields): init, free, append raw bytes, and add
 * "name: value\r\n" (WEFT_EINVAL for CR, LF or ':' where they would
 * split the head; WEFT_ENOMEM). */
void weft__http_fields_init(weft_http_fields *f);
void weft__http_fields_free(weft_http_fields *f);
int weft__http_fields_append(weft_http_fields *f, const char *s, size_t n);
int weft__http_fields_add(weft_http_fields *f, const char *name,
                          const char *value);

/* Writes `chunk`, a weft_buf or a weft_file_region of `n` bytes (not 0:
 * an empty chunk ends the body; its reference is taken) as one chunk of a
 * chunked body (RFC 9112 7.1): the size line in hex, the bytes, CRLF. `pr`
 * completes with the last of the three. */
void weft__http_write_chunk(weft_ctx *ctx, void *chunk, uint64_t n,
                            weft_promise pr);

/* The request-target / method checks of weft_http_client_request_new. */
bool weft__http_is_token(const char *s);

#endif /* WEFT_CODEC_HTTP_INTERNAL_H */
