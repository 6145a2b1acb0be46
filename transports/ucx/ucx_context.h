/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_context.h: the UCX plugin's process-wide level: the
 * [transport.ucx] settings (ucx_settings) and the one ucp_context the
 * workers of every loop share, counted by reference (context.c).
 *
 * Separate because it is the one level that is not per loop: its
 * functions run on any thread and take the context's lock, while the
 * worker, endpoint and listener headers describe state one loop's thread
 * owns. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_CONTEXT_H
#define WEFT_TRANSPORTS_UCX_UCX_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <weft/transport_plugin.h>

#define UCX_DEFAULT_WINDOW (1024u * 1024u) /* bytes in flight per channel */
#define UCX_DEFAULT_MAX_MESSAGE                                                \
  (64u * 1024u) /* bytes per DATA message: one                                 \
                   pool size class */

/* ---- process-wide settings ---- */

typedef struct ucx_settings {
  char tls[128];             /* UCX_TLS; empty = UCX's default */
  char devices[128];         /* UCX_NET_DEVICES; empty = all */
  char rndv_thresh[32];      /* UCX_RNDV_THRESH; empty = inf over tcp lanes
                                only, else auto (context.c, lanes_tcp_only) */
  size_t window;             /* bytes */
  size_t max_message;        /* bytes */
  bool err_mode_none;        /* error_mode = none: no peer failure detection,
                                but shared memory transports become usable */
  uint32_t keepalive_ms;     /* PING a silent channel this often; 0 = off */
  uint32_t hello_timeout_ms; /* an accepted connection's HELLO, at most */
  bool spread;               /* a server listens on every loop and redirects */
  bool spread_set;           /* spread was configured (else: auto, see
                                context.c's lanes_tcp_only) */
} ucx_settings;

/* -- context.c: process-wide settings and the context -- */

/** The process's UCP context while a reference is held
 *  (weft__ucx_ctx_acquire), NULL otherwise. Written under the context's
 *  lock; a loop reads it while it holds a reference. */
extern ucp_context_h weft__ucx_ctx;

/** The [transport.ucx] keys, for the ops' config_keys. */
extern const weft_transport_key weft__ucx_keys[];

/**
 * The weft error for UCX status `st`: 0 for UCS_OK, WEFT_EIO for a status
 * without a closer match. Any thread.
 */
int weft__ucx_status_to_weft(ucs_status_t st);

/**
 * Takes a reference on the process's UCP context, creating it on the first
 * (from the [transport.ucx] settings, which the UCX_* variables override),
 * and copies the settings in effect to `*out` unless it is NULL. Returns 0,
 * or the UCX error mapped with a sentence in `why` (the context then is
 * not referenced). Any thread.
 */
int weft__ucx_ctx_acquire(ucx_settings *out, char *why, size_t why_len);

/** Drops a reference weft__ucx_ctx_acquire took; the last one cleans the
 *  context up. Any thread. */
void weft__ucx_ctx_release(void);

/**
 * The ops' config_set: sets one [transport.ucx] key for contexts created
 * afterwards. Returns 0, WEFT_EINVAL with the valid values in `why`, or
 * WEFT_ENOENT for a key it does not know. Any thread.
 */
int weft__ucx_config_set(const char *key, const char *value, char *why,
                         size_t why_len);

/* The UCX_RNDV_THRESH weft applies for the `rndv_thresh` setting (empty:
 * unset) and the UCX_TLS list in use (NULL or empty: UCX's default):
 * the setting when set, else "inf" (always eager) where every lane is tcp
 * or self, else "" (UCX's auto, left alone). context.c's lanes_tcp_only
 * says why. A UCX_RNDV_THRESH variable still wins (config_apply). */
const char *weft__ucx_rndv_thresh(const char *setting, const char *tls);

#endif
