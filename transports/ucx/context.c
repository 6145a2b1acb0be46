/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/context.c: the process-wide part of the UCX transport:
 * the [transport.ucx] settings (config_set and its keys), the one UCP
 * context that every loop's worker shares, created with the first
 * reference and cleaned up with the last, and UCX status codes mapped to
 * weft errors. It holds the plugin's state shared by loops (under
 * ctx_lock), with route.c's routes (under their own lock); the other files
 * run on one loop's thread. */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_internal.h"

/* ---- process-wide settings and the context ---- */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static ucx_settings settings = {.window = UCX_DEFAULT_WINDOW,
                                .max_message = UCX_DEFAULT_MAX_MESSAGE,
                                .keepalive_ms = UCX_DEFAULT_KEEPALIVE_MS,
                                .hello_timeout_ms = UCX_DEFAULT_HELLO_MS,
                                .spread = true};
ucp_context_h weft__ucx_ctx;
static int ctx_refs;

int weft__ucx_status_to_weft(ucs_status_t st) {
  switch (st) {
  case UCS_OK:
    return 0;
  case UCS_ERR_NO_MEMORY:
    return WEFT_ENOMEM;
  case UCS_ERR_CONNECTION_RESET:
  case UCS_ERR_ENDPOINT_TIMEOUT:
    return WEFT_ECONNRESET;
  case UCS_ERR_REJECTED:
    return WEFT_ECONNREFUSED;
  case UCS_ERR_UNREACHABLE:
    return WEFT_EHOSTUNREACH;
  case UCS_ERR_TIMED_OUT:
    return WEFT_ETIMEDOUT;
  case UCS_ERR_NO_DEVICE:
  case UCS_ERR_NO_RESOURCE:
    return WEFT_ENODEV;
  case UCS_ERR_UNSUPPORTED:
    return WEFT_ENOTSUP;
  case UCS_ERR_INVALID_PARAM:
    return WEFT_EINVAL;
  case UCS_ERR_BUSY:
    return WEFT_EADDRINUSE;
  default:
    return WEFT_EIO;
  }
}

/* Sets UCX config `name` from the weft setting, unless UCX_<name> is in
 * the environment (UCX's own variables win over weft's file). */
static void config_apply(ucp_config_t *cfg, const char *name,
                         const char *value) {
  char var[64];
  snprintf(var, sizeof var, "UCX_%s", name);
  if (value[0] == '\0' || getenv(var) != NULL)
    return;
  ucs_status_t st = ucp_config_modify(cfg, name, value);
  if (st != UCS_OK)
    weft_log(WEFT_LOG_WARN, "ucx: %s = %s: %s (ignored)", name, value,
             ucs_status_string(st));
}

/* UCX lanes (UCX_TLS names, not weft transports) that are tcp: a server
 * may spread its connections over them on UCX 1.13, and they default to
 * eager sends (lanes_tcp_only). */
#define TCP_LANES "self,tcp"

/* Whether the `n` bytes at `t` are one of the comma-separated names of
 * `list`. */
static bool lane_in(const char *t, size_t n, const char *list) {
  for (const char *p = list;;) {
    const char *e = strchr(p, ',');
    size_t m = e != NULL ? (size_t)(e - p) : strlen(p);
    if (m == n && strncmp(p, t, n) == 0)
      return true;
    if (e == NULL)
      return false;
    p = e + 1;
  }
}

/* Whether every lane of the UCX_TLS list `tls` is tcp (or self). An empty
 * list is UCX's default, all lanes. Two defaults follow from it:
 * - spread: UCX 1.13 aborted a 2-loop server whose connections came over
 *   shared memory (test_ucx_scale_shm in CI: "ucp_worker.inl:92 Assertion
 *   `(*ep_p)->worker == worker' failed" inside ucp_worker_progress, in 2 of
 *   a handful of runs), so spreading stays off unless the lanes are known
 *   to be tcp only;
 * - rndv_thresh: over tcp lanes a rendezvous only adds round trips (its
 *   data goes over the same socket as an eager message's would), and a
 *   1 MiB stream of 64 KiB messages ran 1.75x faster eager
 *   (docs/journal/2026-11-22-ucx.md,
 *   "Rendezvous threshold over tcp lanes"), so those
 *   lanes default to eager (inf); others keep UCX's auto, whose zero-copy
 *   rendezvous is what RDMA and cma lanes are for. */
static bool lanes_tcp_only(const char *tls) {
  if (tls == NULL || tls[0] == '\0')
    return false;
  /* Walked in place: UCX_TLS from the environment has no length bound, and
   * a copy cut short would drop the lanes past its end. */
  for (const char *t = tls;; t++) {
    size_t n = strcspn(t, ",");
    if (n > 0 && !lane_in(t, n, TCP_LANES)) /* empty names: as strtok */
      return false;
    t += n;
    if (*t == '\0')
      return true;
  }
}

