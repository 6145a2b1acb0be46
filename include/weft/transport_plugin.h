/* SPDX-License-Identifier: Apache-2.0 */
/* weft/transport_plugin.h: the transport plugin interface.
 *
 * A transport moves a channel's bytes: "tcp" (epoll), "uring" (io_uring),
 * "verbs" (ibverbs RC), "ucx" (UCP). Each is one const weft_transport_ops,
 * registered by name; the core (channel, pipeline, bootstrap, config) never
 * names a transport: it tests capability flags, and a plugin's own settings
 * ([transport.<name>] keys) reach it through the registry. Three levels, as
 * in Mercury's NA:
 *
 *   process   probe: can this transport run here at all? config_set: the
 *             plugin's process-wide settings
 *   loop      loop_init / loop_fini: one instance per loop (a ring, a CQ, a
 *             worker, an epoll set), registered as a weft_source so the
 *             hybrid selector polls and arms it
 *   channel   connect / adopt / flush / close / options, with
 *             `channel_priv_size` bytes of private state per channel
 *
 * The core keeps the books (the outbound queue of written buffers with
 * their promises, watermarks, states); a transport's flush takes the queued
 * buffers in a batch and reports how many bytes left (weft_outbound_*).
 *
 * This header is for plugin authors: weft.h does not include it, and an
 * application needs only endpoint.h. A plugin is one folder under
 * transports/ plus this header; it may use the loop, buffer and channel
 * APIs, never another plugin (docs/architecture.md, "Layers").
 *
 * Threads: every op runs on the loop thread the object belongs to; probe
 * and config_set run on any thread (the registry serialises them).
 */
#ifndef WEFT_TRANSPORT_PLUGIN_H
#define WEFT_TRANSPORT_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <weft/buf.h>
#include <weft/channel_option.h>
#include <weft/endpoint.h>
#include <weft/file_region.h>
#include <weft/loop.h>
#include <weft/timer.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_channel weft_channel; /* channel.h */
/** A listening endpoint of a transport (opaque). */
typedef struct weft_listener weft_listener;

/* Capability flags: what a transport has. Core code tests these, never a
 * transport's name. */
#define WEFT_TRANSPORT_CAP_STREAM                                              \
  0x1u                                     /* byte stream (tcp, uring): writes \
                                              may be split or merged */
#define WEFT_TRANSPORT_CAP_HALF_CLOSE 0x2u /* shutdown_output (tcp, uring) */
#define WEFT_TRANSPORT_CAP_SOCKET_OPTS                                         \
  0x4u /* TCP_NODELAY, SO_*BUF (tcp,                                           \
          uring) */
#define WEFT_TRANSPORT_CAP_REGISTERED_MEM                                      \
  0x8u /* sends need registered                                                \
          memory (verbs) */
/* TCP on the wire: any TCP peer (redis-cli, curl, a kernel socket) can be
 * the other end (tcp, uring). */
#define WEFT_TRANSPORT_CAP_TCP 0x10u
/* A server listens on every loop of its group: listener 0 on the server's
 * address (loop 0), listener i on loop i at the same host and a port of
 * its own, and each keeps the connections it accepts on its own loop. For
 * a transport whose library must accept a connection on the thread that
 * listened (ucx: its connections are spread by a redirect in its own
 * handshake, docs/transports/ucx.md). */
#define WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP 0x20u
/* The transport's flush sends file regions (weft/file_region.h) from the
 * outbound queue itself, straight from the file (tcp: sendfile(2)):
 * weft_outbound_iov stops at a region, weft_outbound_file_region names it,
 * weft_outbound_consumed counts its bytes. Without this flag a region
 * never reaches the queue: the pipeline reads it into buffers first. */
#define WEFT_TRANSPORT_CAP_FILE_REGION 0x40u

