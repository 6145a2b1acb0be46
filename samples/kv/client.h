/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/client.h: the KV service's client (binary protocol, proto.h).
 *
 * Asynchronous: kv_client_call() sends one command and its callback gets
 * the parsed reply later, on the channel's loop. Any number of calls may be
 * outstanding on one client: they are pipelined on its one channel and
 * matched to their replies by RPC request id (rpc_client.h), so replies may
 * come back in any order the server chooses.
 *
 *   kv_client *c;
 *   kv_client_connect(&c, group, NULL, "tcp://127.0.0.1:7001", NULL,
 *                     on_connect, app);
 *   ...
 *   kv_arg argv[] = {{"k", 1}};
 *   kv_client_call(c, KV_CMD_GET, 1, argv, 0, on_reply, app);
 *   ...
 *   kv_client_close(c, on_closed, app);
 *
 * The pipeline of the client's channel is, from the head: the TLS handler
 * ("tls", with kv_client_options.tls), flush_consolidation ("flush"), the
 * RPC codec ("rpc"), the RPC client ("rpc_client") and this client's own
 * handler ("kv_client"), which learns of the channel closing and of the
 * TLS handshake's outcome.
 *
 * Threads: every function may be called from any thread (kv_sync_* from
 * any thread but a loop thread). Callbacks run on the client's loop thread.
 * A call made on that loop thread is encoded and written at once; a call
 * from another thread copies its arguments into one malloc'd entry, which
 * is appended to the client's queue under a mutex, and the queue is handed
 * to the loop with weft_loop_execute() only when it was empty: a burst of
 * calls from one thread costs one execute (one malloc, one queue push and,
 * when the loop sleeps, one eventfd write) plus a malloc, a memcpy of the
 * arguments and a lock per call. Call from the loop thread (inside a
 * callback, or from a task on kv_client_loop()) for the cheapest path.
 *
 * The blocking wrappers (kv_sync_*) wait on a condition variable for the
 * callback, so they may only run on a thread that is not a loop thread of
 * any group: there they return WEFT_EINVAL at once (the wait could be for
 * the very loop it blocks).
 */
#ifndef WEFT_SAMPLES_KV_CLIENT_H
#define WEFT_SAMPLES_KV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <weft/bootstrap.h>
#include <weft/loop.h>
#include <weft/tls.h>

#include "proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_client kv_client;

/**
 * A parsed reply value: a tree whose arrays hold their elements in `elem`.
 * Every pointer (str, elem) points into memory the client owns: valid only
 * during the callback that received the reply. Copy what you keep, or take
 * a deep copy with kv_reply_dup(). Fields are read-only.
 */
typedef struct kv_reply {
  uint8_t tag;                 /* enum kv_tag (proto.h) */
  int64_t integer;             /* KV_TAG_INTEGER */
  const uint8_t *str;          /* SIMPLE, ERROR, BULK: the bytes (not
                                  NUL-terminated) */
  size_t len;                  /* SIMPLE, ERROR, BULK: bytes; ARRAY: the
                                  element count */
  const struct kv_reply *elem; /* ARRAY: `len` elements, else NULL */
} kv_reply;

/**
 * The outcome of a call, run exactly once on the client's loop thread.
 *  - err 0: `reply` is the server's answer. An error reply (Redis' "-ERR
 *    ...") is a reply too: tag KV_TAG_ERROR, err still 0.
 *  - err < 0, `reply` NULL: the call failed without an answer:
 *    WEFT_ETIMEDOUT (its timeout passed), WEFT_ECLOSED (the channel closed
 *    first, or the client was closed), the connect's error (the connect
 *    failed: WEFT_ECONNREFUSED, ...),
 *    WEFT_EBADFRAME (the reply could not be parsed), WEFT_ENOSYS (the
 *    server does not know the command), WEFT_EPROTO (the server answered
 *    in RESP: a Redis port, not weft RPC; the connection is closed),
 *    WEFT_ENOMEM, or a write's error.
 * `reply` and everything it points to is valid during the callback only.
 * The callback may make new calls and may close the client.
 */
typedef void (*kv_reply_cb)(void *arg, int err, const kv_reply *reply);

