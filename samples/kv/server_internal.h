/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/server_internal.h: what the server's files share: the server
 * itself (server.c: options, start and stop), the channel setup of each
 * protocol, resp_server.c (RESP) and rpc_server.c (weft RPC), and the TLS
 * listeners' context and pipelines (server_tls.c). */
#ifndef WEFT_SAMPLES_KV_SERVER_INTERNAL_H
#define WEFT_SAMPLES_KV_SERVER_INTERNAL_H

#include <weft/weft.h>

#include "command.h"
#include "conn_limits.h"
#include "server.h"

/** Arguments of one RPC command: the codec's limit and the argv array's
 *  (on the stack). */
#define KV_MAX_ARGS 1024
/** Arguments of one RESP command, its name included: Redis' limit (1024 *
 *  1024 elements of a multibulk). The command's bytes are bounded too
 *  (kv_conn_limits_init), so the bytes of a command bound its arguments. */
#define KV_RESP_MAX_ARGS (1024u * 1024u)

struct kv_server {
  weft_loop_group *group;
  kv_shared shared; /* the store, passwords, counters (command.h) */
  kv_server_options opts;
  weft_server *rpc, *resp;
  weft_server *tls_resp, *tls_rpc; /* the TLS listeners, or NULL */
  weft_tls_context *tls;           /* theirs (server_tls.c), or NULL */
  weft_rpc_method methods[KV_CMD_COUNT_ - 1];
  size_t n_methods;
  kv_conn_limits limits;   /* the decoders' options, what connections hold */
  weft_timer expire_timer; /* on loop 0 */
  char transport[16];      /* [transport] name, for INFO */
  weft_log_limit tls_fail_log; /* failed TLS handshakes' lines: 1 a second */
};

/** The child_init of the RESP listener (resp_server.c). */
void kv_resp_channel_init(weft_channel *ch, void *arg);

/** Fills srv->methods with one method per command the binary protocol
 *  serves (rpc_server.c). */
void kv_rpc_methods_init(kv_server *srv);

/** The child_init of the RPC listener (rpc_server.c). */
void kv_rpc_channel_init(weft_channel *ch, void *arg);

/**
 * Makes srv->tls from srv->opts.tls when a TLS listener is set (nothing
 * otherwise). Returns 0, or WEFT_EINVAL / WEFT_ENOMEM after logging what
 * is wrong in [kv] keys' words (server_tls.c).
 */
int kv_tls_context_init(kv_server *srv);

/** The child_init of tls_listen: the TLS handler, then RESP's. */
void kv_resp_tls_channel_init(weft_channel *ch, void *arg);

/** The child_init of tls_rpc_listen: the TLS handler, then RPC's. */
void kv_rpc_tls_channel_init(weft_channel *ch, void *arg);

/** The reject_init of the TLS listeners (weft_server_bootstrap): the TLS
 *  handler, so the reject message goes out encrypted. */
void kv_tls_reject_init(weft_channel *ch, void *arg);

#endif
