/* The transport registry: name -> ops, with each probe's answer cached.
 *
 * At most WEFT__TRANSPORT_MAX entries, never removed, so a pointer to an
 * entry stays valid without the lock once it has been found. The built-ins
 * are added on the first use of the registry (pthread_once), so an
 * application that never names a transport pays nothing. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <weft/error.h>
#include <weft/transport.h>

#include "transports/endpoint_internal.h"
#include "transports/registry_internal.h"

#define WEFT__TRANSPORT_MAX 16

typedef struct entry {
  const weft_transport_ops *ops;
  bool probed;   /* guarded by probe_lock */
  int probe_rc;  /* the probe's result, 0 = can run here */
  char why[256]; /* the probe's sentence when probe_rc != 0 */
} entry;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static entry entries[WEFT__TRANSPORT_MAX]; /* guarded by reg_lock */
static int n_entries;                      /* guarded by reg_lock */

/* Probes run outside reg_lock: one may take milliseconds (creating a ring,
 * opening verbs devices) and must not block lookups of other names. Their
 * own lock makes each run exactly once. */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* Writes "unknown transport 'foo'; registered: tcp, uring". */
static void explain_unknown(const char *name, char *why, size_t why_len) {
  size_t off = (size_t)snprintf(why, why_len,
                                "unknown transport '%s'; registered:", name);
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < n_entries && off < why_len; i++)
    off += (size_t)snprintf(why + off, why_len - off, "%s %s", i > 0 ? "," : "",
                            entries[i].ops->name);
  if (n_entries == 0 && off < why_len)
    snprintf(why + off, why_len - off, " none");
  pthread_mutex_unlock(&reg_lock);
}

/* Runs the probe on the first call and returns its cached result after. */
static int probe_once(entry *e, char *why, size_t why_len) {
  pthread_mutex_lock(&probe_lock);
  if (!e->probed) {
    e->probe_rc =
        e->ops->probe != NULL ? e->ops->probe(e->why, sizeof e->why) : 0;
    if (e->probe_rc != 0 && e->why[0] == '\0') /* a probe with no words */
      snprintf(e->why, sizeof e->why, "transport '%s' cannot run here: %s",
               e->ops->name, weft_strerror(e->probe_rc));
    e->probed = true;
  }
  int rc = e->probe_rc;
  if (rc != 0 && why != NULL && why_len > 0)
    snprintf(why, why_len, "%s", e->why);
  pthread_mutex_unlock(&probe_lock);
  return rc;
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
  ensure_builtin();
  pthread_mutex_lock(&reg_lock);
  entry *e = lookup_locked(name);
  pthread_mutex_unlock(&reg_lock);
  if (e == NULL) {
    if (why_len > 0)
      explain_unknown(name, why, why_len);
    return NULL;
  }
  return probe_once(e, why, why_len) == 0 ? e->ops : NULL;
}
