/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the codecs (codec/) and the handlers above them. */
#ifndef WEFT_CODEC_CODEC_INTERNAL_H
#define WEFT_CODEC_CODEC_INTERNAL_H

#include <weft/decoder.h>

/* The three ops every decoder built on the base puts in its weft_handler
 * (decoder.h): reads, removal and the flow-control user event. */
#define WEFT__DECODER_OPS                                                      \
  .channel_read = weft_decoder_channel_read,                                   \
  .handler_removed = weft_decoder_handler_removed,                             \
  .user_event = weft_decoder_user_event

/* The options an add_last call keeps: a copy of `*opts`, or the defaults
 * `init(dst)` writes when the caller passed NULL for them. */
#define WEFT__OPTIONS_OR_DEFAULTS(dst, opts, init)                             \
  do {                                                                         \
    if ((opts) != NULL)                                                        \
      *(dst) = *(opts);                                                        \
    else                                                                       \
      init(dst);                                                               \
  } while (0)

#endif /* WEFT_CODEC_CODEC_INTERNAL_H */
