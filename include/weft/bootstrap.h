/* SPDX-License-Identifier: Apache-2.0 */
/* weft/bootstrap.h: starting servers and clients (Netty's ServerBootstrap
 * and Bootstrap).
 *
 *   weft_server_bootstrap sb = {.group = group,
 *                               .listen = "tcp://0.0.0.0:7000",
 *                               .child_init = build_pipeline};
 *   weft_channel_config_init(&sb.child_options);
 *   weft_server *srv;
 *   int rc = weft_server_bind(&srv, &sb);
 *
 * The transport is the endpoint's scheme, so swapping it is a change of the
 * URI (or of one line in a config file, see config.h), never of code. A
 * program whose endpoint comes from its configuration parses it once
 * (weft_config_endpoint_parse) and passes the parsed weft_endpoint to
 * weft_server_bind_endpoint / weft_bootstrap_connect_endpoint; the
 * URI-taking forms are those plus weft_endpoint_parse.
 */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include <stdint.h>

#include <weft/channel.h>
#include <weft/endpoint.h>
#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Builds a new channel's pipeline (add the handlers here). Runs on the
 * channel's loop before channel_active.
 */
typedef void (*weft_channel_init_cb)(weft_channel *ch, void *arg);

/** Options applied to a new channel; -1 keeps the default. */
typedef struct weft_channel_config {
  int tcp_nodelay;              /* 0/1 (default 1) */
  int so_sndbuf;                /* bytes */
  int so_rcvbuf;                /* bytes */
  int so_keepalive;             /* 0/1 (default 0) */
  int64_t write_low_watermark;  /* bytes (default 32 KiB) */
  int64_t write_high_watermark; /* bytes (default 64 KiB) */
  int connect_timeout_ms;       /* ms (default 10000); 0 = none */
  int flow_control;             /* 0/1 (default 0; a server's children 1) */
  int64_t output_limit;         /* bytes queued unsent before the channel
                                   is closed (default 0 = none; a server's
                                   children WEFT_SERVER_OUTPUT_LIMIT) */
  int idle_timeout_ms;          /* ms without a read before the channel is
                                   closed (default 0 = never) */
  int max_messages_per_read;    /* reads per loop iteration before the
                                   channel yields (default 16) */
  int64_t max_bytes_per_read;   /* bytes per loop iteration before the
                                   channel yields (default 256 KiB) */
} weft_channel_config;

/**
 * The output limit of a server's channels unless the application sets one
 * (child_options.output_limit, or [server] output_limit): 64 MiB, so that a
 * handler that writes without looking at writability, facing a peer that
 * never reads, loses that connection instead of the process' memory (Redis'
 * client-output-buffer-limit, whose normal-client default is none; its
 * pubsub class's hard limit is 32 MiB). Flow control keeps a well-behaved
 * server's connections near the 64 KiB high watermark, far below it.
 */
#define WEFT_SERVER_OUTPUT_LIMIT (64 * 1024 * 1024)

/** Sets every field to -1 (the defaults). */
void weft_channel_config_init(weft_channel_config *cfg);

/**
 * Applies every field that is not -1 to `ch`. Options the transport does
 * not have are skipped. Returns 0 or the first error. Loop thread.
 */
int weft_channel_config_apply(const weft_channel_config *cfg, weft_channel *ch);

/** A bound server: its listener(s) and channels (opaque). */
typedef struct weft_server weft_server;

/** What a server needs. Fields not set must be zero / NULL. */
typedef struct weft_server_bootstrap {
  weft_loop_group *group; /* started; loop 0 runs the listener, accepted
                             channels go to the loops round-robin (ucx
                             listens on every loop and spreads them in its
                             handshake: docs/transports/ucx.md) */
  const char *listen;     /* endpoint URI, e.g. "tcp://0.0.0.0:7000"
                             (weft_server_bind; weft_server_bind_endpoint
                             takes a parsed one instead) */
  int backlog;            /* listen backlog (0 = 511) */
  weft_channel_init_cb child_init;   /* required */
  void *child_init_arg;              /* child_init's argument */
  weft_channel_config child_options; /* set with weft_channel_config_init
                                        first: zero is a real value; flow
                                        control defaults to on here */
  int max_connections;        /* accepted channels open at once; past it a new
                                 connection is accepted and closed (0 = none) */
  const char *reject_message; /* bytes written to a connection refused by
                                 max_connections before it is closed
                                 (Redis: "-ERR max number of clients
                                 reached\r\n"); NULL = close at once */
  weft_channel_init_cb reject_init; /* with a reject_message: builds the
                                 front of a refused connection's pipeline
                                 (called with child_init_arg, on its loop),
                                 before the handler that writes the message
                                 goes last. A TLS server adds its TLS
                                 handler here (weft_tls_add_first), so the
                                 message goes out encrypted once the
                                 handshake completed. Closing the channel
                                 there gives up on the message. NULL = the
                                 message alone */
} weft_server_bootstrap;