const char *weft__ucx_rndv_thresh(const char *setting, const char *tls) {
  if (setting[0] != '\0')
    return setting;
  return lanes_tcp_only(tls) ? "inf" : "";
}

/* A server restarted on its port must bind at once, as tcp and uring
 * servers do (SO_REUSEADDR): without it UCX's listener could not bind for
 * about a minute after its side of a client's connection closed first
 * (that connection in TIME_WAIT; UCX 1.13's default is
 * UCX_TCP_CM_REUSEADDR=n). The connection manager reads its settings from
 * the environment only: ucp_config_modify takes the key but UCX 1.13 never
 * applies it ("invalid configuration: TCP_CM_REUSEADDR=y"). So it is set
 * there, once, under ctx_lock, unless the user set it. */
static void cm_reuseaddr(void) {
  static bool done;
  if (done)
    return;
  done = true;
  setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
}

static int ctx_create(char *why, size_t why_len) {
  ucp_config_t *cfg;
  cm_reuseaddr();
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st != UCS_OK) {
    snprintf(why, why_len, "ucp_config_read: %s (check the UCX_* variables)",
             ucs_status_string(st));
    return weft__ucx_status_to_weft(st);
  }
  config_apply(cfg, "TLS", settings.tls);
  /* the list UCX will use: UCX_TLS wins over the file (config_apply) */
  const char *tls = getenv("UCX_TLS");
  if (tls == NULL)
    tls = settings.tls;
  bool tcp_only = lanes_tcp_only(tls);
  if (!settings.spread_set) {
    settings.spread = tcp_only;
    if (!settings.spread)
      weft_log(WEFT_LOG_INFO,
               "ucx: servers keep their connections on loop 0: UCX_TLS is "
               "\"%s\", and spreading over loops is safe on UCX 1.13 with tcp "
               "lanes only (set [transport.ucx] spread = on to force it)",
               tls != NULL ? tls : "");
  }
  config_apply(cfg, "NET_DEVICES", settings.devices);

  config_apply(cfg, "RNDV_THRESH",
               weft__ucx_rndv_thresh(settings.rndv_thresh, tls));
  ucp_params_t params = {
      .field_mask =
          UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
      .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
      /* Each loop's worker runs on its own thread over the one context. */
      .mt_workers_shared = 1};
  st = ucp_init(&params, cfg, &weft__ucx_ctx);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    snprintf(why, why_len,
             "ucp_init: %s (no usable UCX transport? check UCX_TLS and "
             "`ucx_info -d`; or use transport=tcp)",
             ucs_status_string(st));
    weft__ucx_ctx = NULL;
    return weft__ucx_status_to_weft(st);
  }
  return 0;
}

/* Takes a reference on the process's context, creating it first. */
int weft__ucx_ctx_acquire(ucx_settings *out, char *why, size_t why_len) {
  int err = 0;
  pthread_mutex_lock(&ctx_lock);
  if (ctx_refs == 0)
    err = ctx_create(why, why_len);
  if (err == 0) {
    ctx_refs++;
    if (out != NULL)
      *out = settings;
  }
  pthread_mutex_unlock(&ctx_lock);
  return err;
}

void weft__ucx_ctx_release(void) {
  pthread_mutex_lock(&ctx_lock);
  if (--ctx_refs == 0) {
    ucp_cleanup(weft__ucx_ctx);
    weft__ucx_ctx = NULL;
  }
  pthread_mutex_unlock(&ctx_lock);
}

static int parse_size(const char *value, size_t min, size_t max, size_t *out) {
  char *end;
  unsigned long long v = strtoull(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > max)
    return WEFT_EINVAL;
  *out = (size_t)v;
  return 0;
}

/* A millisecond setting in `min` .. `max` into `*out`, or WEFT_EINVAL. */
static int parse_ms(const char *value, uint32_t min, uint32_t max,
                    uint32_t *out) {
  size_t ms;
  int err = parse_size(value, min, max, &ms);
  if (err == 0)
    *out = (uint32_t)ms;
  return err;
}

static int copy_setting(char *dst, size_t len, const char *value) {
  if (strlen(value) >= len)
    return WEFT_EINVAL;
  strcpy(dst, value);
  return 0;
}