/**
 * For socket-backed transport plugins (tcp, uring): resolves `ep` as
 * weft_endpoint_resolve does (passive; BLOCKS on host names) and listens
 * on the first address that takes it: a SOCK_STREAM socket with
 * `type_flags` added to its type (SOCK_NONBLOCK, SOCK_CLOEXEC), SO_REUSEADDR,
 * bound, listening with `backlog`. Returns 0 with the socket in `*fd` (the
 * caller's to close), or the resolver's error, or the last address's
 * socket/bind/listen error (-errno, e.g. WEFT_EADDRINUSE), or
 * WEFT_EADDRNOTAVAIL. Any thread.
 */
int weft_socket_listen(const weft_endpoint *ep, int backlog, int type_flags,
                       int *fd);

/**
 * Writes the peer's (`peer`) or the local address of socket `fd` as text,
 * as weft_sockaddr_format does ("127.0.0.1:41234"). Returns 0, the
 * getpeername/getsockname error (-errno: WEFT_ENOTCONN before a connection
 * completes), or weft_sockaddr_format's. Any thread.
 */
int weft_socket_address(int fd, bool peer, char *buf, size_t len);

/**
 * The socket options of a socket-backed channel, for transport plugins
 * (tcp, uring): TCP_NODELAY, SO_SNDBUF, SO_RCVBUF and SO_KEEPALIVE. An
 * option set before the socket exists is stored and applied by
 * weft_sockopts_apply() once it does. Embed one, zeroed, in the channel's
 * private state; loop thread only.
 */
typedef struct weft_sockopts {
  int value[4];  /* by option, in the order above */
  uint8_t isset; /* bit per option: a value waits in value[] */
} weft_sockopts;

/**
 * Sets `opt` to `v` (0/1 for TCP_NODELAY and SO_KEEPALIVE, bytes in
 * 1..INT_MAX for the buffer sizes): on socket `fd` now if `fd` >= 0, and in
 * `s` for weft_sockopts_apply. Returns 0, WEFT_ENOTSUP for another option,
 * WEFT_EINVAL for a value out of range, or setsockopt's error (nothing
 * stored then).
 */
int weft_sockopts_set(weft_sockopts *s, int fd, weft_channel_option opt,
                      int64_t v);

/**
 * Reads `opt` into `*v`: from socket `fd` if `fd` >= 0 (0/1 for the
 * booleans), else the stored value, else the default (TCP_NODELAY 1,
 * SO_KEEPALIVE 0). Returns 0, WEFT_ENOTSUP for another option,
 * WEFT_ENOTCONN for a buffer size before the socket exists (the kernel's
 * default is not known yet), or getsockopt's error.
 */
int weft_sockopts_get(const weft_sockopts *s, int fd, weft_channel_option opt,
                      int64_t *v);

/**
 * Applies the stored options to the new socket `fd`, with TCP_NODELAY on
 * unless the channel turned it off (request/response latency first).
 * Returns 0 or the first setsockopt error.
 */
int weft_sockopts_apply(weft_sockopts *s, int fd);

/**
 * A listening socket's way through running out of file descriptors, for
 * socket-backed transport plugins (tcp, uring), as libuv and nginx do it.
 * At the fd limit accept fails (EMFILE, ENFILE) before it takes a
 * connection off the backlog, and the client, whose handshake the kernel
 * completed, would wait with no answer for as long as the limit lasts. The
 * guard keeps one spare descriptor open (/dev/null); weft_accept_guard_refuse
 * closes it, accepts the waiting connection, closes that at once (the client
 * sees the connection closed, not a hang) and opens the spare again. Its log
 * lines come at most once per second, each with the count of connections
 * closed since the line before (a timer writes the count of the last second
 * when no new event does). Embed one per listener; everything runs on the
 * listener's loop thread.
 */
typedef struct weft_accept_guard {
  const char *name;     /* the transport, first word of each log line */
  int spare_fd;         /* an open /dev/null, or -1 */
  int err;              /* the last resource error (-EMFILE, -ENFILE, ...) */
  bool refusing;        /* closing new connections since the last accept */
  bool logged_refusing; /* the last line said so */
  uint64_t refused;     /* connections closed since the last line */
  uint64_t last_log_ns; /* when the last line was written; 0 = never */
  weft_timer report;    /* writes the count when the second is up */
} weft_accept_guard;

