/* SPDX-License-Identifier: Apache-2.0 */
/* bench.h: weft-bench's private header. weft-bench runs Observatory-style
 * microbenchmarks over every transport, each beside the plain-socket floor
 * measured in the same run:
 *
 *   weft-bench [-S SETUP]... [-p PATTERNS] [-s SIZES] [-r REPS] [options]
 *
 * A setup (-S, repeatable) is `raw-busy` (plain sockets, spinning on
 * recv(MSG_DONTWAIT)), `raw-block` (plain sockets, blocking recv),
 * `raw-tls-busy` or `raw-tls-block` (the same over OpenSSL alone: the
 * floor of the +tls rows, bench_raw_tls.c; pingpong and stream), or a
 * weft transport with its busy-poll window: `tcp:20`, `uring:0`, `ucx`
 * (busy_poll_us from the configuration: -c FILE, WEFT_LOOP_BUSY_POLL_US,
 * -o loop.busy_poll_us=N, the default 20). Without -S: raw-busy,
 * raw-block, and the configuration's transport ([transport] name) at its
 * window and at 0. `+tls` after the transport (`tcp+tls:20`) puts the TLS
 * handler (weft/tls.h) first in both ends' pipelines, with the
 * certificates of --tls-certs DIR (as tests/tls/make-certs.sh makes them:
 * ca.pem, server.pem, server.key; the client checks the chain and the
 * name "localhost"); a connection counts as up once its handshake
 * completed, and the first one's protocol and cipher go to stderr (and
 * whether the kernel encrypts: --tls-ktls asks for kTLS, weft/tls.h's
 * ktls, which falls back to user-space records with a log line).
 *
 * Patterns (-p, comma list; default all), one file each or per family:
 *   pingpong  one message in flight; every round trip recorded: p50, p90,
 *             p99, p99.9, p99.99, max, mean                   (pingpong.c)
 *   stream    unidirectional: the client sends, the server counts and
 *             answers one byte per unit (256 KiB, or one message if
 *             larger); the measurement ends at the reply to the last unit
 *                                                              (stream.c)
 *   bidir     echo with 256 KiB (at least 2 messages) in flight: payload
 *             bytes both ways per second                         (echo.c)
 *   rate      echo, N connections x M messages in flight (--rate 1x64,4x16)
 *             of --rate-size bytes (16): messages per second     (echo.c)
 *   connect   connect, a 16 B hello, the server closes, the client sees
 *             EOF; one at a time: connections per second, and the connect
 *             latency (connect to channel_active; raw: connect() returned)
 *             p50 ... max                                     (connect.c)
 *   idle      --idle-conns (100) connections doing nothing for
 *             --idle-seconds (3): the server's CPU time, % of one core
 *                                                                (idle.c)
 *
 * What weft-pingpong measured (before it merged into this program) is the
 * pingpong and rate patterns of one configuration: `weft-pingpong MODE -n N
 * -w W -t S -s B` is `weft-bench -S SETUP -p pingpong,rate -s B --rate 1xW
 * --rate-size B -n N -t S -r 1`, SETUP raw-busy, raw-block or (for mode
 * weft) TRANSPORT:BUSY_POLL_US; samples/bench/scripts/bench-transports.sh and
 * samples/bench/scripts/bench-ucx.sh run it so and read the CSV.
 *
 * Every measurement runs its phases in order: connect all, prepare (the
 * 16 B hello telling the server what to do), warm-up (not measured; round
 * trips or --warm-seconds), measure, clean up (close, wait for the
 * server's side). Repetitions (-r) are interleaved: repetition 1 of every
 * point and configuration, then repetition 2, ...; each row reports the
 * median and the min..max of its repetitions.
 *
 * Roles: by default server and client run in this process, the server's
 * thread or loop pinned to CPU 1 and the client's to CPU 0. `--role
 * server` serves one configuration on --host:--port until SIGINT/SIGTERM;
 * `--role client` measures against it (same -S; --server-pid PID to
 * measure the idle server's CPU). --host is the address to listen on and
 * connect to (RoCE cannot use 127.0.0.1). `--plain-echo` speaks plain
 * echo: a client (the echoing patterns pingpong, bidir, rate and idle
 * only) sends no hello, so any echo server (weft-echo, a raw one) can be
 * measured with the same client; a server echoes every connection from
 * its first byte (scripts/bench-echo.sh).
 *
 * Output: markdown tables on stdout (with the ratio of every weft row to
 * the raw rows of the same point) and the targets; --csv FILE,
 * --json FILE, --md FILE (the tables again); a progress line on stderr
 * (--progress, default when stderr is a terminal).
 *
 * The files:
 *   bench_main.c     the command line into bench_opt, then bench_run
 *   bench_options.c  what the options mean: defaults, lists, configurations
 *   bench_run.c      the run: points x configurations x repetitions, the
 *                    outputs, the pattern table, phases, errors
 *   bench_session.c  starting and stopping a configuration's server side
 *                    and client loop
 *   bench_server.c   the weft server: the hello, then echo, count or close
 *   raw_server.c     the raw server, the same over epoll in one thread
 *   bench_raw.c      plain-socket helpers of the raw client and server
 *   bench_raw_tls.c  the raw-tls setups' OpenSSL: contexts, handshake,
 *                    SSL_read/SSL_write of the raw client and server
 *   raw_tls_server.c the raw-tls server: one connection at a time
 *   bench_client.c   the weft client: connections, run state, handler
 *   pingpong.c, echo.c, stream.c, connect.c, idle.c: the patterns, each
 *                    with its raw client and its part of the weft client
 * report.c (percentiles, rows, writers) and bench_util.c (clock, pinning)
 * are shared with samples/bench/tests/test_bench_report.c and the other
 * programs.
 *
 * Threads: options and sessions are set up on the main thread before any
 * measurement; a raw client runs on the main thread; a weft client's
 * wrun is touched on its client loop, except where a function says
 * "main thread".
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <weft/weft.h>

#include "report.h"

#define BENCH_MAX_CONFIGS 16
#define BENCH_MAX_SIZES 24
#define BENCH_MAX_RATES 8
#define BENCH_CHUNK 65536   /* weft buffer (the pool's largest), bytes */
#define BENCH_TXMAX 1048576 /* largest raw send or recv, bytes */
#define BENCH_HELLO_MAGIC 0x776e6231u

