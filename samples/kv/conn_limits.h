/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/conn_limits.h: what a KV connection may make the server hold
 * (conn_limits.c), for both protocols:
 *
 *  - before AUTH (a password is set and the connection has not
 *    authenticated), Redis' limits since CVE-2021-32675 and
 *    CVE-2025-21605: at most KV_UNAUTH_MAX_ARGS arguments of
 *    KV_UNAUTH_MAX_BULK bytes each, refused by the decoder before anything
 *    of the claimed size is allocated, KV_UNAUTH_OUTPUT_LIMIT bytes of
 *    replies queued unsent, and [kv] auth_timeout_ms to authenticate;
 *  - always, what partial commands hold (the decoders' cumulations, as
 *    weft_decoder_watch reports them): [kv] client_query_buffer_limit per
 *    connection (Redis' client-query-buffer-limit), [kv] query_buffers_max
 *    for the whole server, and [kv] command_timeout_ms for a command that
 *    does not complete. Past a bound the connection whose buffer grew is
 *    closed, with the reason logged (the decoder's exception).
 *
 * One kv_conn_limits per server, read by every loop; its counters are
 * atomic. */
#ifndef WEFT_SAMPLES_KV_CONN_LIMITS_H
#define WEFT_SAMPLES_KV_CONN_LIMITS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

/** Arguments (the command's name included) of a command before AUTH:
 *  Redis' limit for unauthenticated multibulk lengths. */
#define KV_UNAUTH_MAX_ARGS 10
/** Bytes of one argument before AUTH (Redis' 16 KiB). */
#define KV_UNAUTH_MAX_BULK 16384
/** Bytes of replies a connection may leave queued and unsent before AUTH
 *  (the NOAUTH replies to a client that sends and never reads). */
#define KV_UNAUTH_OUTPUT_LIMIT 65536

/** The server's limits and the counters of what they hold. */
typedef struct kv_conn_limits {
  /* settings, fixed at start */
  uint64_t auth_timeout_ns;    /* [kv] auth_timeout_ms; 0 = none */
  uint64_t command_timeout_ns; /* [kv] command_timeout_ms; 0 = none */
  size_t client_query_max;     /* [kv] client_query_buffer_limit, bytes */
  size_t query_max;            /* [kv] query_buffers_max, bytes; 0 = none */
  int64_t output_limit;        /* [server] output_limit, restored at AUTH */
  weft_resp_options resp, resp_unauth;    /* the RESP decoder's */
  weft_rpc_codec_options rpc, rpc_unauth; /* the RPC codec's */
  /* counters, any thread */
  _Atomic size_t query_bytes;      /* memory of every partial command now */
  _Atomic uint64_t query_closed;   /* connections closed by the two above */
  _Atomic uint64_t auth_timeouts;  /* closed by auth_timeout_ms */
  weft_log_limit auth_timeout_log; /* their lines: one a second */
} kv_conn_limits;

/**
 * The default of [kv] client_query_buffer_limit for a largest value of
 * `max_value_bytes`: twice the largest command (value + 128 KiB), since a
 * cumulation that grows by doubling may hold that much for one command.
 */
size_t kv_client_query_default(size_t max_value_bytes);

/**
 * Fills `l` from the settings: the decoders' options for a largest value
 * of `max_value_bytes` (and their unauthenticated variants), the timeouts
 * in ms, the query buffer bounds in bytes (a client limit of 0 takes
 * kv_client_query_default) and [server] output_limit. Counters start at 0.
 */
void kv_conn_limits_init(kv_conn_limits *l, size_t max_value_bytes,
                         uint64_t auth_timeout_ms, uint64_t command_timeout_ms,
                         size_t client_query_max, size_t query_max,
                         int64_t output_limit);

/**
 * Puts the query buffer watch and the command timeout on the decoder named
 * `decoder` of channel `ch` (after the protocol's channel init added it).
 * Returns 0, or WEFT_ENOENT when it is not there. Loop thread.
 */
int kv_conn_limits_watch(kv_conn_limits *l, weft_channel *ch,
                         const char *decoder);

/**
 * The connection of channel `ch` starts unauthenticated: the small output
 * limit. (Its decoder was added with the unauthenticated options.) Loop
 * thread.
 */
void kv_conn_limits_unauthenticated(const kv_conn_limits *l, weft_channel *ch);

/**
 * The connection of channel `ch` authenticated: its decoder (`rpc`: the
 * RPC codec "rpc", else the RESP decoder "resp") takes the full limits
 * from its next message, and its output limit is [server] output_limit
 * again. Loop thread.
 */
void kv_conn_limits_authenticated(const kv_conn_limits *l, weft_channel *ch,
                                  bool rpc);

#endif
