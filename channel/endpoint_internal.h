/* SPDX-License-Identifier: Apache-2.0 */
/* channel/endpoint_internal.h: endpoint and scheme checks shared by the
 * URI parser, the config loader and the transport registry. */
#ifndef WEFT_CHANNEL_ENDPOINT_INTERNAL_H
#define WEFT_CHANNEL_ENDPOINT_INTERNAL_H

#include <stdbool.h>

#include <weft/endpoint.h>

/** Longest scheme (transport name), without the NUL. */
#define WEFT__SCHEME_MAX 15

/**
 * True if `s` is a valid scheme: 1 to 15 lowercase letters or digits,
 * starting with a letter. `n` is its length (the text need not end there).
 */
bool weft__scheme_valid(const char *s, size_t n);

/**
 * Parses "scheme://host:port" into `*out`. Returns NULL on success, or a
 * short static phrase saying what is wrong ("missing port"), which callers
 * wrap in their own message.
 */
const char *weft__endpoint_parse(const char *uri, weft_endpoint *out);

/**
 * As weft__endpoint_parse, for an endpoint that may be written without its
 * scheme ("host:port"): `scheme` (a transport name, or NULL for none) is
 * then the transport. A scheme written in `text` wins. One parse, no text
 * pasted together: how the config layer turns [transport] name and an
 * address into an endpoint.
 */
const char *weft__endpoint_parse_or(const char *text, const char *scheme,
                                    weft_endpoint *out);

#endif
