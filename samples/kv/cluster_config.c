/* SPDX-License-Identifier: Apache-2.0 */
/* The [cluster] section of weft-kv-server's config (cluster.h): the
 * switch, which node this server is, one line per node with its
 * addresses and slots, and where the node keeps its slot map
 * (config_file, cluster_state.c). Each line is checked as it is read, so an
 * error names the file and line (the config code's prefix) and says what is
 * valid. */
#include "cluster.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/error.h>

#include "auth.h"

#define NODE_FORM                                                              \
  "expected NAME HOST:PORT [rpc=HOST:PORT] [slots=FIRST-LAST,...] "            \
  "[id=40 hex digits]"

void kv_cluster_options_init(kv_cluster_options *o) {
  memset(o, 0, sizeof *o);
  memset(o->owner, KV_CLUSTER_NO_NODE, sizeof o->owner);
}

int kv_cluster_default_config_file(kv_cluster_options *o, const char *ini) {
  if (o->config_file[0] != '\0' || ini == NULL || ini[0] == '\0')
    return 0;
  const char *base = strrchr(ini, '/');
  base = base != NULL ? base + 1 : ini;
  const char *dot = strrchr(base, '.');
  size_t stem = dot != NULL && dot != base ? (size_t)(dot - ini) : strlen(ini);
  int n = snprintf(o->config_file, sizeof o->config_file, "%.*s.nodes.conf",
                   (int)stem, ini);
  if (n < 0 || (size_t)n >= sizeof o->config_file) {
    o->config_file[0] = '\0';
    return WEFT_EINVAL;
  }
  return 0;
}

/* The default id of node `name`: SHA-256("weft-kv-cluster " name) in hex,
 * cut at 40 digits, so every node's config derives the same id. */
static void default_id(const char *name, char id[KV_CLUSTER_ID_LEN + 1]) {
  char text[KV_CLUSTER_NAME_MAX + 32];
  uint8_t d[KV_SHA256_BYTES];
  int n = snprintf(text, sizeof text, "weft-kv-cluster %s", name);
  kv_sha256(text, (size_t)n, d);
  for (int i = 0; i < KV_CLUSTER_ID_LEN / 2; i++)
    snprintf(id + 2 * i, 3, "%02x", d[i]);
}

/* One word of a line: [*p, *p + *len), advancing `*s` past it. */
static bool next_word(const char **s, const char **p, size_t *len) {
  while (**s == ' ' || **s == '\t')
    (*s)++;
  if (**s == '\0')
    return false;
  *p = *s;
  while (**s != '\0' && **s != ' ' && **s != '\t')
    (*s)++;
  *len = (size_t)(*s - *p);
  return true;
}

static bool parse_uint(const char *s, size_t len, unsigned max, unsigned *out) {
  unsigned v = 0;
  if (len == 0 || len > 5)
    return false;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i]))
      return false;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v > max)
    return false;
  *out = v;
  return true;
}

/* "HOST:PORT" or "[v6]:PORT" of `len` bytes into host and port. */
static bool parse_addr(const char *s, size_t len, char *host, int *port) {
  const char *colon = NULL;
  for (size_t i = len; i > 0 && colon == NULL; i--)
    if (s[i - 1] == ':')
      colon = s + i - 1;
  if (colon == NULL)
    return false;
  const char *h = s;
  size_t hl = (size_t)(colon - s);
  if (hl >= 2 && h[0] == '[') { /* "[v6]:port": kept without brackets */
    if (h[hl - 1] != ']')
      return false;
    h++, hl -= 2;
  }
  unsigned p;
  if (hl == 0 || hl >= KV_CLUSTER_HOST_MAX ||
      !parse_uint(colon + 1, (size_t)(s + len - colon - 1), 65535, &p) ||
      p == 0)
    return false;
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return true;
}

/* "A-B,C,..." into `o->owner` for node `idx`; a slot given to another node
 * already is an error naming both. */