/* ---- what the client tells the server: 16 bytes before any payload ---- */

enum { SRV_ECHO = 1, SRV_SINK = 2, SRV_CLOSE = 3 };

typedef struct hello {
  uint32_t magic;
  uint32_t mode; /* SRV_* */
  uint64_t unit; /* SRV_SINK: answer one byte per `unit` bytes */
} hello;

_Static_assert(sizeof(hello) == 16, "the hello is 16 bytes on the wire");

enum pattern { P_PINGPONG, P_STREAM, P_BIDIR, P_RATE, P_CONNECT, P_IDLE, P_N };

/* ---- options and configurations ---- */

typedef struct session session;

typedef struct bench_config {
  char label[40];
  char mode[16]; /* weft, raw-busy, raw-block, raw-tls-busy, raw-tls-block */
  char transport[16];
  int busy_poll_us;
  bool busy_poll_adaptive; /* [loop] busy_poll_adaptive, for weft setups */
  bool raw, busy;          /* raw: busy = spin */
  bool tls; /* weft: the TLS handler first at both ends; raw: OpenSSL */
  session *s;
} bench_config;

typedef struct rate_point {
  int conns, window;
} rate_point;

enum bench_role { ROLE_BOTH, ROLE_SERVER, ROLE_CLIENT };

