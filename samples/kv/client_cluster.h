/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/client_cluster.h: the KV client for a cluster of
 * weft-kv-server nodes (samples/kv/README.md "Cluster"), over the binary
 * protocol: what redis-cli -c and Redis' cluster clients do, for weft-kv
 * and weft-kvbench.
 *
 * It learns the slot map from the node it is given (CLUSTER SLOTS, which
 * gives RPC clients the nodes' RPC addresses), keeps one kv_client per
 * node (connected the first time a request goes there), sends each
 * request to the owner of its first key's slot (kv_cmd_has_key; requests
 * without keys go to the first node), and follows the redirections: on
 * -MOVED it updates that slot, asks the new node for the whole map again
 * and resends; on -ASK it sends ASKING and the request to the node named,
 * once; on -TRYAGAIN it resends. A request is redirected at most
 * KV_CLUSTER_CLIENT_REDIRECTS times; then its last reply is delivered.
 * Against a server without cluster mode it sends everything to that one
 * server.
 *
 * Threads: kv_cluster_client_call only on the client's loop thread
 * (kv_cluster_client_loop; inside a callback, or a task executed there);
 * the sync functions on a thread that is not a loop thread. Callbacks run
 * on the loop thread.
 */
#ifndef WEFT_SAMPLES_KV_CLIENT_CLUSTER_H
#define WEFT_SAMPLES_KV_CLIENT_CLUSTER_H

#include "client.h"

/** Redirections one request follows before its reply is delivered as is
 *  (redis-cli's and Jedis' limit). */
#define KV_CLUSTER_CLIENT_REDIRECTS 16

typedef struct kv_cluster_client kv_cluster_client;

/**
 * Connects to the node at `uri` (a URI with a scheme; the other nodes are
 * reached with the same scheme and `opts`) on the next loop of `group`,
 * and reads the slot map from it. Returns 0 with the client in `*out`, or
 * the connect's error (kv_sync_connect's), WEFT_EPROTO (the map could not
 * be read: logged), WEFT_ENOMEM, or WEFT_EINVAL on a loop thread. `opts`
 * may be NULL; its strings are copied and its TLS context retained.
 */
int kv_cluster_client_connect(kv_cluster_client **out, weft_loop_group *group,
                              const char *uri, const kv_client_options *opts);

/**
 * Sends a command to the owner of its key's slot, following redirections
 * (see the file comment). Arguments are copied. Returns 0 and `cb` runs
 * exactly once later with the final reply or error, or at once
 * WEFT_EINVAL (not on the loop thread, unknown command, NULL cb) or
 * WEFT_ENOMEM and `cb` never runs. Loop thread only.
 */
int kv_cluster_client_call(kv_cluster_client *cc, int cmd, size_t argc,
                           const kv_arg *argv, uint64_t timeout_ns,
                           kv_reply_cb cb, void *arg);

/**
 * kv_cluster_client_call from a thread that is not a loop thread, and a
 * wait for the outcome: 0 with a deep copy of the final reply in `*out`
 * (kv_reply_free), or the call's error. WEFT_EINVAL on a loop thread.
 */
int kv_cluster_sync_call(kv_cluster_client *cc, int cmd, size_t argc,
                         const kv_arg *argv, uint64_t timeout_ns,
                         kv_reply **out);

/** The loop every node connection of `cc` lives on. Any thread. */
weft_loop *kv_cluster_client_loop(const kv_cluster_client *cc);

/** Nodes `cc` knows now (connected or not). Any thread. */
size_t kv_cluster_client_nodes(kv_cluster_client *cc);

/**
 * Closes every node connection and waits for their last callbacks, then
 * frees `cc`. Calls still waiting fail with WEFT_ECLOSED; a redirection
 * being followed may fail the same way. Not on a loop thread.
 */
void kv_cluster_client_close(kv_cluster_client *cc);

#endif