/** How long a listener waits before accepting again when nothing else
 *  helps (kernel memory short, no spare descriptor): 100 ms. */
#define WEFT_ACCEPT_BACKOFF_NS (100u * 1000u * 1000u)

/**
 * Starts `g` for a listener of transport `name` (a string that outlives
 * `g`) on `loop`, opening the spare descriptor (if that fails, the next
 * refuse tries again). Loop thread.
 */
void weft_accept_guard_init(weft_accept_guard *g, weft_loop *loop,
                            const char *name);

/** Ends `g`: closes the spare, logs the connections closed since the last
 *  line, if any. Loop thread. */
void weft_accept_guard_fini(weft_accept_guard *g);

/**
 * Called when accept on `listen_fd` (blocking or not; nobody else accepts
 * on it meanwhile) failed with `err` (negative errno). For -EMFILE and
 * -ENFILE: closes the first waiting connection with the spare's help.
 * Returns 1 when it closed one (accept again: more may wait, or
 * descriptors may be free by now), 0 when no connection waits (wait for the
 * listener to be readable before accepting again: accept fails at the
 * limit even on an empty backlog), or WEFT_EAGAIN when it can do nothing
 * now (-ENOBUFS or -ENOMEM, no spare descriptor, or another thread took
 * the freed one): then pause accepting for WEFT_ACCEPT_BACKOFF_NS. Logs,
 * at most once per second.
 */
int weft_accept_guard_refuse(weft_accept_guard *g, int listen_fd, int err);

/**
 * Called for each connection accepted: ends a refusing spell (a line
 * says so) and opens the spare again if it was lost. Loop thread.
 */
void weft_accept_guard_accepted(weft_accept_guard *g);

/**
 * One setting of a plugin: `name = value` in the plugin's section of a
 * config file (`[transport.ucx]`), WEFT_TRANSPORT_<PLUGIN>_<NAME> in the
 * environment, or `-o transport.ucx.name=value`. A plugin lists its settings in
 * weft_transport_ops.config_keys; the registry checks a key against the
 * list before calling config_set, and names the valid keys (with these
 * phrases) in errors and in the programs' --help.
 */
typedef struct weft_transport_key {
  const char *name;   /* "tls"; NULL ends the list */
  const char *def;    /* the default, as text ("" = the library's own) */
  const char *values; /* the valid values, a phrase: "bytes, 4096 .. 2^30" */
} weft_transport_key;

/** A transport plugin. Optional ops may be NULL (the wrapper returns
 *  WEFT_ENOTSUP). */
