/* SPDX-License-Identifier: Apache-2.0 */
/* weft/rpc_client.h: the RPC client handler over the RPC codec (rpc.h).
 *
 * It numbers requests (ids 1, 2, ...), keeps a pending table, and matches
 * RESPONSE and ERROR messages to their request in any order, so many
 * requests can be outstanding (pipelined) on one channel. Each request may
 * have a timeout, a loop timer embedded in its pending entry. When the
 * channel closes (or the handler is removed), every pending request fails
 * with WEFT_ECLOSED. Messages that are not answers pass on unchanged.
 *
 * Threads: every function runs on the channel's loop thread; callbacks run
 * there too. From another thread, retain the channel and use
 * weft_loop_execute() on its loop.
 */
#ifndef WEFT_RPC_CLIENT_H
#define WEFT_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/pipeline.h>
#include <weft/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A client, one per channel. Opaque. */
typedef struct weft_rpc_client weft_rpc_client;

/**
 * The outcome of a call, run exactly once on the loop thread:
 *  - err 0: `reply` is the RESPONSE (its status field is the server's);
 *  - err < 0 with `reply`: the server answered ERROR, err is its status
 *    (WEFT_EPROTO if the server sent a status that is not negative);
 *  - err < 0 without `reply`: WEFT_ETIMEDOUT (timeout), WEFT_ECLOSED
 *    (channel closed first) or the write's error.
 * `reply`, when not NULL, is the callback's to release. The callback may
 * start new calls or close the channel.
 */
typedef void (*weft_rpc_reply_cb)(void *arg, int err, weft_rpc_msg *reply);

/** Options of the client. */
typedef struct weft_rpc_client_options {
  uint64_t default_timeout_ns; /* used when a call passes 0; 0 = none;
                                  default 0 */
} weft_rpc_client_options;

/**
 * Adds a client at the tail end of `p` (after the RPC codec) and returns it
 * in `*out` (may be NULL). It is valid until the channel closes (its
 * pipeline is torn down after channel_inactive); weft_rpc_client_get()
 * finds it again by name. `opts` may be NULL. Returns 0, WEFT_EEXIST or
 * WEFT_ENOMEM. Loop thread.
 */
int weft_rpc_client_add_last(weft_pipeline *p, const char *name,
                             const weft_rpc_client_options *opts,
                             weft_rpc_client **out);

/** The client added as `name` to `ch`'s pipeline, or NULL. Loop thread. */
weft_rpc_client *weft_rpc_client_get(weft_channel *ch, const char *name);

/**
 * Sends a REQUEST for `method` with `payload` (one reference taken; NULL
 * for none), written and flushed, and calls `cb(arg, ...)` with the
 * outcome. `timeout_ns` 0 uses the default timeout. Returns the request id
 * (> 0), or WEFT_ECLOSED / WEFT_ENOMEM without calling `cb` (the payload
 * is released). If the write itself fails at once (e.g. an encoder error),
 * `cb` runs with that error before this returns. Loop thread.
 */
int64_t weft_rpc_client_call(weft_rpc_client *c, uint16_t method,
                             weft_buf *payload, uint64_t timeout_ns,
                             weft_rpc_reply_cb cb, void *arg);

/**
 * Sends a ONEWAY message (no answer, no pending entry). Returns 0,
 * WEFT_ECLOSED or WEFT_ENOMEM (payload released on error). Loop thread.
 */
int weft_rpc_client_send(weft_rpc_client *c, uint16_t method,
                         weft_buf *payload);

/** Requests waiting for an answer. Loop thread. */
size_t weft_rpc_client_pending(const weft_rpc_client *c);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_RPC_CLIENT_H */
