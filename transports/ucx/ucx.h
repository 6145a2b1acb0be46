/* transports/ucx/ucx.h: the UCX transport's exported symbols. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_H
#define WEFT_TRANSPORTS_UCX_UCX_H

#include <stddef.h>

#include <weft/transport.h>

/** The "ucx" transport (UCP active messages); see ucx.c. */
extern const weft_transport_ops weft__transport_ucx;

/**
 * Sets one [transport.ucx] key for the process ("tls", "devices",
 * "window", "max_message", "rndv_thresh"). Values are checked here; the
 * UCX context created by the next first loop_init uses them (one context per
 * process, so they apply to every loop started afterwards). A UCX_*
 * environment variable for the same setting wins over the file. Returns 0,
 * WEFT_ENOENT for an unknown key, or WEFT_EINVAL with `why` naming the
 * valid values. Any thread.
 */
int weft__ucx_config_set(const char *key, const char *value, char *why,
                         size_t why_len);

#endif
