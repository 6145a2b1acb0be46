/* SPDX-License-Identifier: Apache-2.0 */
/* Fixtures of the tests that open many connections (test_scale,
 * test_ucx_scale, test_verbs_scale) and of those that talk to a server
 * through plain kernel sockets (test_socket_hostile, test_uring, the
 * channel suite): a server in a child process, a fleet of weft clients that
 * echo, a batch echo handler, the fd limit and blocking loopback sockets.
 * harness_scale.c; every test program links it. */
#ifndef WEFT_TESTS_HARNESS_SCALE_H
#define WEFT_TESTS_HARNESS_SCALE_H

#include "harness.h"

#include <stdatomic.h>
#include <sys/resource.h>

/* 1 in a build with ASan or TSan, whose shadow memory and slower code
 * make the full counts of the scale tests slow and their RSS meaningless. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif

/* ---- loops, limits, sockets ---- */

/**
 * A started group of `n` loops named `name` (`pin`: pinned to cores), or
 * NULL if it could not start. No Check asserts: a server child calls it.
 */
weft_loop_group *th_loops_start(const char *name, int n, bool pin);

/**
 * Raises this process's soft RLIMIT_NOFILE to `want` if it is lower: 0,
 * or -1 if the hard limit (written to `*hard`) is below `want` or the
 * call fails. No Check asserts.
 */
int th_raise_fd_limit(rlim_t want, rlim_t *hard);

/** Sets this process's soft RLIMIT_NOFILE to `cur` (the hard limit
 *  stays): 0, or -1 if it cannot. No Check asserts. */
int th_set_fd_limit(rlim_t cur);

/** The port of a "scheme://host:port" URI; 0 if it has none. */
uint16_t th_uri_port(const char *uri);

/**
 * A blocking TCP connection to 127.0.0.1:`port` whose reads and writes
 * give up after `timeout_ms` (SO_RCVTIMEO, SO_SNDTIMEO): the socket, or
 * -errno of the socket or connect call. No Check asserts; the caller
 * closes it.
 */
int th_connect_timeout(uint16_t port, unsigned timeout_ms);

/** th_connect_timeout with 20 s timeouts, failing the check if the
 *  connect fails. Test thread. */
int th_raw_connect(uint16_t port);

/** A TCP socket listening on 127.0.0.1 and an ephemeral port (written to
 *  `*port`) with `backlog`. Fails the check on error. */
int th_listen_loopback(int backlog, uint16_t *port);

/** An exception_caught that closes the channel quietly (a broken
 *  connection of a server that expects some). */
void th_close_on_exception(weft_ctx *ctx, int err, const char *reason);

/**
 * A channel initializer for servers that echo in batches: every message
 * is written back, flushed once per channel_read_complete; an exception
 * closes the channel quietly. `arg` unused.
 */
void th_batch_echo_init(weft_channel *ch, void *arg);

/* ---- a server in a child process ----
 * The parent forks before it touches a transport (so each process has its
 * own UCX context or verbs device); the child binds, writes its address to
 * the parent and serves until the parent closes its end. Meanwhile the
 * parent may ask it for its counters (th_child_query); the child answers
 * from th_child_serve with a th_child_counters_cb.
 *
 * The query's wire format, over the two pipes of th_child: the parent
 * writes one byte ('q') to `to`; the child writes one line to `from`, its
 * counters in decimal separated by single spaces and ended by '\n'
 * ("12 0 3\n"), in one write(2) (under PIPE_BUF, so it arrives whole).
 * The parent owns `to` and `from`: th_child_finish closes both, a caller
 * that reaped the child with th_child_aborted_with closes them itself. The
 * child's ends close when it exits. */

/** The parent's view of a server child. */
typedef struct th_child {
  pid_t pid;
  int to;        /**< write end: the child stops at its EOF */
  int from;      /**< read end: the child's address, then its answers */
  char uri[300]; /**< the child's bound address */
} th_child;

