/* SPDX-License-Identifier: Apache-2.0 */
/* The diagnostic log: a level, a replaceable handler, stderr by default. */
#include <weft/log.h>

#include <weft/clock.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The handler and its argument change together, from any thread (tests
 * capture the log while loops run): a mutex keeps the pair whole. Logging
 * is off the data path, so its cost does not matter. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_log_cb log_cb;
static void *log_arg;
/* -1 until the first call reads WEFT_LOG_LEVEL. */
static _Atomic int log_level = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* WEFT_LOG_LEVEL, or warn; a value that is no level is said once, on
 * stderr (the log is not ready yet), rather than taken silently. */
static int level_from_env(void) {
  const char *s = getenv("WEFT_LOG_LEVEL");
  if (s == NULL)
    return WEFT_LOG_WARN;
  for (int i = 0; i <= WEFT_LOG_DEBUG; i++)
    if (strcmp(s, level_names[i]) == 0)
      return i;
  fprintf(stderr,
          "weft: WEFT_LOG_LEVEL=\"%s\" is not a level (error, warn, info, "
          "debug); logging at warn\n",
          s);
  return WEFT_LOG_WARN;
}

void weft_log_set_handler(weft_log_cb cb, void *arg) {
  pthread_mutex_lock(&log_lock);
  log_cb = cb;
  log_arg = arg;
  pthread_mutex_unlock(&log_lock);
}

void weft_log_set_level(weft_log_level level) {
  atomic_store(&log_level, (int)level);
}

weft_log_level weft_log_get_level(void) {
  int level = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (level < 0) {
    /* Racing first calls all compute the same value. */
    level = level_from_env();
    int expected = -1;
    atomic_compare_exchange_strong(&log_level, &expected, level);
    level = atomic_load(&log_level);
  }
  return (weft_log_level)level;
}

void weft_log(weft_log_level level, const char *fmt, ...) {
  if ((int)level > (int)weft_log_get_level())
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  weft_log_cb cb = log_cb;
  void *arg = log_arg;
  pthread_mutex_unlock(&log_lock);
  if (cb != NULL) {
    cb(level, msg, arg);
    return;
  }
  /* As Redis' log: "pid date time.ms level: message". One fprintf per
   * message: stdio locks the stream, so lines from several threads do not
   * interleave. */
  struct timespec ts;
  struct tm tm;
  char when[40];
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  strftime(when, sizeof when, "%d %b %Y %H:%M:%S", &tm);
  fprintf(stderr, "%d %s.%03ld weft: %s: %s\n", (int)getpid(), when,
          ts.tv_nsec / 1000000, level_names[level], msg);
}

bool weft_log_limited(weft_log_limit *lim, weft_log_level level,
                      const char *fmt, ...) {
  if ((int)level > (int)weft_log_get_level())
    return false;
  uint64_t now = weft_now_ns(), last = atomic_load(&lim->last_ns);
  uint64_t held = atomic_fetch_add(&lim->suppressed, 1) + 1;
  if (last != 0 && now - last < lim->interval_ns)
    return false;
  /* One thread wins the interval; the others' lines stay counted. */
  if (!atomic_compare_exchange_strong(&lim->last_ns, &last, now))
    return false;
  atomic_fetch_sub(&lim->suppressed, held);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (held > 1 && n >= 0 && (size_t)n < sizeof msg)
    snprintf(msg + n, sizeof msg - (size_t)n,
             " (and %" PRIu64 " more since the last such line)", held - 1);
  weft_log(level, "%s", msg);
  return true;
}
