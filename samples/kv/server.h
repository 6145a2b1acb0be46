/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/server.h: the KV service, embeddable (the weft-kv-server
 * program, the tests and the benchmarks start it through this).
 *
 * One store (store.h) shared by every loop, served over two protocols at
 * once: weft's binary RPC (proto.h) on any transport, and RESP (Redis
 * protocol) on the TCP transports, so redis-cli and redis-benchmark work
 * unchanged.
 */
#ifndef WEFT_SAMPLES_KV_SERVER_H
#define WEFT_SAMPLES_KV_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/config.h>
#include <weft/loop.h>
#include <weft/tls.h>

#include "auth.h"
#include "cluster.h"
#include "store.h"

/** Longest password a setting holds, bytes with the NUL. */
#define KV_PASSWORD_MAX 1024

/** Server settings: the [kv] section of the config file. */
typedef struct kv_server_options {
  char rpc_listen[WEFT_CONFIG_URI_MAX];  /* binary RPC endpoint; "" = off
                                            (default "127.0.0.1:7001") */
  char resp_listen[WEFT_CONFIG_URI_MAX]; /* RESP endpoint; "" = off
                                            (default "127.0.0.1:6380") */
  size_t max_value_bytes; /* largest value, bytes (default 1 MiB) */
  unsigned stripes;       /* lock stripes of the store (default 64) */
  unsigned expire_hz;     /* active expiry passes per second per loop
                             (default 10) */
  char requirepass[KV_PASSWORD_MAX];   /* the default user's password; ""
                                          = none (default) */
  char user[KV_USER_MAX + 1];          /* the ACL user's name, "" = none */
  char user_password[KV_PASSWORD_MAX]; /* its password */
  bool protected_mode; /* without requirepass, refuse clients from outside
                          the loopback network (default true) */
  char tls_listen[WEFT_CONFIG_URI_MAX];     /* RESP over TLS (Redis'
                                               tls-port); "" = off (default) */
  char tls_rpc_listen[WEFT_CONFIG_URI_MAX]; /* weft RPC over TLS; "" = off
                                               (default) */
  weft_tls_options tls;       /* the TLS listeners' context: [kv] tls_cert_file,
                                 tls_key_file, tls_ca_cert_file, tls_ca_cert_dir,
                                 tls_auth_clients (verify: REQUIRED by default, as
                                 Redis' tls-auth-clients yes), tls_min_protocol,
                                 tls_handshake_timeout_ms, tls_ktls */
  kv_cluster_options cluster; /* the [cluster] section (cluster.h):
                                 cluster mode, this node, the slot map */
  unsigned long auth_timeout_ms;           /* a connection that starts
                                              unauthenticated is closed if it has
                                              not authenticated by then; 0 = never
                                              (default 10000) */
  unsigned long command_timeout_ms;        /* a command not complete this long
                                              after its first bytes closes its
                                              connection; 0 = never (default
                                              30000) */
  unsigned long client_query_buffer_limit; /* bytes a connection's partial input
                                       may hold; 0 (default) = twice the
                                       largest command (conn_limits.h) */
  unsigned long query_buffers_max;         /* bytes all partial input may hold
                                               together; 0 = no bound (default
                                               256 MiB) */
  char tls_client_cert_file[WEFT_TLS_PATH_MAX]; /* MIGRATE's client
                                    certificate over TLS (Redis'
                                    tls-client-cert-file); "" = tls_cert_file */
  char tls_client_key_file[WEFT_TLS_PATH_MAX];  /* its key; "" = in the
                                                   certificate's file */
  bool migrate_any_host;           /* MIGRATE may reach any numeric address, not
                                      only the [cluster] node lines (default
                                      false) */
  unsigned migrate_timeout_max_ms; /* MIGRATE's timeout is clamped to this,
                                      ms (default KV_MIGRATE_TIMEOUT_MAX_MS) */
  int shutdown_command;            /* who may SHUTDOWN: kv_shutdown_policy
                                      (default KV_SHUTDOWN_LOCAL) */
  void (*shutdown)(void *arg);     /* what an accepted SHUTDOWN calls, on a
                                      loop thread, to stop the process
                                      (weft-kv-server: SIGTERM to itself);
                                      it must not block. NULL (default) =
                                      SHUTDOWN is refused: an embedding
                                      program decides how it stops */
  void *shutdown_arg;
} kv_server_options;

/** [kv] shutdown_command: who may stop the server with SHUTDOWN (an
 *  authenticated client always; Redis allows any, or none once the
 *  command is renamed away). */
typedef enum kv_shutdown_policy {
  KV_SHUTDOWN_NO = 0,    /* "no": refused to everyone */
  KV_SHUTDOWN_LOCAL = 1, /* "local": clients on the loopback network */
  KV_SHUTDOWN_YES = 2    /* "yes": any authenticated client, as Redis */
} kv_shutdown_policy;

/** [kv] migrate_timeout_max_ms's default, ms: a target silent this long
 *  is taken for dead (MIGRATE's client waits no longer). */