typedef struct weft_transport_ops {
  const char *name;         /* registry name, the URI scheme */
  uint32_t caps;            /* WEFT_TRANSPORT_CAP_* */
  size_t channel_priv_size; /* bytes of per-channel private state */

  /**
   * Optional. Checks once per process that the transport can run here.
   * Returns 0, or a negative error with a sentence in `why` naming the
   * cause and what to do ("io_uring_setup: Operation not permitted (blocked
   * by a container seccomp profile?); use transport=tcp").
   */
  int (*probe)(char *why, size_t why_len);

  /** Optional: the plugin's settings, ended by an entry with name NULL. */
  const weft_transport_key *config_keys;
  /**
   * Sets one of config_keys (never another: the registry checks) for the
   * process. Settings take effect for per-loop instances created
   * afterwards, so set them before the first loop uses the transport.
   * Returns 0, or WEFT_EINVAL with the valid values in `why`. The registry
   * serialises calls; they may come from any thread.
   */
  int (*config_set)(const char *key, const char *value, char *why,
                    size_t why_len);

  /** Creates the per-loop instance (and registers its sources). */
  int (*loop_init)(weft_loop *loop, void **loop_state);
  /** Ends it; every channel of this transport on the loop is closed. */
  void (*loop_fini)(weft_loop *loop, void *loop_state);

  /**
   * Starts listening on `ep`; accepted connections are handed to
   * weft_listener_accepted(). Runs on the listener's loop. With
   * WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP it is called once per loop, listener
   * i > 0 with the server's host and port 0 (weft_listener_index).
   */
  int (*listen)(weft_listener *l, const weft_endpoint *ep, int backlog);
  /** Stops listening and frees what listen allocated. */
  void (*listen_close)(weft_listener *l);
  /** Writes the bound address ("127.0.0.1:41234") of a listener. */
  int (*listen_address)(weft_listener *l, char *buf, size_t len);

  /**
   * Starts connecting channel `ch` to `ep`; the outcome is reported with
   * weft_channel_connected() (possibly from inside this call). Returns 0 if
   * started, or an error (nothing to clean up).
   */
  int (*connect)(weft_channel *ch, const weft_endpoint *ep);
  /**
   * Takes over an accepted connection `handle` (from
   * weft_listener_accepted) as channel `ch` on `ch`'s loop, which may be
   * another loop than the listener's. Returns 0 or an error (the handle is
   * then closed by the transport).
   */
  int (*adopt)(weft_channel *ch, intptr_t handle);
  /** Closes an accepted handle nobody will adopt (shutdown). Any loop. */
  void (*discard)(intptr_t handle);

  /**
   * Transmits the flushed part of the outbound queue (weft_outbound_*),
   * as much as the transport accepts now; the rest when it can. Returns 0 or
   * an error (the core then closes the channel).
   */
  int (*flush)(weft_channel *ch);
  /** Releases the channel's transport resources (fd, QP, endpoint). */
  void (*close)(weft_channel *ch);
  /** Half-close: shut down the sending side after the queue drained. */
  int (*shutdown_output)(weft_channel *ch);
  /** Sets / reads a transport option (TCP_NODELAY, buffer sizes, ...). */
  int (*set_option)(weft_channel *ch, weft_channel_option opt, int64_t v);
  int (*get_option)(const weft_channel *ch, weft_channel_option opt,
                    int64_t *v);
  /** Start / stop reading (auto-read): flow control by the application. */
  int (*set_read)(weft_channel *ch, bool on);
  /** Text addresses of the peer and of the local end. */
  int (*remote_address)(const weft_channel *ch, char *buf, size_t len);
  int (*local_address)(const weft_channel *ch, char *buf, size_t len);

  /*
   * Kernel TLS (Linux kTLS), for socket transports; the TLS handler
   * (weft/tls.h) calls these once its handshake completed, and falls back
   * to user-space records where they are NULL or fail.
   */

  /**
   * Optional: from now on the kernel encrypts what this channel sends
   * into TLS records: installs the "tls" upper layer protocol on the
   * socket (setsockopt TCP_ULP) if not yet done, then sets TLS_TX with
   * `crypto_info` (a struct tls12_crypto_info_* of <linux/tls.h>, `len`
   * bytes: version, cipher, key, IV, salt, record sequence). Only with
   * nothing flushed and unsent (every earlier byte is in the kernel):
   * WEFT_EBUSY otherwise. Returns 0, WEFT_ENOTCONN, WEFT_ENOENT (the kernel
   * has no tls module), or setsockopt's error; on an error the socket
   * sends as before.
   */
  int (*ktls_tx)(weft_channel *ch, const void *crypto_info, size_t len);
  /**
   * Optional, after ktls_tx: sends one record of content type `type` (21
   * alert, 22 handshake) holding `len` bytes of `data`, at once (a
   * TLS_SET_RECORD_TYPE control message): for close_notify. Only with
   * nothing flushed and unsent (WEFT_EBUSY). Returns 0, WEFT_EAGAIN (the
   * socket is full: not sent), or the error.
   */
  int (*ktls_send_record)(weft_channel *ch, uint8_t type, const void *data,
                          size_t len);
} weft_transport_ops;