typedef struct bench_opts {
  bench_config configs[BENCH_MAX_CONFIGS];
  int n_configs;
  bool patterns[P_N];
  size_t sizes[BENCH_MAX_SIZES];
  int n_sizes;
  rate_point rates[BENCH_MAX_RATES];
  int n_rates;
  size_t rate_size;
  int reps;
  long iters, warmup;
  double seconds, warm_seconds;
  int idle_conns;
  double idle_seconds;
  int server_loops; /* loops of the weft server's group (--server-loops) */
  bool no_pin;      /* --no-pin: no thread is pinned (bench_pin_enable) */
  enum bench_role role;
  char host[64];
  int port;
  pid_t server_pid;
  const char *csv, *json, *md;
  bool progress, quiet;
  char excludes[BENCH_MAX_CONFIGS][32]; /* -x TRANSPORT:PATTERN */
  int n_excludes;
  const char *tls_certs; /* --tls-certs DIR, for the +tls setups */
  bool tls_ktls;         /* --tls-ktls: ktls = on in both TLS contexts */
  bool plain_echo; /* --plain-echo: no hello (a client), echo all (a server) */
} bench_opts;

/** The options: set by bench_main.c, read everywhere after. */
extern bench_opts bench_opt;

/* One thing to measure. */
typedef struct point {
  enum pattern pattern;
  size_t size;
  int conns, window;
  long warm, iters; /* pingpong round trips */
} point;

/* What one repetition measured. */
typedef struct result {
  bench_latency lat;
  bool has_lat;
  double msgs_per_s, mb_per_s, conns_per_s, cpu_pct; /* < 0: not measured */
} result;

/* ---- sessions: a configuration's server and client side ---- */

struct session {
  bench_config *cf;
  int idx;
  char prefix[16]; /* server thread names start with this */
  /* raw */
  int lfd;
  int stop_fd;             /* eventfd: written to stop the raw server */
  pthread_t accept_thread; /* the raw server's thread */
  struct sockaddr_in addr; /* where the client connects */
  /* weft */
  weft_loop_group *sg, *cg;
  weft_server *srv;
  char uri[300];
  pid_t server_pid; /* ucx in one-process mode: the server's own process */
  weft_tls_context *tls_server, *tls_client; /* +tls setups, else NULL */
  atomic_bool tls_told; /* the first handshake's cipher was printed */
  /* raw-tls setups: OpenSSL's SSL_CTX of each side this role runs, else
   * NULL (bench_raw_tls.c) */
  struct ssl_ctx_st *ssl_server, *ssl_client;
};

/* A raw client's connection: a plain socket, or (raw-tls) an OpenSSL
 * session over it. busy: the socket is nonblocking and every wait spins;
 * else it blocks. */
typedef struct raw_link {
  int fd;
  struct ssl_st *ssl; /* OpenSSL's SSL, NULL for plain sockets */
  bool busy;
} raw_link;

/* ---- the phases of a timed measurement ---- */

enum { PH_WARM, PH_MEASURE, PH_DRAIN, PH_DONE };

typedef struct bench_phases {
  int phase;         /* PH_* */
  uint64_t warm_end; /* the warm-up ends at the first event after this */
  uint64_t t0, end;  /* measuring since t0, until the first event after end */
  uint64_t t1;       /* the measurement's last event */
} bench_phases;

/* ---- the weft client: one run of one point on the client loop ---- */

typedef struct wrun wrun;
typedef struct bench_pattern bench_pattern;

typedef struct wconn {
  wrun *run;
  weft_ctx *ctx;
  weft_channel *ch;
  weft_pool *pool;    /* its loop's, looked up once (at channel_active) */
  uint64_t t_connect; /* when its connect was asked for (connect latency) */
  size_t got;         /* bytes of the current reply / partial message */
  long outstanding;   /* echo: messages in flight */
  uint64_t sent;      /* stream: payload bytes written */
  uint64_t units;     /* stream: answers received */
  bool gone;          /* closed (counted in run->closed) */
  bool pumping;       /* stream: in stream_pump */
  bool queued;        /* stream: a stream_pump_task is queued */
} wconn;

