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

#endif /* WEFT_CODEC_HTTP_INTERNAL_H */