/**
 * Registers a transport under ops->name. The built-in ones register
 * themselves on first use of the registry. Returns 0, WEFT_EEXIST,
 * WEFT_EINVAL (the name is not a valid URI scheme) or WEFT_ENOSPC (at most
 * 16). Any thread, before the name is used.
 */
int weft_transport_register(const weft_transport_ops *ops);

/**
 * The transport named `name`, probed (once per process, cached). When the
 * probe fails and a fallback is configured (`[transport.<name>] fallback =
 * tcp`), the fallback's ops are returned instead and the probe's reason is
 * logged once: its channels then are the fallback's channels. NULL when the
 * name is unknown or cannot run here (nor its fallback); `why` (if not
 * NULL) then says which (listing the registered names, or the probe's
 * reason). Any thread.
 */
const weft_transport_ops *weft_transport_find(const char *name, char *why,
                                              size_t why_len);

/**
 * The i-th registered transport (0 = the first built-in), without probing
 * it; NULL past the last. For listing names and settings (--help). Any
 * thread.
 */
const weft_transport_ops *weft_transport_at(size_t i);

/**
 * Sets a setting of transport `name` for the process: `key` is one of its
 * config_keys, or "fallback", which every transport has (another
 * registered transport's name, used where this one's probe fails; "none"
 * clears it). What `[transport.<name>] key = value` in a config file does.
 * Returns 0; WEFT_ENOENT with `why` naming the registered transports (name
 * unknown) or the valid keys (key unknown); or WEFT_EINVAL with the valid
 * values in `why`. Any thread; see config_set for when it takes effect.
 */
int weft_transport_config_set(const char *name, const char *key,
                              const char *value, char *why, size_t why_len);

/**
 * The per-loop instance of `ops` on `loop`, created on first use with
 * ops->loop_init (and ended by loop_fini when the loop stops).
 * Returns NULL and stores the error in `*err` if loop_init fails. Loop
 * thread.
 */
void *weft_transport_loop_state(const weft_transport_ops *ops, weft_loop *loop,
                                int *err);

/* ---- what a transport calls on its channels ---- */

/** The channel's private transport state (channel_priv_size bytes). */
void *weft_channel_priv(const weft_channel *ch);
/** The channel's transport. */
const weft_transport_ops *weft_channel_transport(const weft_channel *ch);

/** A channel's read budget per loop iteration (docs/architecture.md,
 *  "Read budget"). */
typedef struct weft_read_budget {
  uint32_t max_messages; /* channel_reads (WEFT_OPT_MAX_MESSAGES_PER_READ) */
  size_t max_bytes;      /* bytes (WEFT_OPT_MAX_BYTES_PER_READ) */
} weft_read_budget;

/**
 * The channel's read budget: what a transport may fire as channel_read in
 * one loop iteration before it yields the loop to the channel's
 * neighbours, keeping the rest where it is (in the socket, in a list of
 * its own that the next iteration delivers first) and going on at the next
 * iteration without waiting for new readiness. Cheap (two loads): read it
 * once per readiness or per iteration. Loop thread.
 */
weft_read_budget weft_channel_read_budget(const weft_channel *ch);

/**
 * Whether channel `ch` reads on its own (WEFT_OPT_AUTO_READ, true by
 * default): what a plugin's reading flag starts from when it takes a
 * channel, and again once a connect completes (the option may change
 * meanwhile). Loop thread.
 */
bool weft_channel_auto_read(const weft_channel *ch);

/**
 * A channel's read budget as it is spent over one loop iteration: the
 * reads and bytes the channel fired in iteration `epoch`, and the budget
 * (weft_channel_read_budget) read at that iteration's first read. A plugin
 * keeps one per channel, zero-initialized, and counts with
 * weft_read_meter_spend; `epoch` is the plugin's own count of its polls
 * (any value that changes from one iteration to the next). Loop thread.
 */