/**
 * The outcome of kv_client_connect, on the client's loop thread: 0 when
 * connected (with TLS: once the handshake completed; with a password:
 * authenticated), or the connect error (WEFT_ECONNREFUSED, WEFT_ETIMEDOUT,
 * ...), the TLS handshake's (WEFT_EPROTO, WEFT_ETIMEDOUT, WEFT_ECONNRESET;
 * its reason is logged by the pipeline's tail), WEFT_EPROTO without TLS
 * when the server answered the AUTH sent on connect in RESP (a Redis
 * port), or WEFT_EACCES when the
 * server refused the AUTH (WRONGPASS) or the client (protected mode's
 * DENIED); the server's text is logged at WARN. Either way the client
 * stays the caller's to close with kv_client_close.
 */
typedef void (*kv_connect_cb)(void *arg, kv_client *c, int status);

/** Runs once a closed client's last callback has run (loop thread). */
typedef void (*kv_closed_cb)(void *arg);

/** Client settings. Initialise with kv_client_options_init(). */
typedef struct kv_client_options {
  weft_channel_config channel; /* channel options (the [transport]
                                  section's); default: all -1 */
  uint64_t default_timeout_ns; /* for calls passing 0; 0 = none (default) */
  size_t max_reply_bytes;      /* largest reply payload accepted; default
                                  WEFT_RPC_MAX_PAYLOAD_DEFAULT + 64 KiB */
  int explicit_flush_after;    /* flush consolidation: held flushes before
                                  one goes through (default 256) */
  const char *user;            /* AUTH as this user on connect; NULL = the
                                  default user (default NULL) */
  const char *password;        /* AUTH with this password on connect, before any
                                  call goes out; NULL = no AUTH (default). Both
                                  are copied by kv_client_connect. */
  weft_tls_context *tls;       /* a client context: speak TLS (the server's
                                  tls_rpc_listen); NULL = plaintext (default).
                                  The client takes a reference of its own. */
  const char *tls_server_name; /* the name sent as SNI and checked in the
                                  server's certificate; NULL = the context's
                                  (default). Copied. */
} kv_client_options;

/** Fills `o` with the defaults documented on each field. */
void kv_client_options_init(kv_client_options *o);

/**
 * Starts connecting to `uri` (a URI with a scheme, e.g.
 * "tcp://127.0.0.1:7001"; weft_config_endpoint() adds one) on `loop`, or on
 * the next loop of `group` when `loop` is NULL. Returns 0 with the client
 * in `*out` (calls made before the connection is up wait for it and then
 * go out in order), or at once WEFT_EINVAL (bad URI, no group or loop),
 * WEFT_ENOTRANSPORT or WEFT_ENOMEM, with nothing to close. `cb` (may be
 * NULL) reports the outcome later on the loop thread. `opts` may be NULL.
 * Any thread. The group must outlive the client.
 */
int kv_client_connect(kv_client **out, weft_loop_group *group, weft_loop *loop,
                      const char *uri, const kv_client_options *opts,
                      kv_connect_cb cb, void *arg);

/**
 * Sends command `cmd` (a kv_cmd) with `argc` arguments (borrowed: copied or
 * encoded before this returns). `timeout_ns` 0 uses the default timeout.
 * Returns 0, and then `cb(arg, ...)` runs exactly once on the loop thread,
 * later (only when the write fails at once on the loop thread may it run
 * before this returns); or at once WEFT_EINVAL (unknown command, NULL cb),
 * WEFT_EMSGSIZE (arguments above 4 GiB), WEFT_ECLOSED (kv_client_close was
 * called; on the loop thread also: the channel is closed already) or
 * WEFT_ENOMEM, and then `cb` never runs. Any thread; see the file comment
 * for what a call from another thread costs.
 */
int kv_client_call(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                   uint64_t timeout_ns, kv_reply_cb cb, void *arg);

/** The loop the client's channel lives on. Any thread. */
weft_loop *kv_client_loop(const kv_client *c);

/**
 * Closes the client: the channel closes, calls still waiting fail with
 * WEFT_ECLOSED, and then `cb(arg)` (may be NULL) runs on the loop thread,
 * after every call's callback. The handle must not be used after this call
 * (its memory goes when the last callback has run). Call exactly once, also
 * after a failed connect. Any thread.
 */