/**
 * Forks a child that runs `serve(in, out)` (which exits; should it
 * return, the child exits 1) and
 * reads the address it writes to `out` into `c->uri`. Fails the check if
 * the fork fails or the child writes nothing. Test thread.
 */
void th_child_start(th_child *c, void (*serve)(int in, int out));

/** Closes the child's input (it stops) and waits: fails the check unless
 *  it exited with status 0. Test thread. */
void th_child_finish(th_child *c);

/**
 * In the child: sends its stdout and stderr to the file `path` (which the
 * parent made, e.g. with mkstemp), where a library's fatal message lands
 * for the parent to read. Exits 6 if it cannot. No Check asserts.
 */
void th_child_log_to(const char *path);

/** Copies the file `path` to stderr, each line marked "server: ". Test
 *  thread. */
void th_child_print_log(const char *path);

/** The message of UCX 1.13's async abort (`async.c:643 Assertion
 *  'handler->async == async'`): a socket's event queued for one worker
 *  while the fd number moved to another worker of the same process
 *  (docs/transports/ucx.md, "Many workers in one process"; fixed upstream
 *  in openucx/ucx#9942, after 1.17). */
#define TH_UCX_ASYNC_ABORT "handler->async == async"

/**
 * Whether the child ended by SIGABRT with `needle` in its log file `log`
 * (th_child_log_to): waits up to 10 s for it to end and reaps it, so the
 * caller must not th_child_finish it afterwards. False if it is still
 * running, ended otherwise, or logged no `needle`. Test thread.
 */
bool th_child_aborted_with(th_child *c, const char *log, const char *needle);

/**
 * In the child: binds a server on `g` listening on `listen` with default
 * child options, `init` for every channel and `backlog` (0: the
 * default). NULL if it fails. No Check asserts.
 */
weft_server *th_child_bind(weft_loop_group *g, const char *listen,
                           weft_channel_init_cb init, int backlog);

/**
 * In the child: an echo server (`init` for every channel, `backlog`) of
 * `n_loops` loops named `name` on `listen`, served as th_child_serve does
 * with no queries; exits 2 if the loops do not start, 3 if the bind fails.
 */
_Noreturn void th_child_echo_server(const char *name, int n_loops,
                                    const char *listen,
                                    weft_channel_init_cb init, int backlog,
                                    int in, int out);

/** Most counters one query answers. */
#define TH_CHILD_COUNTERS_MAX 8

/**
 * In the child: fills `v` (room for TH_CHILD_COUNTERS_MAX) with the
 * counters a query answers and returns how many (0 to
 * TH_CHILD_COUNTERS_MAX). Runs on the child's main thread (the one in
 * th_child_serve), not on a loop: what the loops count must be atomics,
 * and the values are a snapshot of each, not consistent with each other.
 * No Check asserts.
 */
typedef int (*th_child_counters_cb)(long long *v);

/**
 * In the child: writes the address of `srv` to `out`, then reads `in`
 * until EOF, answering each byte read with the line of `counters` (see
 * the wire format above; a read byte is ignored if `counters` is NULL),
 * then closes the server, stops `g` and exits 0 if its loops stopped with
 * no leak (else 5; 4 if the address or an answer could not be written or
 * `counters` returned a count out of range).
 */
_Noreturn void th_child_serve(weft_loop_group *g, weft_server *srv, int in,
                              int out, th_child_counters_cb counters);

/** How long th_child_query waits for the child's answer (ms): the child
 *  answers at once from its main thread, so this only bounds a child that
 *  hangs; generous for a loaded machine under sanitizers. */
#define TH_CHILD_QUERY_MS 60000

/**
 * In the parent: asks server child `c` for its `n` counters (1 to
 * TH_CHILD_COUNTERS_MAX) and reads them into `v`, as its
 * th_child_counters_cb filled them (the wire format above). The pipes
 * stay open. True on an answer of exactly
 * `n` counters; false, with `v` unspecified, if the child no longer
 * answers (the query's write fails, its end is closed: it ended, e.g.
 * aborted), no whole line came within TH_CHILD_QUERY_MS, or the line is
 * not `n` counters; after a false, query that child no more (a late
 * answer would be read as the next one's). A write to a child that ended raises
 * SIGPIPE: a caller that queries a child which may have died ignores it first.
 * No Check asserts (the caller decides, e.g. th_child_aborted_with first). Test
 * thread; one query at a time per child.
 */
