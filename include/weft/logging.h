/* SPDX-License-Identifier: Apache-2.0 */
/* weft/logging.h: the logging handler (Netty's LoggingHandler).
 *
 * Logs every event and operation that passes it, with the channel id:
 * "channel 7 [log]: READ 42 bytes", "WRITE", "FLUSH", "CLOSE", "ACTIVE",
 * "INACTIVE", "EXCEPTION ETOOLONG: reason", "USER_EVENT", ... through
 * weft_log() at the configured level, and forwards everything unchanged.
 * With hex_dump on, weft_buf contents are logged too, 16 bytes a line with
 * offsets and ASCII, up to max_dump_bytes. Hex dumps are off by default:
 * they are costly and may show secrets. Loop thread.
 */
#ifndef WEFT_LOGGING_H
#define WEFT_LOGGING_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/log.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Options. Initialise with weft_logging_options_init(). */
typedef struct weft_logging_options {
  weft_log_level level;  /* default WEFT_LOG_DEBUG */
  bool hex_dump;         /* default false */
  size_t max_dump_bytes; /* per message; default 256 */
} weft_logging_options;

/** Fills `o` with the defaults documented on each field. */
void weft_logging_options_init(weft_logging_options *o);

/**
 * Adds the logging handler at the tail end of `p`. `opts` may be NULL.
 * Returns 0, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_logging_add_last(weft_pipeline *p, const char *name,
                          const weft_logging_options *opts);

/**
 * Formats a hex dump of `len` bytes at `data` into `out` (`cap` bytes,
 * always NUL-terminated): lines of "%08zx  hex...  |ascii|". Returns the
 * length written (without the NUL). Any thread.
 */
size_t weft_hex_dump(char *out, size_t cap, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_LOGGING_H */