struct wrun {
  const point *pt;
  const bench_pattern *pat;
  weft_loop *loop;
  const char *uri;  /* the server's address, for messages */
  weft_endpoint ep; /* uri, parsed once for every connect of the run */
  session *s;
  wconn *c;
  int n;
  uint64_t unit; /* stream: the hello's unit */
  int connected;
  bench_phases ph;
  uint64_t msgs;          /* echo: messages echoed while measuring */
  uint64_t units, units0; /* stream: answers, and at the start */
  uint64_t count;         /* connect: connections measured */
  uint64_t *rtt;          /* pingpong: round trips; connect: connect
                             latencies (freed with the run) */
  size_t n_rtt, cap_rtt;  /* connect: latencies recorded, room */
  long i;                 /* pingpong: round trip number, from -warm */
  uint64_t tsend;         /* pingpong: when the message went */
  int error;
  /* main thread <-> loop */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ready;   /* idle: all connected */
  int closed;  /* connections gone */
  int barrier; /* the loop ran every task queued before barrier_task */
};

/* ---- the patterns ---- */

/*
 * A pattern: what its client does, over plain sockets and over weft. The
 * weft hooks run on the client loop unless marked "main thread"; a NULL
 * hook does what its comment says.
 */
struct bench_pattern {
  const char *name;     /* "pingpong", as -p and the rows spell it */
  uint32_t server_mode; /* SRV_*: what the hello asks the server to do */
  /** The raw client: the whole measurement, on the main thread. */
  void (*raw_run)(session *s, const point *pt, result *res);
  /** Main thread, before connecting (NULL: nothing). */
  void (*prepare)(wrun *r);
  /** Main thread: starts connecting (NULL: all connections at once). */
  void (*begin)(wrun *r);
  /** Connection c is active, its hello sent (NULL: nothing). */
  void (*active)(wrun *r, wconn *c);
  /** Every connection is active and its hello sent (NULL: the
   * connections are not counted, so nothing starts there). */
  void (*start)(wrun *r);
  /** Connection c read n bytes, the run not done (NULL: ignored). */
  void (*read)(wrun *r, wconn *c, size_t n);
  /** Connection c became writable (NULL: ignored). */
  void (*writable)(wconn *c);
  /** Connection c closed; true when the pattern reused c for another
   * connection (NULL: a close before the run is done fails it). */
  bool (*inactive)(wrun *r, wconn *c);
  /** Main thread, once connecting began (NULL: nothing). */
  void (*await)(session *s, wrun *r, result *res);
  /** Main thread, after the run: its result (NULL: nothing). */
  void (*finish)(const wrun *r, result *res);
};

extern const bench_pattern bench_pingpong, bench_stream, bench_bidir,
    bench_rate, bench_connect, bench_idle;

/** Every pattern, by enum pattern. */
extern const bench_pattern *const bench_patterns[P_N];

/* ---- bench_run.c ---- */

/** Prints "weft-bench: WHAT: strerror(errno)" and exits 1. */
_Noreturn void bench_die(const char *what);

/** Prints "weft-bench: " and fmt with its one %s, and exits 2. */
_Noreturn void bench_fail(const char *fmt, const char *arg);

/** Starts a timed measurement's warm-up (--warm-seconds) at `now`. */
void bench_phases_start(bench_phases *p, uint64_t now);

/**
 * Advances a timed measurement at an event at `now`: from warm-up to
 * measuring once the warm-up is over (t0 = now, the end -t seconds later;
 * returns true), from measuring to draining once the end has passed.
 */
bool bench_phases_tick(bench_phases *p, uint64_t now);

/**
 * Main thread, options set: starts every configuration's session, serves
 * (--role server) or measures and writes the outputs, stops the sessions.
 * `command` is the command line for the JSON report. Returns 0.
 */
int bench_run(const char *command);

/* ---- bench_options.c ---- */

/** Sets bench_opt to the defaults, before any option. */
void bench_opts_defaults(void);

/** A size: N, NK or NM (1 to 16M); fails on anything else. */
size_t bench_parse_size(const char *s);

/** A whole number of `what` (an option's name, for the message) from min to
 * max; anything else (trailing text, out of range) fails with exit 2. */
