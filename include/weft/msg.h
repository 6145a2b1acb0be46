/* SPDX-License-Identifier: Apache-2.0 */
/* weft/msg.h: messages that travel through a pipeline, and promises.
 *
 * A pipeline carries messages as `void *`. Every message object begins with a
 * weft_msg header naming its type, so code that does not know the type (the
 * pipeline's tail, a channel that closes with writes queued) can still
 * release it, as Netty's ReferenceCountUtil.release() does. weft_buf is a
 * message; codecs define their own types (an RPC message, a RESP value).
 *
 * Ownership rule: a message passed to a handler (channel_read, write) or to
 * weft_channel_write() is passed with one reference; whoever takes it either
 * passes it on or releases it, exactly once.
 */
#ifndef WEFT_MSG_H
#define WEFT_MSG_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A message type: its name and how to drop one reference to a message. */
typedef struct weft_msg_type {
  const char *name;           /* for logs: "weft_buf" */
  void (*release)(void *msg); /* drops one reference; loop thread */
} weft_msg_type;

/** The header every message begins with. */
typedef struct weft_msg {
  const struct weft_msg_type *type; /* never NULL */
} weft_msg;

/** Drops one reference to `msg` through its type. NULL is ignored. */
static inline void weft_msg_release(void *msg) {
  if (msg != NULL)
    ((weft_msg *)msg)->type->release(msg);
}

/** True when `msg` is of type `type`. */
static inline bool weft_msg_is(const void *msg, const weft_msg_type *type) {
  return msg != NULL && ((const weft_msg *)msg)->type == type;
}

/** The type's name, for logs ("weft_buf"). */
static inline const char *weft_msg_type_name(const void *msg) {
  return msg != NULL ? ((const weft_msg *)msg)->type->name : "(null)";
}

/**
 * Completion callback of an outbound operation (write, close, connect):
 * `status` is 0 on success or a negative weft error. Runs on the channel's
 * loop thread, exactly once, never inside the call that started the
 * operation's caller-visible return path unless documented otherwise.
 */
typedef void (*weft_promise_cb)(void *arg, int status);

/** A promise: a callback and its argument, passed by value. */
typedef struct weft_promise {
  weft_promise_cb cb; /* NULL: nobody waits (WEFT_PROMISE_NONE) */
  void *arg;          /* cb's first argument */
} weft_promise;

/** No callback: the outcome is not reported (errors still reach logs). */
#define WEFT_PROMISE_NONE ((weft_promise){NULL, NULL})

/** Completes `p` with `status` (runs the callback, if any). */
static inline void weft_promise_complete(weft_promise p, int status) {
  if (p.cb != NULL)
    p.cb(p.arg, status);
}

#ifdef __cplusplus
}
#endif
#endif /* WEFT_MSG_H */
