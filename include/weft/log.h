/* SPDX-License-Identifier: Apache-2.0 */
/* weft/log.h: the library's diagnostic log.
 *
 * weft logs rare events only (a channel closed for a malformed frame, a leak at
 * shutdown, a transport that cannot start); nothing on the data path logs at
 * the default level. By default messages at WARN and above go to stderr.
 */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

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
 * Replaces the log handler; NULL restores the default: one line on stderr
 * per message, as Redis' log writes them, "<pid> <date> <time.ms> weft:
 * <level>: <message>" ("4242 27 Nov 2026 17:23:18.123 weft: warn: channel
 * 7 (peer 127.0.0.1:53312): ..."), in local time. Any thread, any time: a
 * message logged at that moment goes to the old handler or the new one, and the
 * old handler may still be running one when this returns (keep its `arg` valid
 * a while, or set handlers while no loop runs).
 */
void weft_log_set_handler(weft_log_cb cb, void *arg);

/**
 * Sets the most verbose level that is delivered (default WEFT_LOG_WARN, or
 * the WEFT_LOG_LEVEL environment variable: error, warn, info, debug, read at
 * the first log call; another value is reported on stderr and warn is
 * used). Any thread.
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

/**
 * A rate limit for one kind of log line that a peer can cause at will (a
 * failed handshake, a refused connection), so a flood of them writes a
 * line per interval, not a line each. Zero-initialise, then set
 * `interval_ns`, or use WEFT_LOG_LIMIT_INIT; share one between threads
 * freely (the counters are atomic).
 */
typedef struct weft_log_limit {
  uint64_t interval_ns;        /* public: at most one line per this */
  _Atomic uint64_t last_ns;    /* private: when the last line went out */
  _Atomic uint64_t suppressed; /* private: lines held back since */
} weft_log_limit;

/** A weft_log_limit of one line per `ns` nanoseconds. */
#define WEFT_LOG_LIMIT_INIT(ns)                                                \
  { .interval_ns = (ns) }

/**
 * Logs as weft_log does, unless a line went out through `lim` less than
 * its interval ago: then the line is only counted. A line that goes out
 * after some were held back ends with " (and N more since the last such
 * line)". Returns true when it logged. Any thread.
 */
bool weft_log_limited(weft_log_limit *lim, weft_log_level level,
                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif /* WEFT_LOG_H */
