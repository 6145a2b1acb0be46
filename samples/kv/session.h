/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/session.h: one client connection's state, for both protocols
 * (session.c): its id and addresses, the RESP version its replies use
 * (HELLO), whether it is authenticated and as whom (AUTH), its name
 * (CLIENT SETNAME), its MULTI queue, and whether it asked to close (QUIT)
 * or protected mode refused it. The RESP handler holds one per channel;
 * the RPC pipeline keeps one in the channel's user data. A session lives
 * on its channel's loop thread. */
#ifndef WEFT_SAMPLES_KV_SESSION_H
#define WEFT_SAMPLES_KV_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/channel.h>
#include <weft/timer.h>

#include "command.h"
#include "multi.h"
#include "watch.h"

/** Longest client name (CLIENT SETNAME, HELLO SETNAME), bytes. */
#define KV_CLIENT_NAME_MAX 256
/** Longest address text kept ("[ffff:...]:65535"). */
#define KV_ADDR_MAX 64

struct kv_session {
  kv_shared *shared;
  uint64_t id;              /* CLIENT ID */
  unsigned loop_index;      /* its loop in the group: kv_shared.loops */
  uint8_t resp;             /* 2 or 3: the RESP version of replies (HELLO) */
  bool rpc;                 /* speaks the binary protocol */
  bool authenticated;       /* may run every command */
  bool acl_user;            /* authenticated as [kv] user (else "default") */
  bool denied;              /* refused by protected mode: runs nothing */
  bool quit;                /* QUIT: close once the reply is sent */
  bool in_exec;             /* EXEC is running the queue */
  bool asking;              /* ASKING: the next command (or transaction) may
                               use a slot being imported (cluster.c) */
  _Atomic int last_cmd;     /* kv_cmd of the last command (CLIENT INFO,
                               LIST: other loops read it, relaxed) */
  uint64_t created_ns;      /* kv_session_now_ns(): CLIENT INFO's age */
  _Atomic uint64_t last_ns; /* and of the last command: idle (relaxed) */
  char addr[KV_ADDR_MAX], laddr[KV_ADDR_MAX];
  char name[KV_CLIENT_NAME_MAX + 1];            /* written under clients_lock */
  struct kv_session *prev_client, *next_client; /* kv_shared.clients */
  kv_multi multi;
  kv_watch watch;        /* WATCH's keys (watch.h) */
  weft_channel *channel; /* the connection's (borrowed: it outlives us) */
  weft_timer auth_timer; /* [kv] auth_timeout_ms while unauthenticated */

  /* MIGRATE (migrate.h) */
  bool blocked; /* it waits on its target: the protocol runs none of the
                   connection's next commands, and reads no more, until
                   resume */
  struct kv_migrate *migrate;    /* that MIGRATE, or NULL */
  void (*resume)(kv_session *s); /* set by the protocol: blocked ended and
                                    the reply is written; run what waits
                                    and flush. Loop thread. */
  struct kv_keys_job *keys_job;  /* a KEYS taking steps (cmd_keyspace.c),
                                    blocked meanwhile, or NULL */
};

/**
 * The session is closing: a KEYS taking steps for it ends without a reply
 * (its task frees it). Loop thread.
 */
void kv_keys_detach(kv_session *s);

/**
 * Starts a session for channel `ch` (loop thread): a new id, the
 * addresses, authenticated when the default user needs no password, and
 * denied when protected mode refuses the peer (server.h: no password and
 * an address outside the loopback network), which is then counted and
 * logged. Counts a connection. One that starts unauthenticated gets the
 * small output limit and the deadline of [kv] auth_timeout_ms
 * (conn_limits.h): past it the channel is closed, with a log line.
 */
void kv_session_init(kv_session *s, kv_shared *shared, weft_channel *ch,
                     bool rpc);

/**
 * The clock of a session's age and idle time (CLIENT INFO), in
 * ns: CLOCK_MONOTONIC_COARSE, whose resolution (a scheduler tick, 1-10 ms)
 * is far below the seconds those fields show, and which the vDSO returns
 * without reading the TSC: it is read once per command (kv_command_run),
 * where weft_now_ns() cost 3% of the server's CPU at redis-benchmark
 * -P 16. Any thread.
 */
uint64_t kv_session_now_ns(void);

/**
 * The session just authenticated (AUTH, HELLO AUTH): the limits for
 * connections that have not (conn_limits.h) are lifted and the
 * authentication deadline stopped. In session.c.
 */
void kv_session_authenticated(kv_session *s);

/** Ends a session: frees its MULTI queue and WATCHed keys, takes it off
 *  the list CLIENT LIST shows, counts the connection closed. */
void kv_session_fini(kv_session *s);

/**
 * Marks the session's transaction, if one is being queued, as failed: EXEC
 * will discard it with EXECABORT. For a command refused before the
 * executor saw it (RESP's unknown command). In multi.c.
 */
void kv_multi_flag(kv_session *s);

/**
 * Sets the client's name (CLIENT SETNAME, HELLO SETNAME) under Redis'
 * rule: printable ASCII without spaces; and weft's bound, at most
 * KV_CLIENT_NAME_MAX bytes. Empty clears it. Returns NULL, or the error
 * reply's text (then the name is unchanged).
 */
const char *kv_session_set_name(kv_session *s, const kv_arg *name);

/** Puts `s` on the server's list of sessions (CLIENT LIST, KILL); in
 *  client_list.c. Its loop thread. */
void kv_client_register(kv_session *s);

/** Takes `s` off that list. Its loop thread. */
void kv_client_unregister(kv_session *s);

/**
 * True when `addr` ("127.0.0.1:6380", "[::1]:7001", as
 * weft_channel_remote_address writes them) is on the loopback network:
 * 127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104.
 */
bool kv_addr_is_loopback(const char *addr);

#endif
