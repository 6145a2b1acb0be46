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

#include <stddef.h>

#include <weft/config.h>
#include <weft/loop.h>

#include "store.h"

/** Server settings: the [kv] section of the config file. */
typedef struct kv_server_options {
  char rpc_listen[WEFT_CONFIG_URI_MAX];  /* binary RPC endpoint; "" = off
                                            (default "0.0.0.0:7001") */
  char resp_listen[WEFT_CONFIG_URI_MAX]; /* RESP endpoint; "" = off
                                            (default "0.0.0.0:6380") */
  size_t max_value_bytes; /* largest value, bytes (default 1 MiB) */
  unsigned stripes;       /* lock stripes of the store (default 64) */
  unsigned expire_hz;     /* active expiry passes per second per loop
                             (default 10) */
} kv_server_options;

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
 * stripes, expire_hz (kv_config.h lists them). Other sections of the
 * service's file ([kvbench]) are accepted and ignored.
 */
int kv_server_config_section(void *arg, const char *section, const char *key,
                             const char *value, char *err, size_t err_len);

typedef struct kv_server kv_server;

/**
 * Starts the service on a started loop group with the channel options of
 * `cfg` ([transport]); endpoints without a scheme use cfg->transport.
 * Returns 0 and the server in `*out`, or the first error (logged with the
 * endpoint). Any thread but a loop thread of `group`.
 */
int kv_server_bind(kv_server **out, weft_loop_group *group,
                   const weft_config *cfg, const kv_server_options *opts);

/**
 * Writes the bound endpoints as URIs (for port 0): which = 0 for RPC, 1 for
 * RESP. Returns 0, WEFT_ENOENT (that protocol is off) or WEFT_ENOSPC.
 */
int kv_server_address(const kv_server *s, int which, char *buf, size_t len);

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
