/* samples/kv/server_internal.h: what the server's files share: the server
 * itself (server.c: options, start and stop), and the channel setup of
 * each protocol, resp_server.c (RESP) and rpc_server.c (weft RPC). */
#ifndef WEFT_SAMPLES_KV_SERVER_INTERNAL_H
#define WEFT_SAMPLES_KV_SERVER_INTERNAL_H

#include <weft/weft.h>

#include "command.h"
#include "server.h"

/** Arguments of one command: the decoders' limit and the argv arrays'. */
#define KV_MAX_ARGS 1024

struct kv_server {
  weft_loop_group *group;
  kv_shared shared; /* the store, passwords, counters (command.h) */
  kv_server_options opts;
  weft_server *rpc, *resp;
  weft_rpc_method methods[KV_CMD_COUNT_ - 1];
  size_t n_methods;
  weft_resp_options resp_opts;
  weft_rpc_codec_options rpc_opts;
  weft_timer expire_timer; /* on loop 0 */
  char transport[16];      /* [transport] name, for INFO */
};

/** The child_init of the RESP listener (resp_server.c). */
void kv_resp_channel_init(weft_channel *ch, void *arg);

/** Fills srv->methods with one method per command the binary protocol
 *  serves (rpc_server.c). */
void kv_rpc_methods_init(kv_server *srv);

/** The child_init of the RPC listener (rpc_server.c). */
void kv_rpc_channel_init(weft_channel *ch, void *arg);

#endif