long bench_parse_long(const char *what, const char *s, long min, long max);

/** Seconds, a decimal number from min to max, else fails with exit 2. */
double bench_parse_seconds(const char *what, const char *s, double min,
                           double max);

/** -p: the patterns of a comma list (replacing the set). */
void bench_opts_patterns(const char *list);

/** -s: the sizes of a comma list (replacing them). */
void bench_opts_sizes(const char *list);

/** --rate: the CONNSxWINDOW points of a comma list (replacing them). */
void bench_opts_rates(const char *list);

/** -x: skips PATTERN for TRANSPORT (or raw mode) "TRANSPORT:PATTERN". */
void bench_opts_exclude(const char *item);

/** --role: "both", "server" or "client"; false for anything else. */
bool bench_opts_role(const char *role);

/**
 * The setups: `specs` (-S, n of them), busy_poll_us defaulting to the
 * loaded configuration's (config file, WEFT_* variables, -o); without
 * specs, raw-busy, raw-block and that configuration's transport at its
 * window and at 0. Every weft setup takes the configuration's
 * busy_poll_adaptive.
 */
void bench_opts_configs(const char *const *specs, int n,
                        const weft_config *cfg);

/** False when a number is out of range (say usage); fails on a role
 * without one configuration or a port, or a +tls setup without
 * --tls-certs. */
bool bench_opts_check(void);

/* ---- bench_session.c ---- */

/** Starts configuration cf's server side and client loop (session idx). */
void bench_session_start(bench_config *cf, int idx);

/** Stops and frees cf's session. */
void bench_session_stop(bench_config *cf);

/* ---- bench_server.c and raw_server.c ---- */

/** The raw server's thread (arg: its session): epoll over the listener
 * and every connection, pinned to CPU 1, until s->stop_fd is written;
 * then closes its connections (not the listener). raw_server.c. */
void *bench_server_raw_main(void *arg);

/** The raw-tls server's thread (arg: its session): accepts and serves
 * one connection at a time over OpenSSL, pinned to CPU 1, until
 * s->stop_fd is written. raw_tls_server.c. */
void *bench_server_raw_tls_main(void *arg);

/** child_init of the weft server (arg: its session): the TLS handler in
 * a +tls setup, then the bench server handler. */
void bench_server_weft_init(weft_channel *ch, void *arg);

/* ---- bench_raw.c ---- */

/** Zeros to send (never written) and the raw client's receive buffer. */
extern uint8_t bench_zeros[BENCH_TXMAX];
extern uint8_t bench_rxbuf[BENCH_TXMAX];

/** recv of at least 1 byte: spinning with MSG_DONTWAIT (busy) or
 * blocking; EINTR and EAGAIN retried. 0 at EOF, -1 on error. */
ssize_t bench_raw_recv(int fd, void *p, size_t n, bool busy);

/** Sends all n bytes; -1 on error. */
int bench_raw_send_all(int fd, const void *p, size_t n);

/** Receives exactly n bytes; -1 on EOF or error. */
int bench_raw_recv_exact(int fd, void *p, size_t n, bool busy);

/** Sets TCP_NODELAY. */
void bench_raw_nodelay(int fd);

/** The calling thread becomes s's raw server thread: named "<s->prefix>"
 * + suffix, pinned to CPU 1, s's listener nonblocking; dies on failure. */
void bench_raw_server_thread(session *s, const char *suffix);

/** Connects a TCP socket to s's server (TCP_NODELAY); dies on failure. */
int bench_raw_dial(session *s);

/** Connects to s's server and sends the hello {mode, unit} (not with
 * --plain-echo); dies on failure. Returns the socket. */
int bench_raw_connect(session *s, uint32_t mode, uint64_t unit);

/** bench_raw_connect, or in a raw-tls setup bench_tls_link_open: a raw
 * client's connection, its hello sent. */
raw_link bench_raw_link_open(session *s, uint32_t mode, uint64_t unit);

