/* SPDX-License-Identifier: Apache-2.0 */
/* channel/registry_internal.h: how built-in transports get into the
 * registry. */
#ifndef WEFT_CHANNEL_REGISTRY_INTERNAL_H
#define WEFT_CHANNEL_REGISTRY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/transport_plugin.h>

/**
 * Registers every built-in transport: defined by the plugins' own list,
 * transports/builtin.c, the one place that names them. The registry
 * calls it once, on its first use, from inside its one-time initialisation:
 * it must register with weft__transport_register_builtin, not with
 * weft_transport_register (which would wait for that initialisation).
 */
void weft__transports_builtin(void);

/** weft_transport_register without the built-in initialisation. */
int weft__transport_register_builtin(const weft_transport_ops *ops);

/** True if a transport named `name` is registered (no probe). */
bool weft__transport_registered(const char *name);

/**
 * Applies the environment to the settings of `ops` (the fallback and its
 * config_keys, as WEFT_TRANSPORT_<NAME>_<KEY>): once per process, or again
 * when `again` is true. The channel core calls it before a per-loop
 * instance starts, the config layer when the application applies the
 * environment (weft_config_apply_env). Returns 0, or WEFT_EBADCONF with
 * `why` naming the variable and the valid values. Any thread.
 */
int weft__transport_env_apply(const weft_transport_ops *ops, bool again,
                              char *why, size_t why_len);

#endif
