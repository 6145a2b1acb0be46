/* SPDX-License-Identifier: Apache-2.0 */
/* weft/endpoint.h: endpoint URIs and socket addresses, as applications
 * use them.
 *
 * An endpoint names a transport and an address in one text,
 * "scheme://host:port": "tcp://0.0.0.0:7000", "uring://[::1]:7000",
 * "ucx://10.0.0.1:7000", "verbs://10.0.0.1:7000". The scheme is the
 * transport's registered name, so swapping the transport is a change of the
 * URI (or of one line of configuration, config.h), never of code.
 *
 * Writing a transport? Its side of the contract is weft/transport_plugin.h,
 * which weft.h does not include.
 */
#ifndef WEFT_ENDPOINT_H
#define WEFT_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

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
 * Checks that the transport `name` ("tcp", "uring", "ucx", "verbs") is
 * registered and can run on this host. Returns true, or false with a
 * sentence in `why` (if not NULL) saying whether the name is unknown (and
 * which are registered) or what stops it here and what to do (the
 * transport's probe, run once per process and cached). A transport
 * configured with a fallback (`[transport.<name>] fallback`) is available
 * when its fallback is. Any thread.
 */
bool weft_transport_available(const char *name, char *why, size_t why_len);

/**
 * True if the transport `name` is available here and is TCP on the wire
 * (tcp, uring): clients that speak plain TCP, such as redis-cli or curl,
 * can connect to its listeners. False for message transports (ucx, verbs)
 * and for unknown or unavailable names. Any thread.
 */
bool weft_transport_speaks_tcp(const char *name);

/* What an endpoint's transport offers, as weft_endpoint_caps reports it:
 * the application's questions, asked of the parsed endpoint rather than of
 * its text or its transport's name. */
/** The transport is registered and can run here (its probe passed, or the
 *  fallback's: weft_transport_available). Without it no other bit is set. */
#define WEFT_ENDPOINT_AVAILABLE 0x1u
/** TCP on the wire (tcp, uring): clients that speak plain TCP, such as
 *  redis-cli or curl, can connect to its listeners. */
#define WEFT_ENDPOINT_TCP 0x2u
/** A byte stream (tcp, uring): a write may arrive split or merged with
 *  others, so a protocol frames its messages; without it (ucx, verbs) each
 *  write arrives as one message. */
#define WEFT_ENDPOINT_STREAM 0x4u
/** Half-close: weft_channel_shutdown_output sends an end of stream while
 *  the channel still reads (tcp, uring). */
#define WEFT_ENDPOINT_HALF_CLOSE 0x8u

/**
 * What the transport of `ep` offers here: WEFT_ENDPOINT_* bits, 0 when
 * `ep` is NULL or its transport is unknown or cannot run on this host (the
 * reason is then in `why`, if not NULL, as weft_transport_available words
 * it). One registry lookup; the transport's probe runs once per process
 * and is cached, and a configured fallback answers for a transport that
 * cannot run, as the bootstraps use it. TLS (weft/tls.h) runs over every
 * transport, so it has no bit. Any thread.
 */
uint32_t weft_endpoint_caps(const weft_endpoint *ep, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_ENDPOINT_H */