/* weft__ucx_config_set with ctx_lock held. */
static int setting_set(const char *key, const char *value, char *why,
                       size_t why_len) {
  int err = WEFT_ENOENT;
  if (strcmp(key, "error_mode") == 0) {
    err = strcmp(value, "peer") == 0 || strcmp(value, "none") == 0
              ? 0
              : WEFT_EINVAL;
    if (err == 0)
      settings.err_mode_none = strcmp(value, "none") == 0;
    else
      snprintf(why, why_len,
               "peer (a failed peer closes the channel; UCX 1.13 then uses "
               "no shared memory transport) or none (shared memory works; a "
               "peer that vanishes without closing is not detected)");
  } else if (strcmp(key, "tls") == 0) {
    err = copy_setting(settings.tls, sizeof settings.tls, value);
    if (err < 0)
      snprintf(why, why_len,
               "a UCX_TLS list shorter than %zu characters "
               "(e.g. tcp, or posix,sysv,cma,tcp)",
               sizeof settings.tls);
  } else if (strcmp(key, "devices") == 0) {
    err = copy_setting(settings.devices, sizeof settings.devices, value);
    if (err < 0)
      snprintf(why, why_len,
               "a UCX_NET_DEVICES list shorter than %zu "
               "characters (e.g. lo, or mlx5_0:1)",
               sizeof settings.devices);
  } else if (strcmp(key, "rndv_thresh") == 0) {
    err =
        copy_setting(settings.rndv_thresh, sizeof settings.rndv_thresh, value);
    if (err < 0)
      snprintf(why, why_len, "bytes, inf or auto (UCX_RNDV_THRESH)");
  } else if (strcmp(key, "window") == 0) {
    /* credit travels in 32 bits (ucx_hdr) */
    err = parse_size(value, UCX_WINDOW_MIN, UCX_WINDOW_MAX, &settings.window);
    if (err < 0)
      snprintf(why, why_len, "bytes per channel in flight, 4096 .. 2^30");
  } else if (strcmp(key, "max_message") == 0) {
    err = parse_size(value, UCX_MAX_MESSAGE_MIN, UCX_MAX_MESSAGE_MAX,
                     &settings.max_message);
    if (err < 0)
      snprintf(why, why_len, "bytes per message, 1024 .. 2^26");
  } else if (strcmp(key, "spread") == 0) {
    bool on = strcmp(value, "on") == 0, off = strcmp(value, "off") == 0;
    err = on || off || strcmp(value, "auto") == 0 ? 0 : WEFT_EINVAL;
    if (err == 0) {
      settings.spread = on;
      settings.spread_set = on || off;
    } else
      snprintf(why, why_len,
               "on (a server listens on every loop and spreads its "
               "connections), off (all on loop 0) or auto (on where "
               "UCX_TLS lists tcp lanes only)");
  } else if (strcmp(key, "keepalive_ms") == 0) {
    err = 0;
    if (strcmp(value, "0") == 0)
      settings.keepalive_ms = 0; /* off */
    else
      err = parse_ms(value, UCX_KEEPALIVE_MIN_MS, UCX_KEEPALIVE_MAX_MS,
                     &settings.keepalive_ms);
    if (err < 0)
      snprintf(why, why_len,
               "milliseconds between PINGs of a silent channel, %u .. %u, or "
               "0 (off)",
               UCX_KEEPALIVE_MIN_MS, UCX_KEEPALIVE_MAX_MS);
  } else if (strcmp(key, "hello_timeout_ms") == 0) {
    err = parse_ms(value, UCX_HELLO_MIN_MS, UCX_HELLO_MAX_MS,
                   &settings.hello_timeout_ms);
    if (err < 0)
      snprintf(why, why_len,
               "milliseconds an accepted connection may take to say HELLO, "
               "%u .. %u",
               UCX_HELLO_MIN_MS, UCX_HELLO_MAX_MS);
  }
  return err;
}

/* [transport.ucx] keys (the registry checked `key`); ctx_lock keeps them
 * consistent with a context being created on a loop thread. */
int weft__ucx_config_set(const char *key, const char *value, char *why,
                         size_t why_len) {
  pthread_mutex_lock(&ctx_lock);
  int err = setting_set(key, value, why, why_len);
  pthread_mutex_unlock(&ctx_lock);
  return err;
}

const weft_transport_key weft__ucx_keys[] = {
    {"tls", "", "a UCX_TLS list (e.g. tcp, or posix,sysv,cma,tcp)"},
    {"devices", "", "a UCX_NET_DEVICES list (e.g. lo, or mlx5_0:1)"},
    {"rndv_thresh", "",
     "bytes, inf (always eager) or auto (UCX_RNDV_THRESH); unset: inf where "
     "UCX_TLS lists tcp lanes only, else auto"},
    {"window", "1048576", "bytes per channel in flight, 4096 .. 2^30"},
    {"max_message", "65536", "bytes per message, 1024 .. 2^26"},
    {"error_mode", "peer", "peer or none"},
    {"spread", "auto",
     "auto (on where UCX_TLS lists tcp lanes only), on (a server's "
     "connections go to all its loops) or off"},
    {"keepalive_ms", "5000",
     "ms between PINGs of a silent channel (closed after 3 more, 12 with "
     "data in flight), 10 .. 3600000, or 0 (off)"},
    {"hello_timeout_ms", "10000",
     "ms an accepted connection may take to say HELLO (it counts against "
     "max_connections meanwhile), 100 .. 3600000"},
    {NULL, NULL, NULL}};
