/* SPDX-License-Identifier: Apache-2.0 */
/* The transport registry: name -> ops, with each probe's answer cached,
 * each plugin's settings, and fallbacks.
 *
 * At most WEFT__TRANSPORT_MAX entries, never removed, so a pointer to an
 * entry stays valid without the lock once it has been found. The built-ins
 * are added on the first use of the registry (pthread_once), so an
 * application that never names a transport pays nothing.
 *
 * Settings: `[transport.<name>] key = value` reaches the plugin's
 * config_set through weft_transport_config_set, after the key was checked
 * against the plugin's list. The environment (WEFT_TRANSPORT_<NAME>_<KEY>)
 * is applied once per process and transport: by weft_config_apply_env when
 * the application calls it (so that -o flags applied after it win), or
 * else just before the transport's first per-loop instance starts. */
#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "channel/endpoint_internal.h"
#include "channel/registry_internal.h"

#define WEFT__TRANSPORT_MAX 16

typedef struct entry {
  const weft_transport_ops *ops;
  bool probed;          /* guarded by probe_lock */
  int probe_rc;         /* the probe's result, 0 = can run here */
  char why[256];        /* the probe's sentence when probe_rc != 0 */
  bool fallback_logged; /* guarded by probe_lock */
  char fallback[WEFT__SCHEME_MAX + 1]; /* guarded by config_lock; "" = none */
  bool env_applied;                    /* guarded by config_lock */
} entry;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static entry entries[WEFT__TRANSPORT_MAX]; /* guarded by reg_lock */
static int n_entries;                      /* guarded by reg_lock */

/* Probes run outside reg_lock: one may take milliseconds (creating a ring,
 * opening verbs devices) and must not block lookups of other names. Their
 * own lock makes each run exactly once. */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* Serialises settings (config_set of every plugin, fallbacks, the
 * environment), so plugins need no lock of their own for them. */
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void ensure_builtin(void) {
  pthread_once(&builtin_once, weft__transports_builtin);
}

/* reg_lock held. */
static entry *lookup_locked(const char *name) {
  for (int i = 0; i < n_entries; i++)
    if (strcmp(entries[i].ops->name, name) == 0)
      return &entries[i];
  return NULL;
}

static entry *lookup(const char *name) {
  ensure_builtin();
  pthread_mutex_lock(&reg_lock);
  entry *e = lookup_locked(name);
  pthread_mutex_unlock(&reg_lock);
  return e;
}

int weft__transport_register_builtin(const weft_transport_ops *ops) {
  if (ops == NULL || ops->name == NULL ||
      !weft__scheme_valid(ops->name, strlen(ops->name)))
    return WEFT_EINVAL; /* the name must work as a URI scheme */
  int rc = 0;
  pthread_mutex_lock(&reg_lock);
  if (lookup_locked(ops->name) != NULL)
    rc = WEFT_EEXIST;
  else if (n_entries == WEFT__TRANSPORT_MAX)
    rc = WEFT_ENOSPC;
  else
    entries[n_entries++] = (entry){.ops = ops};
  pthread_mutex_unlock(&reg_lock);
  return rc;
}

int weft_transport_register(const weft_transport_ops *ops) {
  /* Built-ins first, so that a second "tcp" is refused the same way
   * whether or not anything looked a transport up before. */
  ensure_builtin();
  return weft__transport_register_builtin(ops);
}

const weft_transport_ops *weft_transport_at(size_t i) {
  ensure_builtin();
  pthread_mutex_lock(&reg_lock);
  const weft_transport_ops *ops = i < (size_t)n_entries ? entries[i].ops : NULL;
  pthread_mutex_unlock(&reg_lock);
  return ops;
}

/* The registered transport `name`, or NULL having written "unknown
 * transport 'foo'; registered: tcp, uring" into `why`. */
static entry *lookup_or_explain(const char *name, char *why, size_t why_len) {
  entry *e = lookup(name);
  if (e != NULL || why == NULL || why_len == 0)
    return e;
  size_t off = (size_t)snprintf(why, why_len,
                                "unknown transport '%s'; registered:", name);
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < n_entries && off < why_len; i++)
    off += (size_t)snprintf(why + off, why_len - off, "%s %s", i > 0 ? "," : "",
                            entries[i].ops->name);
  if (n_entries == 0 && off < why_len)
    snprintf(why + off, why_len - off, " none");
  pthread_mutex_unlock(&reg_lock);
  return NULL;
}