/** bench_raw_exchange over l (plain or TLS); -1 on EOF or error. */
int bench_raw_link_exchange(raw_link *l, size_t n);

/** Closes l as bench_raw_close does, after TLS's close_notify. */
void bench_raw_link_close(raw_link *l);

/** Reads (into bench_rxbuf) until EOF or an error. */
void bench_raw_drain(int fd, bool busy);

/** Shuts down the sending side, drains and closes fd. */
void bench_raw_close(int fd, bool busy);

/** Sends n bytes and receives n back (receiving while sending large
 * ones); -1 on EOF or error. */
int bench_raw_exchange(int fd, size_t n, bool busy);

/* ---- bench_raw_tls.c: OpenSSL alone, the floor of the +tls rows ---- */

/**
 * An SSL_CTX with weft's TLS policy (handlers/tls_context.c: TLS 1.3 here,
 * its three suites AES-128-GCM first, no renegotiation or compression,
 * buffers released when idle) and --tls-certs' files: the server's
 * server.pem and server.key, or the client's trust in ca.pem. Fails with
 * exit 2 and OpenSSL's reason when a file does not load. Main thread.
 */
struct ssl_ctx_st *bench_tls_ctx_new(bool server);

/** Frees a context of bench_tls_ctx_new (NULL: nothing). */
void bench_tls_ctx_free(struct ssl_ctx_st *ctx);

/**
 * The TLS handshake of l (SSL_accept or SSL_connect), spinning on a busy
 * link. 0 when done; -1 with the reason in why[0..len) otherwise.
 */
int bench_tls_handshake(raw_link *l, bool server, char *why, size_t len);

/** Connects to s's server, TLS handshake (the name "localhost" checked),
 * then the hello as bench_raw_connect; the socket nonblocking when busy.
 * Dies with OpenSSL's reason on failure. */
raw_link bench_tls_link_open(session *s, uint32_t mode, uint64_t unit);

/** Writes all n bytes (one SSL_write), spinning while a busy link's
 * socket is full; -1 on error. */
int bench_tls_send_all(raw_link *l, const void *p, size_t n);

/** One SSL_write of n bytes: n, 0 when a busy link's socket is full (call
 * again with the same n: OpenSSL's rule), -1 on error. */
int bench_tls_send(raw_link *l, const void *p, size_t n);

/** Reads at least 1 byte (at most n): blocking in SSL_read, or spinning
 * on it while it wants to read (busy). -1 at EOF or on an error. */
int bench_tls_recv(raw_link *l, void *p, size_t n);

/** Reads what is there without waiting: bytes, 0 for none (or only a
 * record that carries no data, a session ticket), -1 at EOF or error. */
int bench_tls_take(raw_link *l, void *p, size_t n);

/** bench_raw_exchange over TLS: n bytes out, n back. -1 on EOF/error. */
int bench_tls_exchange(raw_link *l, size_t n);

/** Sends close_notify and frees l's SSL (the socket stays open). */
void bench_tls_end(raw_link *l);

/* ---- bench_client.c ---- */

/** Main thread: measures point pt over weft with s's client loop. */
void bench_weft_measure(session *s, const point *pt, result *res);

/** Connects c (a client of r's loop); < 0 when it could not start. */
int bench_wconn_connect(wrun *r, wconn *c);

/** Writes (not flushes) one message of the point's size on c. */
void bench_wconn_write_msg(wconn *c);

/** c is closed: counts it in r->closed for the main thread. */
void bench_wconn_gone(wrun *r, wconn *c);

/** Closes every connection still open. */
void bench_wrun_close_all(wrun *r);

/** Ends the run: done, every connection closed. */
void bench_wrun_end(wrun *r);

/** Ends the run with error err (the first one is kept). */
void bench_wrun_fail(wrun *r, int err);

/** Sets *field to value under r's lock and wakes the main thread. */
void bench_wrun_signal(wrun *r, int *field, int value);

/** Main thread: waits until *field >= value; false after 120 s. */
bool bench_wrun_wait(wrun *r, int *field, int value);

#endif
