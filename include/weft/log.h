/* SPDX-License-Identifier: Apache-2.0 */
/* weft/log.h: the library's diagnostic log.
 *
 * weft logs rare events only (a channel closed for a malformed frame, a leak at
 * shutdown, a transport that cannot start); nothing on the data path logs at
 * the default level. By default messages at WARN and above go to stderr.
 */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/** Severity of a log message; a lower value is more severe. */
typedef enum weft_log_level {
  WEFT_LOG_ERROR = 0,
  WEFT_LOG_WARN = 1,
  WEFT_LOG_INFO = 2,
  WEFT_LOG_DEBUG = 3
} weft_log_level;

/**
 * Receives one formatted log message (no trailing newline). `msg` is valid
 * only during the call. Called on the thread that logged, possibly several
 * threads at once: the handler must be thread-safe.
 */
typedef void (*weft_log_cb)(weft_log_level level, const char *msg, void *arg);

/**
 * Replaces the log handler; NULL restores the default (stderr, prefixed with
 * "weft: <level>:"). Any thread, any time: a message logged at that moment
 * goes to the old handler or the new one, and the old handler may still
 * be running one when this returns (keep its `arg` valid a while, or set
 * handlers while no loop runs).
 */
void weft_log_set_handler(weft_log_cb cb, void *arg);

/**
 * Sets the most verbose level that is delivered (default WEFT_LOG_WARN, or
 * the WEFT_LOG_LEVEL environment variable: error, warn, info, debug, read at
 * the first log call). Any thread.
 */
void weft_log_set_level(weft_log_level level);

/** The current level (see weft_log_set_level). Any thread. */
weft_log_level weft_log_get_level(void);

/**
 * Formats and delivers a message at `level` if that level is enabled.
 * Messages longer than 1023 bytes are truncated. Any thread.
 */
void weft_log(weft_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif /* WEFT_LOG_H */
