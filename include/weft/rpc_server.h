/* SPDX-License-Identifier: Apache-2.0 */
/* weft/rpc_server.h: the RPC server handler, a method table over the RPC
 * codec (rpc.h).
 *
 * Put it after the codec: weft_rpc_codec_add_last(p, "rpc", NULL);
 * weft_rpc_server_add_last(p, "server", methods, n). Each REQUEST or ONEWAY
 * message calls the method with its id; the method answers through its
 * weft_rpc_call, at once or later: from a timer, after other I/O, or from
 * another thread by weft_loop_execute() on weft_rpc_call_loop(call) and
 * calling weft_rpc_reply() there. A request for a method not in the table
 * is answered with an ERROR, status WEFT_ENOSYS. Messages that are not
 * requests (responses for an RPC client further up) pass on unchanged.
 */
#ifndef WEFT_RPC_SERVER_H
#define WEFT_RPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/pipeline.h>
#include <weft/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/** One request being served. Opaque. */
typedef struct weft_rpc_call weft_rpc_call;

/**
 * A method. `request` is the caller's to release (its payload is a slice
 * of receive memory: keep it only as long as needed). The method must end
 * `call` exactly once with weft_rpc_reply() or weft_rpc_reply_error(),
 * also for ONEWAY requests (the answer is then dropped). Runs on the
 * channel's loop thread.
 */
typedef void (*weft_rpc_method_cb)(weft_rpc_call *call, weft_rpc_msg *request,
                                   void *arg);

/** A table entry: method id, function, its argument. */
typedef struct weft_rpc_method {
  uint16_t id;           /* the request's method id */
  weft_rpc_method_cb cb; /* answers it */
  void *arg;             /* cb's last argument */
} weft_rpc_method;

/**
 * Adds the server at the tail end of `p`. `methods` (n entries, looked up
 * by a linear scan: meant for tables of a few dozen) is not copied and must
 * stay valid while the channel is open; one table can serve every channel.
 * Returns 0, WEFT_EINVAL, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_rpc_server_add_last(weft_pipeline *p, const char *name,
                             const weft_rpc_method *methods, size_t n);

/**
 * Answers `call` with a RESPONSE carrying `status` and `payload` (one
 * reference taken; NULL for none), written and flushed on the channel,
 * and frees `call`. Returns 0, WEFT_ECLOSED (the channel closed meanwhile;
 * the payload is released), or WEFT_ENOMEM. The loop thread of
 * weft_rpc_call_loop(call) only.
 */
int weft_rpc_reply(weft_rpc_call *call, int32_t status, weft_buf *payload);

/**
 * Answers `call` with an ERROR carrying `status` (a negative weft error or
 * application code) and optional `payload` (e.g. a message text), and
 * frees `call`. Returns as weft_rpc_reply().
 */
int weft_rpc_reply_error(weft_rpc_call *call, int32_t status,
                         weft_buf *payload);

/** The loop to answer `call` on. Any thread, until the call is answered. */
weft_loop *weft_rpc_call_loop(const weft_rpc_call *call);

/** The channel of `call` (the call holds a reference until answered). */
weft_channel *weft_rpc_call_channel(const weft_rpc_call *call);

/** The request's method id, request id and type (weft_rpc_type). */
uint16_t weft_rpc_call_method(const weft_rpc_call *call);
uint64_t weft_rpc_call_request_id(const weft_rpc_call *call);
int weft_rpc_call_type(const weft_rpc_call *call);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_RPC_SERVER_H */
