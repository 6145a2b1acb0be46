/* Shared test harness: every test program defines weft_test_suite() and links
 * harness.c, whose main() runs the suite with Check and exits non-zero on any
 * failure. Helpers here capture weft's log so tests can assert on it. */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <weft/bootstrap.h>

/** Each test program returns its suite here. */
Suite *weft_test_suite(void);

/** Starts capturing weft_log messages (all levels) into memory. */
void th_log_capture_start(void);
/** Stops capturing; messages already captured stay readable. */
void th_log_capture_stop(void);
/** Number of captured messages containing `needle`. Thread-safe. */
int th_log_count(const char *needle);
/** All captured messages, one per line (valid until the next capture). */
const char *th_log_text(void);

/* ---- time ---- */

/** CLOCK_MONOTONIC in milliseconds. */
uint64_t th_now_ms(void);
/** Sleeps `ms` milliseconds. */
void th_sleep_ms(unsigned ms);

/* Polls `cond` every millisecond for up to `ms`; true if it became true. */
#define WAIT_UNTIL(cond, ms)                                                   \
  ({                                                                           \
    uint64_t deadline_ = th_now_ms() + (ms);                                   \
    bool ok_;                                                                  \
    while (!(ok_ = (cond)) && th_now_ms() < deadline_)                         \
      th_sleep_ms(1);                                                          \
    ok_;                                                                       \
  })

/* Asserts that `cond` becomes true within 10 s (generous: the machine is
 * shared), polling every 200 us, for the loop-level tests. */
#define WAIT_FOR(cond)                                                         \
  do {                                                                         \
    uint64_t wf_end_ = th_now_ms() + 10000;                                    \
    while (!(cond) && th_now_ms() < wf_end_)                                   \
      usleep(200);                                                             \
    ck_assert_msg((cond), "timed out waiting for " #cond);                     \
  } while (0)

#define ASSERT_EVENTUALLY(cond, ms)                                            \
  ck_assert_msg(WAIT_UNTIL(cond, ms), "timed out after %d ms waiting for %s",  \
                (int)(ms), #cond)

/* ---- the environment of the per-transport suites ---- */

/** WEFT_TEST_TRANSPORT, default "tcp". */
const char *th_transport_name(void);
/** The address servers listen on: WEFT_TEST_HOST, default 127.0.0.1 (RoCE
 *  has no loopback: the verbs VM sets the address rxe0 sits on). */
const char *th_test_host(void);
/** WEFT_TEST_SCALE, a multiplier for the work of long tests (< 1 under
 *  emulation or sanitizers), default 1. */
double th_test_scale(void);
/**
 * Loops in a suite's group: 2, or 1 for UCX. UCX before 1.18 can abort when
 * one process opens and closes connections on several workers at once
 * (docs/transports/ucx.md: in-process clients and servers share fd numbers
 * across workers); test_ucx and test_ucx_scale cover a multi-loop UCX server
 * with clients in another process.
 */
int th_suite_loops(void);

/**
 * Binds a server on `group` listening on `listen` (a URI; port 0 picks a
 * free one) with default child options and `init(ch, arg)` for every
 * accepted channel, and writes its bound address ("scheme://host:port") to
 * `uri` (`len` bytes). Fails the test if either step fails. Test thread;
 * the caller closes the server with weft_server_close.
 */
weft_server *th_server_bind(weft_loop_group *group, const char *listen,
                            weft_channel_init_cb init, void *arg, char *uri,
                            size_t len);

/** Writes all `n` bytes to the blocking socket or file `fd`; asserts. */
void th_write_all(int fd, const void *p, size_t n);

/* ---- skips ----
 * A check that cannot run here (a missing device, kernel feature or
 * capability of the transport) says so and returns: it is counted and
 * reported as skipped, never as passed. After the run the program prints
 * "SKIPPED <program> <check>: <reason>" per skip (and appends the same
 * lines to $WEFT_TEST_SKIP_LOG, for scripts/test.sh's summary); when every
 * check was skipped it exits with TH_SKIP_EXIT, which CTest reports as
 * "Skipped" (SKIP_RETURN_CODE). */

/** The exit status of a program that skipped everything (CTest's code). */
#define TH_SKIP_EXIT 77

/** Records a skip of the running check `check` (printf-style reason). */
void th_skip(const char *check, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Skips the running check unless `cond`, naming the condition. */
#define TH_SKIP_UNLESS(cond)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      th_skip(__func__, "needs %s (transport %s)", #cond,                      \
              th_transport_name());                                            \
      return;                                                                  \
    }                                                                          \
  } while (0)

/**
 * Skips the whole program before its suite runs (no such transport or
 * device here): prints the reason, reports it as above, and exits with
 * TH_SKIP_EXIT.
 */
_Noreturn void th_skip_program(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/**
 * For a suite over WEFT_TEST_TRANSPORT: skips the program when that
 * transport cannot run here (its probe's reason). Returns otherwise.
 */
void th_require_transport(void);

/**
 * A suite of one test case: the suite `name`, its case `tcase` with a
 * timeout of `timeout` seconds (0 = Check's default), and the tests that
 * follow (START_TEST names), up to a NULL.
 */
Suite *th_suite(const char *name, const char *tcase, int timeout, ...);

/** Adds the tests that follow (START_TEST names), up to a NULL, to `tc`. */
void th_add_tests(TCase *tc, ...);

#endif
