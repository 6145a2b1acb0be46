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

/* ---- the work budget of a connection per turn of its loop ----
 *
 * One read may hold a thousand pipelined commands, and a command may cost
 * milliseconds (KEYS over a million keys: about 20; each is bounded, a
 * read's batch is not): run all at once, they held the loop, every other
 * client on it and new connections on the listener's loop for 20 s
 * (issue 27). So a connection runs at most KV_TURN_COMMANDS commands or
 * KV_TURN_NS of them per turn (a read's batch up to its
 * channel_read_complete, or what follows a resume), then yields the loop
 * (weft_channel_yield_read): the decoder stops and keeps the rest, and all
 * goes on at the next turn, in order, once the loop's other channels were
 * served. RESP (resp_server.c) and weft RPC (rpc_server.c) both. The time
 * is read on the coarse clock, as the session's (kv_session_now_ns: a vDSO
 * read without the TSC, a few ns; its tick is 1-4 ms): a turn ends within
 * a tick past the budget, plus its last command. */

/** Commands one connection runs per turn of its loop, at most. */
#define KV_TURN_COMMANDS 256
/** ns of commands one connection runs per turn, at most (coarse clock). */
#define KV_TURN_NS (2 * 1000000ull)

/** A connection's budget in the current turn (zeroed: a new turn). */
typedef struct kv_turn {
  uint32_t cmds;     /* commands run since it began */
  uint64_t start_ns; /* kv_session_now_ns at its first command, 0 = none */
} kv_turn;

/** Before a command of the budget runs: the turn's clock starts with its
 *  first (from the end of the first, a turn ran two KEYS of 20 ms, not
 *  one). */
void kv_turn_start(kv_turn *t);

/** Counts one command run; true when the turn's budget is spent (the
 *  caller yields). */
bool kv_turn_spent(kv_turn *t);

/** A new turn. */
static inline void kv_turn_reset(kv_turn *t) { *t = (kv_turn){0}; }

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