/**
 * Starts listening and waits until the listener is up (or failed). Returns
 * 0 and the server in `*out`, WEFT_EINVAL (bad URI), WEFT_ENOTRANSPORT
 * (unknown or unavailable transport), WEFT_ENOTSUP (the transport cannot
 * listen), WEFT_ENOMEM, or the listen error (WEFT_EADDRINUSE, ...); every
 * failure but ENOMEM is logged once here with its cause, so callers need
 * not log it again. Any thread except a loop thread of
 * `group` (it waits for loop 0).
 */
int weft_server_bind(weft_server **out, const weft_server_bootstrap *b);

/**
 * As weft_server_bind, on an endpoint already parsed (`ep`, say from
 * weft_config_endpoint_parse): `b->listen` is not read. The form to use
 * when the endpoint came from a configuration or was built in code, so
 * that it is not formatted into a URI only to be parsed back. weft_server_bind
 * is this function after weft_endpoint_parse of `b->listen`. `ep` is copied;
 * the caller keeps it. Same errors (WEFT_EINVAL also for a NULL `ep`), same
 * thread rules.
 */
int weft_server_bind_endpoint(weft_server **out, const weft_server_bootstrap *b,
                              const weft_endpoint *ep);

/**
 * Channels the server accepted that are still open (those refused by
 * max_connections do not count). Any thread.
 */
int weft_server_connections(const weft_server *srv);

/**
 * Writes the bound address as a URI ("tcp://127.0.0.1:41234": the real
 * port when the URI asked for port 0). Returns 0 or WEFT_ENOSPC. Any thread.
 */
int weft_server_address(const weft_server *srv, char *buf, size_t len);

/**
 * Stops listening, waits until the listener is closed, and frees the
 * server. Channels already accepted stay open (close them, or stop the
 * group). Any thread except a loop thread of the server's group.
 */
void weft_server_close(weft_server *srv);

/**
 * Reports the outcome of a connect, on the channel's loop: `status` 0 with
 * an ACTIVE channel, or an error (WEFT_ECONNREFUSED, WEFT_ETIMEDOUT, ...)
 * with the channel already closing (do not use it after the callback
 * returns unless retained). `ch` is NULL when the channel could not even be
 * created (the transport's per-loop instance failed to start).
 */
typedef void (*weft_connect_cb)(weft_channel *ch, int status, void *arg);

/** What a client connection needs. Fields not set must be zero / NULL. */
typedef struct weft_bootstrap {
  weft_loop_group *group;      /* started; the channel goes to the next loop */
  weft_loop *loop;             /* or a specific loop (overrides group) */
  const char *connect;         /* endpoint URI, e.g. "tcp://127.0.0.1:7000"
                                  (weft_bootstrap_connect; the _endpoint
                                  form takes a parsed one instead) */
  weft_channel_init_cb init;   /* required */
  void *init_arg;              /* init's argument */
  weft_channel_config options; /* weft_channel_config_init first */
  weft_connect_cb on_connect;  /* optional */
  void *connect_arg;           /* on_connect's argument */
} weft_bootstrap;

/**
 * Starts a connection. Returns 0 when started (on_connect reports the
 * outcome later, on the channel's loop), or at once WEFT_EINVAL (bad URI),
 * WEFT_ENOTRANSPORT (logged with why) or WEFT_ENOMEM, in which case
 * on_connect is not called. Any thread.
 */
int weft_bootstrap_connect(const weft_bootstrap *b);

/**
 * As weft_bootstrap_connect, to an endpoint already parsed (`ep`):
 * `b->connect` is not read. weft_bootstrap_connect is this function after
 * weft_endpoint_parse of `b->connect`. `ep` is copied; the caller keeps it.
 * Same errors (WEFT_EINVAL also for a NULL `ep`); any thread.
 */
int weft_bootstrap_connect_endpoint(const weft_bootstrap *b,
                                    const weft_endpoint *ep);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_BOOTSTRAP_H */