static int parse_slots(kv_cluster_options *o, uint8_t idx, const char *s,
                       size_t len, char *err, size_t err_len) {
  const char *end = s + len;
  while (s < end) {
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *stop = comma != NULL ? comma : end;
    const char *dash = memchr(s, '-', (size_t)(stop - s));
    unsigned a, b;
    bool ok = dash != NULL ? parse_uint(s, (size_t)(dash - s), 16383, &a) &&
                                 parse_uint(dash + 1, (size_t)(stop - dash - 1),
                                            16383, &b)
                           : parse_uint(s, (size_t)(stop - s), 16383, &a);
    if (dash == NULL)
      b = a;
    if (!ok || a > b) {
      snprintf(err, err_len,
               "slots=%.*s: expected slot ranges FIRST-LAST or single slots, "
               "separated by commas, each from 0 to 16383, FIRST <= LAST",
               (int)len, end - len);
      return WEFT_EINVAL;
    }
    for (unsigned i = a; i <= b; i++) {
      if (o->owner[i] != KV_CLUSTER_NO_NODE && o->owner[i] != idx) {
        snprintf(err, err_len,
                 "slot %u is given to node %s already; every slot belongs to "
                 "one node",
                 i, o->nodes[o->owner[i]].name);
        return WEFT_EINVAL;
      }
    }
    for (unsigned i = a; i <= b; i++)
      o->owner[i] = idx;
    s = stop + (comma != NULL);
  }
  return 0;
}

