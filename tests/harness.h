/* SPDX-License-Identifier: Apache-2.0 */
/* Shared test harness: every test program defines weft_test_suite() and links
 * harness.c, whose main() runs the suite with Check and exits non-zero on any
 * failure. Helpers here capture weft's log so tests can assert on it, bind
 * servers, read what /proc says of a process and record skips. */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H

#include <check.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

/** Each test program returns its suite here. */
Suite *weft_test_suite(void);

/** Starts capturing weft_log messages (all levels) into memory. */
void th_log_capture_start(void);
/** Stops capturing; messages already captured stay readable. */
void th_log_capture_stop(void);
/** Number of captured messages containing `needle`. Thread-safe. */
int th_log_count(const char *needle);
/** All captured messages, one per line, each after its level's name and
 * ": " ("warn: channel 1: ...") (valid until the next capture). */
const char *th_log_text(void);

/* ---- time ---- */

/** CLOCK_MONOTONIC in milliseconds. */
uint64_t th_now_ms(void);
/** Sleeps `ms` milliseconds. */
void th_sleep_ms(unsigned ms);

/** A copy of `loop`'s selector counters (weft_loop_stats_get). Any thread. */
weft_loop_stats th_loop_stats(weft_loop *loop);

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
 * A started loop group of `loops` loops (0: weft's default count) whose
 * threads are named after `name` (NULL: weft's default), not pinned.
 * Fails the test on error; the caller stops, joins and frees it.
 */
weft_loop_group *th_group_start(const char *name, int loops);

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

/**
 * A blocking TCP socket bound to 127.0.0.1 on an ephemeral port, not
 * listening: a connect to it is refused until the caller listens on it.
 * Writes the port to `*port`. Fails the test on error; the caller closes
 * the socket.
 */
int th_bind_loopback(uint16_t *port);

/** A blocking TCP connection to 127.0.0.1:`port`. Fails the test on error;
 * the caller closes the socket. */
int th_connect_loopback(int port);

/* ---- what /proc says ----
 * Readers of a process's memory and CPU time for the scale tests, which
 * measure a server from outside (in a child process). Each returns -1
 * when the file cannot be read or lacks the value; none asserts (a
 * server child may call them too). Any thread. */

/**
 * The number after `key` (e.g. "VmRSS:", "VmallocUsed:", the colon
 * included) at the start of a line of the /proc file `path`, as the file
 * gives it (KiB in status and meminfo); the last such line's if several.
 */
long th_proc_kib(const char *path, const char *key);

/** th_proc_kib of /proc/<pid>/status: `key` ("VmRSS:") of process `pid`,
 *  in KiB. */
long th_status_kib(pid_t pid, const char *key);

/** The resident memory of process `pid` in bytes (VmRSS). */
long th_rss_bytes(pid_t pid);

/**
 * In a child about to exec a server whose RSS a test measures: ASan's
 * quarantine set to 0 (appended to ASAN_OPTIONS), so freed blocks go back
 * to the allocator at once and RSS measures weft, not the quarantine
 * (256 MiB by default). ASan keeps every other check; builds without ASan
 * ignore the variable.
 */
void th_asan_frees_at_once(void);

/** Sends SIGTERM to child `pid` and waits: fails the check unless it
 *  exited with status 0. `name` is the program, for the message. */
void th_stop_child(pid_t pid, const char *name);

/** th_proc_kib of /proc/meminfo: `key` ("Slab:") of the whole host, in
 *  KiB. */
long th_meminfo_kib(const char *key);

/** User plus system CPU time of process `pid`, all threads, in clock
 *  ticks (sysconf(_SC_CLK_TCK) per second; /proc/<pid>/stat fields 14 and
 *  15, so a 10 ms grain where the tick is 100 Hz). */
long long th_cpu_ticks(pid_t pid);

/** Nanoseconds all threads of process `pid` have run: the sum of the first
 *  field of each /proc/<pid>/task/<tid>/schedstat (exact, where
 *  th_cpu_ticks has the tick's grain). Threads that exited are not
 *  counted. */
long long th_run_ns(pid_t pid);

/** Sleeps `ms` milliseconds and returns the CPU process `pid` used
 *  meanwhile (th_cpu_ticks), in percent of one core. Fails the check if
 *  /proc cannot be read. Test thread. */
double th_idle_cpu(pid_t pid, unsigned ms);

/* ---- echo servers ---- */

/** A channel_read that writes the message back and flushes it (ownership
 *  of `msg` passes to the write). */
void th_echo_read(weft_ctx *ctx, void *msg);

/** An exception_caught for a server in a child process: prints
 *  "server: <error name>: <reason>" to stderr and closes the channel. */
void th_echo_exception(weft_ctx *ctx, int err, const char *reason);

/** A channel initializer: an "echo" handler of th_echo_read and
 *  th_echo_exception. `arg` unused. */
void th_echo_init(weft_channel *ch, void *arg);

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

/**
 * Adds `handler` last to the pipeline of `ch` as `name`, with `state` as
 * its state (weft_ctx_state); fails the test if it cannot. For channel
 * initializers.
 */
void th_add_last(weft_channel *ch, const char *name,
                 const weft_handler *handler, void *state);

/**
 * A bootstrap's on_connect that stores the connect's outcome (0 or a
 * negative WEFT_E* code) in the atomic_int its connect_arg points to.
 */
void th_store_connect_status(weft_channel *ch, int status, void *arg);

/**
 * A bootstrap to connect to `uri` from `loop` (NULL: the next loop of
 * `group`), `init(ch, arg)` setting the channel up, with weft's default
 * channel options and no on_connect: the caller sets what it needs, then
 * calls weft_bootstrap_connect.
 */
weft_bootstrap th_bootstrap(weft_loop_group *group, weft_loop *loop,
                            const char *uri, weft_channel_init_cb init,
                            void *arg);

/**
 * Starts a connect to `uri` from `loop` (NULL: the next loop of `group`)
 * with default channel options: `init(ch, arg)` sets the channel up and
 * the outcome goes to `*status` (th_store_connect_status). Fails the test
 * if the connect cannot start.
 */
void th_connect(weft_loop_group *group, weft_loop *loop, const char *uri,
                weft_channel_init_cb init, void *arg, atomic_int *status);

/**
 * Adds to the suite `s` the test case `name` with a timeout of `timeout`
 * seconds (0 = Check's default) and the tests that follow (START_TEST
 * names), up to a NULL; returns the case (for a fixture or loop tests).
 */
TCase *th_add_case(Suite *s, const char *name, int timeout, ...);

/**
 * A suite of one test case with a checked fixture: the suite `name`, its
 * case `tcase` (Check's default timeout), `setup` and `teardown` run in
 * each test's process around it (either may be NULL), and the tests that
 * follow (START_TEST names), up to a NULL.
 */
Suite *th_suite_fixture(const char *name, const char *tcase,
                        void (*setup)(void), void (*teardown)(void), ...);

/** Adds the tests that follow (START_TEST names), up to a NULL, to `tc`. */
void th_add_tests(TCase *tc, ...);

#endif