typedef struct weft_read_meter {
  uint64_t epoch;          /**< the iteration the counts are of */
  uint32_t msgs;           /**< channel_reads fired in it */
  size_t bytes;            /**< bytes fired in it */
  weft_read_budget budget; /**< the channel's, read at its first read */
} weft_read_meter;

/**
 * Starts iteration `epoch` on `m` unless it is already in it: the counts
 * go to zero and the budget of `ch` is read again (so a changed
 * WEFT_OPT_MAX_MESSAGES_PER_READ applies from the next iteration on).
 * Loop thread.
 */
static inline void weft_read_meter_begin(weft_read_meter *m,
                                         const weft_channel *ch,
                                         uint64_t epoch) {
  if (m->epoch != epoch) {
    m->epoch = epoch;
    m->msgs = 0;
    m->bytes = 0;
    m->budget = weft_channel_read_budget(ch);
  }
}

/** Whether `m` spent its budget: as many reads or bytes as it allows. */
static inline bool weft_read_meter_exhausted(const weft_read_meter *m) {
  return m->msgs >= m->budget.max_messages || m->bytes >= m->budget.max_bytes;
}

/**
 * Counts one read of `bytes` by `ch` in iteration `epoch` against `m`
 * (starting the iteration first, weft_read_meter_begin); true when this
 * read spent the budget: the plugin then keeps what is left for the next
 * iteration. Two compares per read. Loop thread.
 */
static inline bool weft_read_meter_spend(weft_read_meter *m,
                                         const weft_channel *ch, uint64_t epoch,
                                         size_t bytes) {
  weft_read_meter_begin(m, ch, epoch);
  m->msgs++;
  m->bytes += bytes;
  return weft_read_meter_exhausted(m);
}

/** Whether the channel already spent its budget in iteration `epoch`
 *  (false in an iteration it has not read in yet). Loop thread. */
static inline bool weft_read_meter_spent(const weft_read_meter *m,
                                         uint64_t epoch) {
  return m->epoch == epoch && weft_read_meter_exhausted(m);
}

/**
 * Reports the outcome of connect: 0 makes the channel ACTIVE and fires
 * channel_active; an error fails the connect promise and closes the channel.
 */
void weft_channel_connected(weft_channel *ch, int status);

/**
 * Reports that the connection ended or broke: `err` 0 for an orderly end
 * (EOF), else the error, which is fired as exception_caught with `reason`
 * first. The channel then closes (queued writes fail with WEFT_ECLOSED).
 */
void weft_channel_transport_closed(weft_channel *ch, int err,
                                   const char *reason);

/**
 * Hands an accepted connection to the core, which picks the next loop
 * round-robin (the listener's own loop for a transport with
 * WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP), creates the channel there, runs the
 * server's initializer and the transport's adopt. Listener's loop thread.
 */
void weft_listener_accepted(weft_listener *l, intptr_t handle);

/** The loop a listener runs on, and its private pointer for the transport. */
weft_loop *weft_listener_loop(const weft_listener *l);
void *weft_listener_priv(const weft_listener *l);
void weft_listener_set_priv(weft_listener *l, void *priv);

/** Which of its server's listeners `l` is: 0 for the one on the server's
 *  address (loop 0), i for loop i's (WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP).
 *  Any thread. */
int weft_listener_index(const weft_listener *l);

/** A random number, never 0, fixed for `l`'s server: the same for all its
 *  listeners, another for another server (even on the same address, after
 *  a restart). Lets a transport's clients tell servers apart. Any thread. */
uint32_t weft_listener_server_id(const weft_listener *l);

/** How many listeners `l`'s server has: one per loop of its group with
 *  WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP, else 1. Any thread. */
int weft_listener_count(const weft_listener *l);

/** How many more connections `l`'s server admits now: max_connections
 *  less the accepted channels open, INT_MAX without a limit. A transport
 *  that holds connections before handing them over (UCX, until the
 *  client's HELLO) counts those against it too. Any thread. */
int weft_listener_room(const weft_listener *l);

