/* SPDX-License-Identifier: Apache-2.0 */
/* weft/rpc.h: RPC messages and their codec.
 *
 * An RPC message is a 20-byte header and a payload (docs/protocol.md has the
 * byte layout): version, type (request, response, one-way, error), method
 * id (u16), status (i32), request id (u64), payload length (u32), all
 * big-endian. In a pipeline it travels as a weft_rpc_msg (a weft_msg type):
 * the codec handler decodes inbound bytes into weft_rpc_msgs and encodes
 * outbound weft_rpc_msgs into pool buffers.
 *
 * Ownership: a weft_rpc_msg owns one reference to its payload buffer;
 * weft_msg_release() (or weft_rpc_msg_release()) frees the message and drops
 * that reference. Messages are not reference-counted: pass them on or
 * release them, exactly once.
 */
#ifndef WEFT_RPC_H
#define WEFT_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The protocol version this codec speaks (header byte 0). */
#define WEFT_RPC_VERSION 1
/** Bytes of the fixed header. */
#define WEFT_RPC_HEADER_BYTES 20
/** Default largest payload the decoder accepts, in bytes (1 MiB). */
#define WEFT_RPC_MAX_PAYLOAD_DEFAULT (1024 * 1024)

/** Message types (header byte 1). */
typedef enum weft_rpc_type {
  WEFT_RPC_REQUEST = 1,  /* expects a RESPONSE or ERROR with its id */
  WEFT_RPC_RESPONSE = 2, /* answers the REQUEST with the same id */
  WEFT_RPC_ONEWAY = 3,   /* a request without an answer (id unused) */
  WEFT_RPC_ERROR = 4     /* answers a REQUEST that failed: status < 0 */
} weft_rpc_type;

/** An RPC message. Fields are public. */
typedef struct weft_rpc_msg {
  weft_msg msg;        /* read-only: type weft_rpc_msg_type */
  uint8_t type;        /* weft_rpc_type */
  uint16_t method;     /* method id */
  int32_t status;      /* 0 = ok; an application status or, for ERROR, a
                          negative weft error (WEFT_ENOSYS: no such method) */
  uint64_t request_id; /* matches a RESPONSE/ERROR to its REQUEST */
  weft_buf *payload;   /* owned reference; NULL = empty payload */
} weft_rpc_msg;

/** The message type of every weft_rpc_msg. */
extern const weft_msg_type weft_rpc_msg_type;

/**
 * Allocates a message (malloc) and takes `payload` (one reference; NULL for
 * none). Returns NULL on ENOMEM, and then releases `payload`. Any thread.
 */
weft_rpc_msg *weft_rpc_msg_new(weft_rpc_type type, uint16_t method,
                               uint64_t request_id, int32_t status,
                               weft_buf *payload);

/** Frees `m` and drops its payload reference. NULL is ignored. */
void weft_rpc_msg_release(weft_rpc_msg *m);

/** Payload bytes of `m` (0 when it has none). */
static inline size_t weft_rpc_payload_len(const weft_rpc_msg *m) {
  return m->payload != NULL ? weft_buf_readable(m->payload) : 0;
}

/**
 * Encodes `m` (borrowed) into a new buffer from `pool`: header and payload
 * copied, one reference returned in `*out`. Returns 0, WEFT_EMSGSIZE
 * (payload above 4 GiB - 1), WEFT_EINVAL (bad type) or WEFT_ENOMEM. Pool
 * owner thread.
 */
int weft_rpc_encode(weft_pool *pool, const weft_rpc_msg *m, weft_buf **out);

/**
 * Decodes one message from `in`'s readable bytes. Returns 1 with the
 * message in `*out` (its payload a slice of `in`, no copy; reader index
 * advanced past it); 0 when more bytes are needed (nothing consumed;
 * `*need`, if not NULL, gets the bytes the whole message takes once the
 * header is readable, else 0); WEFT_EBADFRAME (bad version or type) or
 * WEFT_ETOOLONG (payload above `max_payload`), with `*reason` set to a
 * static text, as soon as the header is readable; WEFT_ENOMEM. Pool owner
 * thread of `in`.
 */
int weft_rpc_decode(weft_buf *in, size_t max_payload, weft_rpc_msg **out,
                    size_t *need, const char **reason);

/** Options of the RPC codec handler. */
typedef struct weft_rpc_codec_options {
  size_t max_payload;    /* bytes; default WEFT_RPC_MAX_PAYLOAD_DEFAULT */
  size_t copy_threshold; /* bytes: larger payloads are written as their own
                            buffer after a header buffer instead of being
                            copied; default 1024 */
} weft_rpc_codec_options;

/** Fills `o` with the defaults documented on each field. */
void weft_rpc_codec_options_init(weft_rpc_codec_options *o);

/**
 * Adds the RPC codec (a duplex handler) at the tail end of `p`. Inbound it
 * decodes bytes into weft_rpc_msgs, resuming at any byte boundary; payloads
 * are slices of the received buffer when the message lay in it whole.
 * Errors go to exception_caught (see frame.h): WEFT_EBADFRAME or
 * WEFT_ETOOLONG, fatal for the channel's input. Outbound it encodes
 * weft_rpc_msgs into pool buffers (releasing the message); other messages
 * pass through. Returns 0, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_rpc_codec_add_last(weft_pipeline *p, const char *name,
                            const weft_rpc_codec_options *opts);

/**
 * Changes the options of the RPC codec named `name` in `p` from its next
 * message on (a server lifts the limits of a connection that has not
 * authenticated once it has). Returns 0, or WEFT_ENOENT when `name` is not
 * an RPC codec. Loop thread.
 */
int weft_rpc_codec_set_options(weft_pipeline *p, const char *name,
                               const weft_rpc_codec_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_RPC_H */
