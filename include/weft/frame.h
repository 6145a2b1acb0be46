/* SPDX-License-Identifier: Apache-2.0 */
/* weft/frame.h: frame decoders and the length-field prepender.
 *
 * Decoders turn the byte stream (weft_bufs in channel_read) into frames:
 * each frame is fired as a weft_buf of its own, sliced straight out of the
 * received buffer when the frame lies in it whole (no copy), or out of the
 * decoder's cumulation buffer when the frame spanned reads (the received
 * bytes are copied there, so receive memory is never held by a slow
 * consumer). Messages that are not weft_bufs pass through unchanged.
 *
 * Every decoder resumes at any byte boundary, checks a frame's size as soon
 * as its length is known and before allocating for it, and reports bad
 * input with exception_caught: WEFT_ETOOLONG (above the configured maximum)
 * or WEFT_EBADFRAME (malformed), with a reason naming the decoder and the
 * numbers. The pipeline's tail logs it and closes only that channel. After
 * an error the decoder drops any further input (except where noted).
 *
 * The `*_add_last` functions add a handler with state of its own (freed when
 * the handler is removed or the channel closes) at the tail end of `p`.
 * They return 0, WEFT_EINVAL (bad options), WEFT_EEXIST (name taken) or
 * WEFT_ENOMEM. Loop thread of the pipeline's channel.
 */
#ifndef WEFT_FRAME_H
#define WEFT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Options of the length-field frame decoder, Netty's
 * LengthFieldBasedFrameDecoder parameters. Initialise with
 * weft_length_field_options_init(). The frame length is
 *
 *   length_field_offset + length_field_length + field value
 *     + length_adjustment
 *
 * and the frame fired is that many bytes minus initial_bytes_to_strip from
 * its front. Examples: a 4-byte length of the body before the body is the
 * default; a length that counts its own 2 bytes is length_field_length 2,
 * length_adjustment -2.
 */
typedef struct weft_length_field_options {
  size_t max_frame_length;       /* bytes of a whole frame (header included)
                                    before stripping; default 1 MiB */
  size_t length_field_offset;    /* bytes before the length field; default 0 */
  int length_field_length;       /* 1, 2, 4 or 8 bytes; default 4 */
  int64_t length_adjustment;     /* added to the field value; default 0 */
  size_t initial_bytes_to_strip; /* bytes cut from the frame's front;
                                    default 0 */
  bool little_endian;            /* field byte order; default false (network) */
  bool fail_fast;                /* true (default): report WEFT_ETOOLONG as soon
                                    as the length field is read; false: after
                                    the oversized frame was skipped */
} weft_length_field_options;

/** Fills `o` with the defaults documented on each field. */
void weft_length_field_options_init(weft_length_field_options *o);

/**
 * Adds a length-field frame decoder. A frame longer than max_frame_length
 * is never buffered: its bytes are skipped as they arrive, WEFT_ETOOLONG is
 * reported (when, see fail_fast), and decoding resumes with the next frame
 * if the channel stays open. A frame whose computed length is shorter than
 * the length field's end or the bytes to strip is WEFT_EBADFRAME (fatal).
 * `opts` NULL means the defaults; it is copied.
 */
int weft_length_field_decoder_add_last(weft_pipeline *p, const char *name,
                                       const weft_length_field_options *opts);

/** Options of the length-field prepender (Netty's LengthFieldPrepender). */
typedef struct weft_length_prepender_options {
  int length_field_length;   /* 1, 2, 4 or 8 bytes; default 4 */
  int64_t length_adjustment; /* added to the length written; default 0 */
  bool length_includes_length_field; /* default false */
  bool little_endian;                /* default false (network order) */
} weft_length_prepender_options;

/** Fills `o` with the defaults documented on each field. */
void weft_length_prepender_options_init(weft_length_prepender_options *o);

/**
 * Adds an outbound handler that puts a length field before every weft_buf
 * written. Small frames (up to 512 bytes) are copied with their header into
 * one pool buffer; larger ones go down as a header buffer and the original
 * buffer (gathered by the transport, not copied). A length that does not
 * fit the field (or is negative after adjustment) fails the write's promise
 * with WEFT_EMSGSIZE and releases the buffer. Other messages pass through.
 */
int weft_length_prepender_add_last(weft_pipeline *p, const char *name,
                                   const weft_length_prepender_options *opts);

/** Options of the line decoder (Netty's LineBasedFrameDecoder). */
typedef struct weft_line_options {
  size_t max_length;    /* bytes of a line without its delimiter; default
                           8192 */
  bool strip_delimiter; /* true (default): frames without "\n" / "\r\n" */
} weft_line_options;

/** Fills `o` with the defaults documented on each field. */
void weft_line_options_init(weft_line_options *o);

/**
 * Adds a decoder that fires one frame per line ending in "\n" or "\r\n".
 * As soon as more than max_length bytes (plus a delimiter) arrive without
 * a line end, WEFT_ETOOLONG is reported (fatal: the rest is dropped).
 */
int weft_line_decoder_add_last(weft_pipeline *p, const char *name,
                               const weft_line_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_FRAME_H */