/* Runs the probe on the first call and returns its cached result after;
 * probe_lock held. */
static int probe_once_locked(entry *e) {
  if (!e->probed) {
    /* The probe may start the library with the plugin's settings. */
    e->probe_rc =
        weft__transport_env_apply(e->ops, false, e->why, sizeof e->why);
    if (e->probe_rc == 0 && e->ops->probe != NULL)
      e->probe_rc = e->ops->probe(e->why, sizeof e->why);
    if (e->probe_rc != 0 && e->why[0] == '\0') /* a probe with no words */
      snprintf(e->why, sizeof e->why, "transport '%s' cannot run here: %s",
               e->ops->name, weft_strerror(e->probe_rc));
    e->probed = true;
  }
  return e->probe_rc;
}

static void fallback_of(entry *e, char *out, size_t len) {
  pthread_mutex_lock(&config_lock);
  snprintf(out, len, "%s", e->fallback);
  pthread_mutex_unlock(&config_lock);
}

/* `e` failed its probe: its configured fallback, probed, or NULL. A
 * fallback's own fallback is not followed (no chains, no cycles). */
static const weft_transport_ops *use_fallback(entry *e, char *why,
                                              size_t why_len) {
  char name[sizeof e->fallback];
  fallback_of(e, name, sizeof name);
  entry *fb = name[0] != '\0' ? lookup(name) : NULL;
  if (fb == NULL)
    return NULL;
  pthread_mutex_lock(&probe_lock);
  int rc = probe_once_locked(fb);
  if (rc == 0 && !e->fallback_logged) {
    e->fallback_logged = true;
    weft_log(WEFT_LOG_WARN,
             "%s; [transport.%s] fallback = %s: %s:// endpoints run over the "
             "%s transport",
             e->why, e->ops->name, name, e->ops->name, name);
  }
  if (rc != 0 && why_len > 0)
    snprintf(why, why_len, "%s; its fallback: %s", e->why, fb->why);
  pthread_mutex_unlock(&probe_lock);
  return rc == 0 ? fb->ops : NULL;
}

const weft_transport_ops *weft_transport_find(const char *name, char *why,
                                              size_t why_len) {
  if (why == NULL)
    why_len = 0; /* snprintf(NULL, 0, ...) only measures */
  if (name == NULL) {
    if (why_len > 0)
      snprintf(why, why_len, "no transport name given");
    return NULL;
  }
  entry *e = lookup_or_explain(name, why, why_len);
  if (e == NULL)
    return NULL;
  pthread_mutex_lock(&probe_lock);
  int rc = probe_once_locked(e);
  if (rc != 0 && why_len > 0)
    snprintf(why, why_len, "%s", e->why);
  pthread_mutex_unlock(&probe_lock);
  if (rc == 0)
    return e->ops;
  return use_fallback(e, why, why_len);
}

bool weft__transport_registered(const char *name) {
  return lookup(name) != NULL;
}

bool weft_transport_available(const char *name, char *why, size_t why_len) {
  return weft_transport_find(name, why, why_len) != NULL;
}

bool weft_transport_speaks_tcp(const char *name) {
  const weft_transport_ops *ops = weft_transport_find(name, NULL, 0);
  return ops != NULL && (ops->caps & WEFT_TRANSPORT_CAP_TCP) != 0;
}

uint32_t weft_endpoint_caps(const weft_endpoint *ep, char *why,
                            size_t why_len) {
  const weft_transport_ops *ops =
      weft_transport_find(ep != NULL ? ep->transport : NULL, why, why_len);
  if (ops == NULL)
    return 0;
  /* The public bits, from the plugin's own (transport_plugin.h). */
  static const struct {
    uint32_t plugin, app;
  } map[] = {{WEFT_TRANSPORT_CAP_TCP, WEFT_ENDPOINT_TCP},
             {WEFT_TRANSPORT_CAP_STREAM, WEFT_ENDPOINT_STREAM},
             {WEFT_TRANSPORT_CAP_HALF_CLOSE, WEFT_ENDPOINT_HALF_CLOSE}};
  uint32_t caps = WEFT_ENDPOINT_AVAILABLE;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (ops->caps & map[i].plugin)
      caps |= map[i].app;
  return caps;
}