bool th_child_query(th_child *c, long long *v, int n);

/* ---- a fleet of echoing clients ----
 * Clients on the loop of a fleet (one loop of this process), each with a
 * tag: by default it sends TH_MSG bytes of its tag at a time and checks
 * that what comes back is its own. */

/** Bytes of every message a client sends by default. */
#define TH_MSG 64

/** The clients' loop and their connects. */
typedef struct th_fleet {
  weft_loop_group *g;
  atomic_int settled; /**< connects that finished, either way */
  atomic_int run;     /**< ping-pong clients keep going */
} th_fleet;

/** One client; zero it, then set `fl`, `tag` and what it does. */
typedef struct th_client {
  th_fleet *fl;
  uint8_t tag;
  bool pingpong;     /**< sends again on every echo while fl->run */
  bool patterned;    /**< its bytes are th_pattern(offset), not its tag */
  int count, size;   /**< messages it writes at once when active */
  atomic_int posted; /**< of those, write promises completed (posted) */
  atomic_int status; /**< of the connect; 1 until known */
  atomic_int exceptions;
  atomic_int bad;      /**< an echo that was not this client's bytes */
  atomic_llong echoed; /**< bytes read */
  atomic_llong rounds; /**< echoes completed, whole TH_MSG messages */
  long long partial;   /**< bytes of an echo so far (loop thread) */
  long long offset;    /**< bytes read so far (loop thread) */
  weft_channel *ch;    /**< loop thread */
} th_client;

/** Byte `i` of a patterned stream: a reordered or lost message shows. */
uint8_t th_pattern(long long i);

/** The client channel's initializer: the client handler with `arg` (a
 *  th_client) as its state. Asserts. Loop thread. */
void th_client_init(weft_channel *ch, void *arg);

/**
 * Starts `c`'s connection to `uri` on its fleet's loop, with `init` (the
 * handler must be th_client_init's, perhaps after options) and a connect
 * timeout of 60 s (a crowd of handshakes). Asserts the start. Test thread.
 */
void th_client_connect(th_client *c, const char *uri,
                       weft_channel_init_cb init);

/** A loop task: client `arg` sends one TH_MSG message of its tag. */
void th_client_send_task(void *arg);

/** A loop task: closes client `arg`'s channel if it is open. */
void th_client_close_task(void *arg);

/**
 * Connects `n` clients `cs` (zeroed; tags i * 7 + 1) of `fl` to `uri`,
 * `inflight` handshakes at a time; once the first settled (and 200 ms
 * more) calls `first(arg)` if not NULL, to measure what one connection
 * leaves. Waits up to 180 s for all and fails the check if one failed
 * (printing the first). Test thread.
 */
void th_fleet_connect(th_fleet *fl, th_client *cs, int n, const char *uri,
                      int inflight, void (*first)(void *arg), void *arg);

/**
 * As th_fleet_connect, but returns how many connects failed (printing the
 * first) instead of failing the check, for a caller that explains a
 * failure first (test_ucx_scale: UCX's own abort in the server). Test
 * thread.
 */
int th_fleet_connect_count(th_fleet *fl, th_client *cs, int n, const char *uri,
                           int inflight, void (*first)(void *arg), void *arg);

/**
 * Every client of `cs` sends one message; fails the check unless each has
 * read `want` bytes in all within `max_ms`. Test thread.
 */
void th_fleet_echo_round(th_fleet *fl, th_client *cs, int n, long long want,
                         unsigned max_ms);

/** Fails the check if a client of `cs` got a wrong byte or an exception. */
void th_fleet_assert_clean(th_client *cs, int n);

/** Stops, joins (asserting no leak) and frees the fleet's loop. */
void th_fleet_stop(th_fleet *fl);

#endif