/**
 * Copies the bound address of listener `i` of `l`'s server (as its
 * listen_address op wrote it at bind: "127.0.0.1:41234") into `buf` (`len`
 * bytes). Returns 0; WEFT_EAGAIN while that listener is not bound yet (a
 * server binds its loops one after the other, and listener 0 may accept
 * meanwhile); WEFT_EINVAL for an index out of range; WEFT_ENOSPC. Any
 * thread.
 */
int weft_listener_address_of(const weft_listener *l, int i, char *buf,
                             size_t len);

/* The outbound queue of a channel: buffers written and flushed, in order. */

/**
 * Fills up to `max` iovecs with the flushed, unsent bytes, from the first
 * unsent byte on, and returns how many were filled; `*bytes` gets their
 * total. Stops before a file region (WEFT_TRANSPORT_CAP_FILE_REGION): 0
 * iovecs with a region first means weft_outbound_file_region's turn.
 * Loop thread.
 */
int weft_outbound_iov(weft_channel *ch, struct iovec *iov, int max,
                      size_t *bytes);

/**
 * Number of flushed buffers not yet fully sent, and the i-th of them (its
 * readable bytes are what remains to send). For message transports, which
 * have no WEFT_TRANSPORT_CAP_FILE_REGION: their queue holds buffers only.
 */
size_t weft_outbound_count(const weft_channel *ch);
weft_buf *weft_outbound_buf(const weft_channel *ch, size_t i);

/**
 * Records that `bytes` more flushed bytes were handed to the wire: fully
 * sent buffers are released and their promises completed with 0, in order;
 * pending bytes and writability are updated. Loop thread.
 */
void weft_outbound_consumed(weft_channel *ch, size_t bytes);

/**
 * With WEFT_TRANSPORT_CAP_FILE_REGION: the first flushed file region with
 * bytes left, or NULL. When weft_outbound_iov filled no iovec, its bytes
 * are the next to send; when it filled some, the region follows them
 * (so more bytes follow those: tcp sends them with MSG_MORE). Its next
 * byte is at file offset position + transferred, and
 * weft_file_region_left bytes remain; the transport sends from there
 * (without moving the descriptor's offset) and reports what left with
 * weft_outbound_consumed, which advances `transferred`. One compare when
 * no region is queued. Loop thread.
 */
const weft_file_region *weft_outbound_file_region(const weft_channel *ch);

/**
 * The transport cannot send the region weft_outbound_file_region names
 * (the file ended before the region: `err` WEFT_EIO; or the send failed):
 * its write's promise fails with `err`, then the channel closes as
 * weft_channel_transport_closed(ch, err, reason) does (exception_caught
 * with `reason`, which the tail logs). The transport returns from its
 * flush after this (the channel is closing). Loop thread.
 */
void weft_outbound_file_region_failed(weft_channel *ch, int err,
                                      const char *reason);

/** True when nothing flushed is waiting to be sent. */
bool weft_outbound_is_empty(const weft_channel *ch);

/**
 * Records that `bytes` bytes the transport is about to report sent
 * (weft_outbound_consumed) still pin memory it holds: a zero-copy send's
 * buffers until the kernel's notification. Until weft_outbound_unpinned
 * they count as pending bytes (weft_channel_pending_bytes), so the write
 * watermarks (flow control) and the output limit bound them as they bound
 * queued bytes: a peer that never reads cannot make the transport pin more
 * than a queue could hold. Call it right before weft_outbound_consumed of
 * the same bytes, which then updates writability once. Loop thread.
 */
void weft_outbound_pinned(weft_channel *ch, size_t bytes);

/**
 * The transport no longer holds `bytes` of the bytes it pinned with
 * weft_outbound_pinned (their memory is released): pending bytes drop and
 * writability is updated (writability_changed may run handlers, which may
 * write and flush) unless the channel is closing. Also after the close: the
 * channel counts pinned bytes until the last is released. Loop thread.
 */
void weft_outbound_unpinned(weft_channel *ch, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_TRANSPORT_PLUGIN_H */
