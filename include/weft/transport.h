/* weft/transport.h: the transport plugin interface, and endpoint URIs.
 *
 * A transport moves a channel's bytes: "tcp" (epoll), "uring" (io_uring),
 * "verbs" (ibverbs RC), "ucx" (UCP). Each is one const weft_transport_ops,
 * registered by name; the core (channel, pipeline, bootstrap) never names a
 * transport, it tests capability flags. Three levels, as in Mercury's NA:
 *
 *   process   probe: can this transport run here at all?
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
 * Threads: every op runs on the loop thread the object belongs to; probe
 * runs on any thread, once per process (the answer is cached).
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/** A parsed endpoint URI: "scheme://host:port". */
typedef struct weft_endpoint {
  char transport[16]; /* the scheme: "tcp", "uring", "verbs", "ucx" */
  char host[256];     /* name or address, IPv6 without brackets */
  uint16_t port;      /* 0 = any (listen only) */
} weft_endpoint;

/**
 * Parses "scheme://host:port" ("tcp://127.0.0.1:7000",
 * "uring://[::1]:7000", "tcp://localhost:0") into `*out`. Returns 0 or
 * WEFT_EINVAL; then `err` (if not NULL) holds a message naming the expected
 * form. The scheme is not checked against the registry here.
 */
int weft_endpoint_parse(const char *uri, weft_endpoint *out, char *err,
                        size_t err_len);

/** Formats an endpoint back into "scheme://host:port" (IPv6 bracketed). */
int weft_endpoint_format(const weft_endpoint *ep, char *buf, size_t len);

/* ---- helpers for plugins: socket addresses ---- */

struct addrinfo; /* <netdb.h>; free what weft_endpoint_resolve returns with
                    freeaddrinfo() */

/**
 * Resolves `ep`'s host and port into a list of stream socket addresses
 * (SOCK_STREAM, any family) for a transport's listen (`passive` true) or
 * connect (`passive` false). An empty host means the wildcard address when
 * passive and the loopback address otherwise.
 *
 * A numeric host ("127.0.0.1", "::1", "fe80::1%eth0") is tried first
 * (AI_NUMERICHOST) and never blocks. Any other host goes through the system
 * resolver with AI_ADDRCONFIG (a host with non-loopback addresses of one
 * family only gets addresses of that family), which BLOCKS the calling
 * thread: fine for "localhost" and /etc/hosts names; resolve real DNS
 * names elsewhere, off the loop thread.
 *
 * On success `*out` holds at least one address, in the resolver's order of
 * preference; the caller owns the list and frees it with freeaddrinfo().
 * On failure `*out` is untouched. Any thread.
 *
 * Returns 0, or the resolver's error converted: WEFT_EADDRNOTAVAIL (no such
 * host, or no address of a usable family), WEFT_EAGAIN (temporary resolver
 * failure, e.g. the DNS server did not answer), WEFT_ENOMEM,
 * WEFT_EAFNOSUPPORT, a system error (-errno) when the resolver failed in a
 * system call, WEFT_EINVAL for anything else.
 */
int weft_endpoint_resolve(const weft_endpoint *ep, bool passive,
                          struct addrinfo **out);

/**
 * As weft_endpoint_resolve, keeping only the first (most preferred)
 * address: copies it into `*out` (the bytes past its length are zeroed)
 * and its length in bytes into `*out_len` if `out_len` is not NULL. For
 * transports whose library takes one address (rdma_cm, UCX). Blocks on
 * names, as weft_endpoint_resolve; any thread. Same errors; on failure
 * `*out` and `*out_len` are untouched.
 */
int weft_endpoint_resolve_first(const weft_endpoint *ep, bool passive,
                                struct sockaddr_storage *out,
                                socklen_t *out_len);

/**
 * Formats an IPv4 or IPv6 socket address as text, "127.0.0.1:41234" or
 * "[::1]:41234" (the port in decimal), into `buf` of `len` bytes,
 * NUL-terminated. Meant for a transport's listen_address, remote_address
 * and local_address. Never blocks; any thread.
 *
 * Returns 0, WEFT_ENOTCONN when `sa` is NULL (a library reports no address
 * yet, as rdma_get_peer_addr before the connection), WEFT_EAFNOSUPPORT for
 * another family (`buf` untouched), or WEFT_ENOSPC when the text does not
 * fit (`buf` then holds as much as fits, NUL-terminated, if `len` > 0).
 */
int weft_sockaddr_format(const struct sockaddr *sa, char *buf, size_t len);

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

typedef struct weft_listener weft_listener;

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

  /** Creates the per-loop instance (and registers its sources). */
  int (*loop_init)(weft_loop *loop, void **loop_state);
  /** Destroys it; every channel of this transport on the loop is closed. */
  void (*loop_fini)(weft_loop *loop, void *loop_state);

  /**
   * Starts listening on `ep`; accepted connections are handed to
   * weft_listener_accepted(). Runs on the listener's loop.
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
} weft_transport_ops;

/**
 * Registers a transport under ops->name. The built-in ones register
 * themselves on first use of the registry. Returns 0, WEFT_EEXIST or
 * WEFT_ENOSPC (at most 16). Any thread, before the name is used.
 */
int weft_transport_register(const weft_transport_ops *ops);

/**
 * The transport named `name`, or NULL; with NULL, `why` (if not NULL) says
 * whether it is unknown (listing the registered names) or cannot run here
 * (the probe's reason). Any thread.
 */
const weft_transport_ops *weft_transport_find(const char *name, char *why,
                                              size_t why_len);

/**
 * The per-loop instance of `ops` on `loop`, created on first use with
 * ops->loop_init (and destroyed by a close hook when the loop stops).
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
 * round-robin (the listener's own loop after
 * weft_listener_set_accept_local), creates the channel there, runs the
 * server's initializer and the transport's adopt. Listener's loop thread.
 */
void weft_listener_accepted(weft_listener *l, intptr_t handle);

/**
 * Keeps every connection `l` accepts from now on on the listener's own loop
 * instead of spreading them over the group. For a transport whose library
 * cannot move an accepted connection to another thread safely (UCX before
 * 1.18: docs/ucx.md). Call from the plugin's listen op; listener's loop
 * thread.
 */
void weft_listener_set_accept_local(weft_listener *l, bool on);

/** The loop a listener runs on, and its private pointer for the transport. */
weft_loop *weft_listener_loop(const weft_listener *l);
void *weft_listener_priv(const weft_listener *l);
void weft_listener_set_priv(weft_listener *l, void *priv);

/* The outbound queue of a channel: buffers written and flushed, in order. */

/**
 * Fills up to `max` iovecs with the flushed, unsent bytes, from the first
 * unsent byte on, and returns how many were filled; `*bytes` gets their
 * total. Loop thread.
 */
int weft_outbound_iov(weft_channel *ch, struct iovec *iov, int max,
                      size_t *bytes);

/**
 * Number of flushed buffers not yet fully sent, and the i-th of them (its
 * readable bytes are what remains to send). For message transports.
 */
size_t weft_outbound_count(const weft_channel *ch);
weft_buf *weft_outbound_buf(const weft_channel *ch, size_t i);

/**
 * Records that `bytes` more flushed bytes were handed to the wire: fully
 * sent buffers are released and their promises completed with 0, in order;
 * pending bytes and writability are updated. Loop thread.
 */
void weft_outbound_consumed(weft_channel *ch, size_t bytes);

/** True when nothing flushed is waiting to be sent. */
bool weft_outbound_is_empty(const weft_channel *ch);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_TRANSPORT_H */