#define KV_MIGRATE_TIMEOUT_MAX_MS 10000

/** The listeners kv_server_address names. */
enum kv_listener {
  KV_LISTENER_RPC = 0,     /* [kv] rpc_listen */
  KV_LISTENER_RESP = 1,    /* [kv] resp_listen */
  KV_LISTENER_TLS = 2,     /* [kv] tls_listen: RESP over TLS */
  KV_LISTENER_TLS_RPC = 3, /* [kv] tls_rpc_listen: weft RPC over TLS */
  KV_LISTENER_COUNT_
};

/** Fills `o` with the defaults. */
void kv_server_options_init(kv_server_options *o);

/**
 * Sets the KV service's defaults for weft's own keys in `cfg` (after
 * weft_config_init): Redis' maxclients (10000) as [server]
 * max_connections, and a 64 MiB [server] output_limit per connection.
 */
void kv_server_config_defaults(weft_config *cfg);

/**
 * The [kv] section handler for weft_config_load / weft_config_set /
 * weft_config_apply_env (see weft_config_section_cb); `arg` is a
 * kv_server_options. Keys: rpc_listen, resp_listen, max_value_bytes,
 * stripes, expire_hz, requirepass, user, user_password, protected_mode,
 * auth_timeout_ms, command_timeout_ms, client_query_buffer_limit,
 * query_buffers_max, migrate_any_host, migrate_timeout_max_ms,
 * shutdown_command, and the TLS
 * keys (tls_listen, tls_rpc_listen, tls_cert_file, ...; see
 * kv_server_tls_key) (kv_config.h lists them). Also the [cluster]
 * section's keys (enabled, myself, node: kv_cluster_config_key). The clients'
 * keys of the section (password, client_user, client_tls, ...) and other
 * sections of the service's file ([kvbench]) are accepted and ignored. Error
 * texts never quote a value.
 */
int kv_server_config_section(void *arg, const char *section, const char *key,
                             const char *value, char *err, size_t err_len);

typedef struct kv_server kv_server;

/**
 * Starts the service on a started loop group with the channel options of
 * `cfg` ([transport]); endpoints without a scheme use cfg->transport.
 * The passwords are kept as SHA-256 digests only (auth.h). Returns 0 and
 * the server in `*out`, or the first error (logged with the endpoint or
 * the setting: WEFT_EINVAL for a [kv] user without user_password). Any
 * thread but a loop thread of `group`.
 *
 * Protected mode (Redis 7's): unless `protected_mode` is false or
 * `requirepass` is set, a client whose address is outside the loopback
 * network (127.0.0.0/8, ::1) gets Redis' DENIED error (auth.h) and the
 * close, and a WARN line names the settings to change.
 *
 * Cluster: with [cluster] enabled, `myself` must name one of the node
 * lines (else WEFT_EINVAL, logged with the node names); the server then
 * answers as that node of a Redis Cluster (cluster.h).
 *
 * TLS: with tls_listen or tls_rpc_listen, one server TLS context is made
 * from `opts->tls` (an error names the [kv] key and the file: WEFT_EINVAL)
 * and shared by both listeners' channels, whose pipelines start with the
 * TLS handler, then the protocol's handlers, as on the plaintext
 * listeners. [server] max_connections holds per listener; a RESP client
 * past it on tls_listen reads the reject message encrypted, after the
 * handshake. Passwords and protected mode apply alike.
 */
int kv_server_bind(kv_server **out, weft_loop_group *group,
                   const weft_config *cfg, const kv_server_options *opts);

/**
 * Writes a bound endpoint as a URI (for port 0): `which` is an enum
 * kv_listener (0 RPC, 1 RESP, 2 RESP over TLS, 3 RPC over TLS). Returns 0,
 * WEFT_ENOENT (that listener is off) or WEFT_ENOSPC.
 */
int kv_server_address(const kv_server *s, int which, char *buf, size_t len);

/**
 * The TLS keys of the [kv] section for kv_server_config_section
 * (server_tls.c): tls_listen, tls_rpc_listen, tls_cert_file, tls_key_file,
 * tls_ca_cert_file, tls_ca_cert_dir, tls_auth_clients (no | optional |
 * yes), tls_min_protocol (tls1.2 | tls1.3), tls_handshake_timeout_ms,
 * tls_ktls (on | off). Returns 0, WEFT_ENOENT for another key, or
 * WEFT_EINVAL with the valid values in `err`.
 */
int kv_server_tls_key(kv_server_options *o, const char *key, const char *value,
                      char *err, size_t err_len);

/** The server's store (for tests and INFO). */
kv_store *kv_server_store(kv_server *s);

/**
 * Stops listening, and frees the server and its store. Channels still open
 * are closed when the group stops: stop the group first for a graceful
 * shutdown (requests already received are answered, then the channels
 * close). Any thread but a loop thread.
 */
void kv_server_close(kv_server *s);

#endif