void kv_client_close(kv_client *c, kv_closed_cb cb, void *arg);

/* ---- replies ---- */

/** True when `r` is an error reply (KV_TAG_ERROR). */
static inline int kv_reply_is_error(const kv_reply *r) {
  return r != NULL && r->tag == KV_TAG_ERROR;
}

/**
 * A deep copy of `r` in one malloc'd block (free with kv_reply_free), so a
 * reply can outlive its callback. NULL on ENOMEM. Any thread.
 */
kv_reply *kv_reply_dup(const kv_reply *r);

/** Frees a copy made by kv_reply_dup() or kv_sync_call(). NULL ignored. */
void kv_reply_free(kv_reply *r);

/**
 * Parses one reply value from `payload`'s readable bytes into a tree in
 * `nodes` (`max_nodes` entries; the root is nodes[0]; str pointers point
 * into `payload`). Returns the nodes used (>= 1), WEFT_ENOSPC when more
 * than `max_nodes` are needed (the return of kv_reply_count tells how
 * many), or WEFT_EBADFRAME (malformed, trailing bytes, nested deeper than
 * KV_REPLY_MAX_DEPTH). `payload`'s reader index is unchanged. Any thread.
 */
int kv_reply_parse(const weft_buf *payload, kv_reply *nodes, size_t max_nodes);

/** Nodes kv_reply_parse needs for `payload`, or WEFT_EBADFRAME. */
int kv_reply_count(const weft_buf *payload);

/** Deepest array nesting a reply may have (SCAN's is 2). */
#define KV_REPLY_MAX_DEPTH 8

/**
 * Maps an error reply's text back to the store's error code (store.h,
 * kv_error_message): WEFT_EINVAL ("value is not an integer or out of
 * range", "syntax error"), WEFT_ERANGE ("... would overflow"),
 * WEFT_EMSGSIZE ("string exceeds maximum allowed size"), WEFT_EACCES
 * ("NOAUTH ...", "WRONGPASS ...", "DENIED ..."), else WEFT_EPROTO.
 */
int kv_reply_error_code(const kv_reply *r);

/* ---- blocking wrappers: not on a loop thread (WEFT_EINVAL there) ---- */

/**
 * kv_client_connect and a wait for the outcome (with the options' AUTH).
 * Returns 0 with a connected client in `*out`, or the connect error (the
 * client is then closed and freed; WEFT_EACCES for a refused AUTH).
 * WEFT_EINVAL on a loop thread.
 */
int kv_sync_connect(kv_client **out, weft_loop_group *group, const char *uri,
                    const kv_client_options *opts);

/**
 * kv_client_call and a wait for its callback. Returns 0 with a deep copy of
 * the reply in `*out` (the caller's: kv_reply_free), or the call's error
 * (see kv_reply_cb). An error reply is returned as a reply (0). WEFT_EINVAL
 * on a loop thread.
 */
int kv_sync_call(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                 uint64_t timeout_ns, kv_reply **out);

/**
 * GET: 0 with the value in `*val` (malloc'd, NUL-terminated for
 * convenience, `*len` bytes without it; the caller frees it), WEFT_ENOENT
 * when the key does not exist, or an error (kv_sync_call's, or an error
 * reply's kv_reply_error_code). The sync helpers all use no timeout.
 */
int kv_sync_get(kv_client *c, const void *key, size_t klen, char **val,
                size_t *len);

/** SET key value: 0 or an error as kv_sync_get. */
int kv_sync_set(kv_client *c, const void *key, size_t klen, const void *val,
                size_t vlen);

/** DEL key: 0 with the number deleted (0 or 1) in `*n` (may be NULL). */
int kv_sync_del(kv_client *c, const void *key, size_t klen, int64_t *n);

/** INCR key: 0 with the new value in `*value` (may be NULL). */
int kv_sync_incr(kv_client *c, const void *key, size_t klen, int64_t *value);

/**
 * kv_client_close and a wait for its closed callback: when it returns, no
 * callback of `c` runs any more. On a loop thread it cannot wait: it is
 * kv_client_close(c, NULL, NULL) there.
 */
void kv_sync_close(kv_client *c);

#ifdef __cplusplus
}
#endif
#endif