static bool valid_name(const char *s, size_t len) {
  if (len == 0 || len > KV_CLUSTER_NAME_MAX)
    return false;
  for (size_t i = 0; i < len; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
      return false;
  return true;
}

static bool valid_id(const char *s, size_t len) {
  if (len != KV_CLUSTER_ID_LEN)
    return false;
  for (size_t i = 0; i < len; i++)
    if (!isxdigit((unsigned char)s[i]))
      return false;
  return true;
}

/* The options after the address: rpc=, slots=, id=. */
static int parse_options(kv_cluster_options *o, kv_cluster_node *n,
                         const char *rest, char *err, size_t err_len) {
  const char *w;
  size_t len;
  uint8_t idx = (uint8_t)o->n_nodes;
  while (next_word(&rest, &w, &len)) {
    if (len > 4 && strncmp(w, "rpc=", 4) == 0) {
      if (!parse_addr(w + 4, len - 4, n->rpc_host, &n->rpc_port)) {
        snprintf(err, err_len, "%.*s: expected rpc=HOST:PORT (port 1-65535)",
                 (int)len, w);
        return WEFT_EINVAL;
      }
    } else if (len > 6 && strncmp(w, "slots=", 6) == 0) {
      int rc = parse_slots(o, idx, w + 6, len - 6, err, err_len);
      if (rc < 0)
        return rc;
    } else if (len > 3 && strncmp(w, "id=", 3) == 0) {
      if (!valid_id(w + 3, len - 3)) {
        snprintf(err, err_len, "%.*s: expected id= and 40 hex digits", (int)len,
                 w);
        return WEFT_EINVAL;
      }
      memcpy(n->id, w + 3, KV_CLUSTER_ID_LEN);
      for (int i = 0; i < KV_CLUSTER_ID_LEN; i++)
        n->id[i] = (char)tolower((unsigned char)n->id[i]);
    } else {
      snprintf(err, err_len, "unknown word '%.*s': %s", (int)len, w, NODE_FORM);
      return WEFT_EINVAL;
    }
  }
  return 0;
}

/* A node that repeats another's name, id or address. */
static const char *clash(const kv_cluster_options *o,
                         const kv_cluster_node *n) {
  for (size_t i = 0; i < o->n_nodes; i++) {
    const kv_cluster_node *m = &o->nodes[i];
    if (strcmp(m->name, n->name) == 0 || strcmp(m->id, n->id) == 0 ||
        (strcmp(m->host, n->host) == 0 && m->port == n->port))
      return m->name;
  }
  return NULL;
}

static int parse_node(kv_cluster_options *o, const char *value, char *err,
                      size_t err_len) {
  if (o->n_nodes == KV_CLUSTER_NODES_MAX) {
    snprintf(err, err_len, "more than %d nodes", KV_CLUSTER_NODES_MAX);
    return WEFT_EINVAL;
  }
  kv_cluster_node n = {0};
  const char *rest = value, *w;
  size_t len;
  if (!next_word(&rest, &w, &len) || !valid_name(w, len)) {
    snprintf(err, err_len,
             "%s; NAME is 1 to %d letters, digits, '-', '_' or '.'", NODE_FORM,
             KV_CLUSTER_NAME_MAX);
    return WEFT_EINVAL;
  }
  memcpy(n.name, w, len);
  if (!next_word(&rest, &w, &len) || !parse_addr(w, len, n.host, &n.port)) {
    snprintf(err, err_len, "%s; HOST:PORT is the node's RESP address",
             NODE_FORM);
    return WEFT_EINVAL;
  }
  default_id(n.name, n.id);
  uint8_t saved[KV_CLUSTER_SLOTS];
  memcpy(saved, o->owner, sizeof saved);
  int rc = parse_options(o, &n, rest, err, err_len);
  const char *other = rc == 0 ? clash(o, &n) : NULL;
  if (other != NULL) {
    snprintf(err, err_len, "node %s repeats the name, id or address of node %s",
             n.name, other);
    rc = WEFT_EINVAL;
  }
  if (rc < 0) {
    memcpy(o->owner, saved, sizeof saved);
    return rc;
  }
  o->nodes[o->n_nodes++] = n;
  return 0;
}

int kv_cluster_config_key(kv_cluster_options *o, const char *key,
                          const char *value, char *err, size_t err_len) {
  if (strcmp(key, "enabled") == 0) {
    if (!strcasecmp(value, "yes") || !strcasecmp(value, "true") ||
        !strcasecmp(value, "on") || !strcmp(value, "1"))
      o->enabled = true;
    else if (!strcasecmp(value, "no") || !strcasecmp(value, "false") ||
             !strcasecmp(value, "off") || !strcmp(value, "0"))
      o->enabled = false;
    else {
      snprintf(err, err_len, "expected yes or no (true, false, on, off, 1, 0)");
      return WEFT_EINVAL;
    }
    return 0;
  }
  if (strcmp(key, "myself") == 0) {
    if (!valid_name(value, strlen(value))) {
      snprintf(err, err_len,
               "expected the NAME of one of the node lines (1 to %d letters, "
               "digits, '-', '_' or '.')",
               KV_CLUSTER_NAME_MAX);
      return WEFT_EINVAL;
    }
    strcpy(o->myself, value);
    return 0;
  }
  if (strcmp(key, "node") == 0)
    return parse_node(o, value, err, err_len);
  if (strcmp(key, "config_file") == 0) {
    if (strlen(value) >= sizeof o->config_file) {
      snprintf(err, err_len, "expected a path of at most %zu bytes",
               sizeof o->config_file - 1);
      return WEFT_EINVAL;
    }
    strcpy(o->config_file, value);
    return 0;
  }
  return WEFT_ENOENT;
}

int kv_cluster_options_check(const kv_cluster_options *o, char *err,
                             size_t err_len) {
  if (!o->enabled)
    return 0;
  for (size_t i = 0; i < o->n_nodes; i++)
    if (strcmp(o->nodes[i].name, o->myself) == 0)
      return 0;
  int n = snprintf(err, err_len,
                   "[cluster] myself = \"%s\" names no [cluster] node line; "
                   "the nodes are:",
                   o->myself);
  for (size_t i = 0; i < o->n_nodes && n > 0 && (size_t)n < err_len; i++)
    n += snprintf(err + n, err_len - (size_t)n, " %s", o->nodes[i].name);
  if (o->n_nodes == 0 && n > 0 && (size_t)n < err_len)
    snprintf(err + n, err_len - (size_t)n,
             " (none: add one 'node = NAME HOST:PORT ...' line per node)");
  return WEFT_EINVAL;
}