/* ---- settings ---- */

static const weft_transport_key *find_key(const weft_transport_ops *ops,
                                          const char *key) {
  for (const weft_transport_key *k = ops->config_keys; k != NULL && k->name;
       k++)
    if (strcmp(k->name, key) == 0)
      return k;
  return NULL;
}

/* "unknown key 'x'; valid keys: fallback, tls, devices". */
static void explain_keys(const weft_transport_ops *ops, const char *key,
                         char *why, size_t why_len) {
  if (why_len == 0)
    return;
  size_t off = (size_t)snprintf(why, why_len,
                                "unknown key '%s'; valid keys: fallback", key);
  for (const weft_transport_key *k = ops->config_keys;
       k != NULL && k->name != NULL && off < why_len; k++)
    off += (size_t)snprintf(why + off, why_len - off, ", %s", k->name);
}

/* config_lock held. */
static int set_fallback_locked(entry *e, const char *value, char *why,
                               size_t why_len) {
  if (strcmp(value, "none") == 0) {
    e->fallback[0] = '\0';
    return 0;
  }
  if (strcmp(value, e->ops->name) != 0 && lookup(value) != NULL) {
    snprintf(e->fallback, sizeof e->fallback, "%s", value);
    return 0;
  }
  if (why_len > 0)
    snprintf(why, why_len,
             "another registered transport's name (used where %s cannot "
             "run), or none",
             e->ops->name);
  return WEFT_EINVAL;
}

/* config_lock held. */
static int set_locked(entry *e, const char *key, const char *value, char *why,
                      size_t why_len) {
  if (strcmp(key, "fallback") == 0)
    return set_fallback_locked(e, value, why, why_len);
  if (find_key(e->ops, key) == NULL || e->ops->config_set == NULL) {
    explain_keys(e->ops, key, why, why_len);
    return WEFT_ENOENT;
  }
  int rc = e->ops->config_set(key, value, why, why_len);
  return rc < 0 ? WEFT_EINVAL : 0;
}

int weft_transport_config_set(const char *name, const char *key,
                              const char *value, char *why, size_t why_len) {
  if (why == NULL)
    why_len = 0;
  if (name == NULL || key == NULL || value == NULL)
    return WEFT_EINVAL;
  entry *e = lookup_or_explain(name, why, why_len);
  if (e == NULL)
    return WEFT_ENOENT;
  pthread_mutex_lock(&config_lock);
  int rc = set_locked(e, key, value, why, why_len);
  pthread_mutex_unlock(&config_lock);
  return rc;
}

/* "ucx", "rndv_thresh" -> "WEFT_TRANSPORT_UCX_RNDV_THRESH". */
static void env_name(char *buf, size_t len, const char *transport,
                     const char *key) {
  snprintf(buf, len, "WEFT_TRANSPORT_%s_%s", transport, key);
  for (char *p = buf; *p != '\0'; p++)
    *p = isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_';
}

/* Applies one variable if set; config_lock held. */
static int env_key_locked(entry *e, const char *key, char *why,
                          size_t why_len) {
  char var[96], valid[256] = "";
  env_name(var, sizeof var, e->ops->name, key);
  const char *v = getenv(var);
  if (v == NULL)
    return 0;
  int rc = set_locked(e, key, v, valid, sizeof valid);
  if (rc < 0 && why_len > 0)
    snprintf(why, why_len, "%s = \"%s\": expected %s", var, v, valid);
  return rc < 0 ? WEFT_EBADCONF : 0;
}

/* config_lock held. */
static int env_apply_locked(entry *e, char *why, size_t why_len) {
  e->env_applied = true;
  int rc = env_key_locked(e, "fallback", why, why_len);
  for (const weft_transport_key *k = e->ops->config_keys;
       rc == 0 && k != NULL && k->name != NULL; k++)
    rc = env_key_locked(e, k->name, why, why_len);
  return rc;
}

int weft__transport_env_apply(const weft_transport_ops *ops, bool again,
                              char *why, size_t why_len) {
  entry *e = lookup(ops->name);
  if (e == NULL || e->ops != ops)
    return 0; /* not registered: it has no settings to take */
  pthread_mutex_lock(&config_lock);
  int rc = again || !e->env_applied ? env_apply_locked(e, why, why_len) : 0;
  pthread_mutex_unlock(&config_lock);
  return rc;
}
