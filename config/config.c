/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration: an INI file (libinih), WEFT_* environment variables and
 * single keys set by the application, all through one table of keys.
 *
 * Every key weft knows is one row of a table below: its section, name,
 * kind, where it lives in weft_config and its valid range. The loader, the
 * environment and weft_config_set all go through weft_config_set, so a key
 * is checked the same way wherever it comes from, and the error messages
 * can list the valid keys and sections from the same rows. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include <weft/config.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "channel/endpoint_internal.h"
#include "channel/registry_internal.h"
#include "config/config_internal.h"

#define OFF(field) offsetof(weft_config, field)

static const weft__key_def loop_keys[] = {
    {"loops", KIND_INT, OFF(loop.n_loops), 0, 1024, false,
     "number of event loops; 0 = one per CPU less one, at least 1"},
    {"busy_poll_us", KIND_INT, OFF(loop.busy_poll_us), -1, INT_MAX, false,
     "microseconds; 0 = always block, -1 = never block"},
    {"busy_poll_adaptive", KIND_BOOL, OFF(loop.busy_poll_adaptive), 0, 0, false,
     "window in 0..busy_poll_us: halves on wasted spins and preemption, 0 "
     "after 8 missed spins, doubles when events follow a sleep"},
    {"pin", KIND_BOOL, OFF(loop.pin), 0, 0, false,
     "pin loop i to CPU i of the affinity mask; pays only on CPUs the "
     "process has to itself (taskset/cpuset, nothing else busy)"},
    {"poll_budget", KIND_INT, OFF(loop.poll_budget), 1, 65536, false,
     "events one source handles per poll"},
    {"pool_retain_bytes", KIND_SIZE, OFF(loop.pool_retain_bytes), 0, INT64_MAX,
     false,
     "bytes of empty buffer slabs each loop keeps; the rest goes back to the "
     "system"},
};

/* so_sndbuf/so_rcvbuf: 0 means "leave the kernel's default", which the
 * channel config spells -1 (0 is a real value for setsockopt). */
static const weft__key_def transport_keys[] = {
    {"name", KIND_SCHEME, OFF(transport), 0, 0, false, NULL},
    {"tcp_nodelay", KIND_FLAG, OFF(channel.tcp_nodelay), 0, 0, false, NULL},
    {"so_sndbuf", KIND_INT, OFF(channel.so_sndbuf), 0, INT_MAX, true,
     "bytes; 0 = the kernel's default"},
    {"so_rcvbuf", KIND_INT, OFF(channel.so_rcvbuf), 0, INT_MAX, true,
     "bytes; 0 = the kernel's default"},
    {"so_keepalive", KIND_FLAG, OFF(channel.so_keepalive), 0, 0, false, NULL},
    {"write_low_watermark", KIND_I64, OFF(channel.write_low_watermark), 0,
     INT64_MAX, false, "bytes"},
    {"write_high_watermark", KIND_I64, OFF(channel.write_high_watermark), 1,
     INT64_MAX, false, "bytes"},
    {"connect_timeout_ms", KIND_INT, OFF(channel.connect_timeout_ms), 0,
     INT_MAX, false, "milliseconds; 0 = no timeout"},
    {"max_messages_per_read", KIND_INT, OFF(channel.max_messages_per_read), 1,
     WEFT_MAX_MESSAGES_PER_READ_MAX, false,
     "reads a channel fires per loop iteration before it yields to the "
     "loop's other channels (Netty's maxMessagesPerRead)"},
    {"max_bytes_per_read", KIND_I64, OFF(channel.max_bytes_per_read), 1,
     WEFT_MAX_BYTES_PER_READ_MAX, false,
     "bytes a channel reads per loop iteration before it yields to the "
     "loop's other channels"},
};

static const weft__key_def server_keys[] = {
    {"listen", KIND_URI, OFF(listen), 0, 0, false, NULL},
    {"backlog", KIND_INT, OFF(backlog), 1, INT_MAX, false,
     "connections the kernel queues before accept"},
    {"max_connections", KIND_INT, OFF(max_connections), 0, INT_MAX, false,
     "accepted connections open at once; past it a new one is closed; 0 = "
     "no limit"},
    {"idle_timeout_ms", KIND_INT, OFF(idle_timeout_ms), 0, INT_MAX, false,
     "milliseconds without a read before a connection is closed; 0 = never"},
    {"output_limit", KIND_I64, OFF(output_limit), 0, INT64_MAX, false,
     "bytes queued and unsent before a connection is closed; 0 = no limit"},
    {"flow_control", KIND_FLAG, OFF(flow_control), 0, 0, false, NULL},
};

static const weft__key_def client_keys[] = {
    {"connect", KIND_URI, OFF(connect), 0, 0, false, NULL},
};

#define SECTION(name, keys)                                                    \
  { name, keys, sizeof keys / sizeof keys[0] }
static const weft__section_def sections[] = {
    SECTION("loop", loop_keys),
    SECTION("transport", transport_keys),
    SECTION("server", server_keys),
    SECTION("client", client_keys),
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

#define BOOL_VALUES "true, false, yes, no, on, off, 1, 0"

/* ---- small helpers ---- */

/* Appends printf-style text to a message buffer, truncating safely. */
static void msg_append(char *err, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void msg_append(char *err, size_t len, size_t *off, const char *fmt,
                       ...) {
  if (err == NULL || *off >= len)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err + *off, len - *off, fmt, ap);
  va_end(ap);
  if (n > 0)
    *off += (size_t)n;
}

static void msg_where(char *err, size_t len, size_t *off, const char *where) {
  if (where != NULL && where[0] != '\0')
    msg_append(err, len, off, "%s: ", where);
}

/* " tcp, uring, ucx": the registered transports. */
static void list_transports(char *err, size_t len, size_t *off) {
  const weft_transport_ops *ops;
  for (size_t i = 0; (ops = weft_transport_at(i)) != NULL; i++)
    msg_append(err, len, off, "%s %s", i > 0 ? "," : "", ops->name);
}

static const weft__section_def *find_section(const char *name) {
  for (size_t i = 0; i < N_SECTIONS; i++)
    if (strcmp(sections[i].name, name) == 0)
      return &sections[i];
  return NULL;
}

static const weft__key_def *find_key(const weft__section_def *s,
                                     const char *name) {
  for (size_t i = 0; i < s->n_keys; i++)
    if (strcmp(s->keys[i].name, name) == 0)
      return &s->keys[i];
  return NULL;
}

/* Strict: the whole text is one decimal integer, nothing around it. */
static bool parse_int(const char *s, long long *out) {
  if (!(isdigit((unsigned char)s[0]) ||
        ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
    return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE || *end != '\0')
    return false;
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"};
  static const char *const no[] = {"false", "no", "off", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0)
      return *out = true, true;
    if (strcasecmp(s, no[i]) == 0)
      return *out = false, true;
  }
  return false;
}

/* ---- one value: parse, check, store ---- */

/* Writes the valid values of `k` ("an integer from 0 to 1024 (...)"). */
static void explain_values(const weft__key_def *k, char *err, size_t len,
                           size_t *off) {
  switch (k->kind) {
  case KIND_INT:
  case KIND_I64:
  case KIND_SIZE:
    if (k->max == INT_MAX || k->max == INT64_MAX)
      msg_append(err, len, off, "an integer >= %lld (%s)", k->min, k->hint);
    else
      msg_append(err, len, off, "an integer from %lld to %lld (%s)", k->min,
                 k->max, k->hint);
    break;
  case KIND_BOOL:
  case KIND_FLAG:
    msg_append(err, len, off, "a boolean (valid values: " BOOL_VALUES ")");
    break;
  case KIND_SCHEME:
    msg_append(err, len, off,
               "a transport name: 1 to %d lowercase letters or digits, "
               "starting with a letter (registered:",
               WEFT__SCHEME_MAX);
    list_transports(err, len, off);
    msg_append(err, len, off, ")");
    break;
  case KIND_URI:
    msg_append(err, len, off,
               "host:port or scheme://host:port, e.g. 0.0.0.0:7000 "
               "or tcp://0.0.0.0:7000");
    break;
  }
}

/* Writes the "expected ..." part of a bad-value message for `k`. */
static void explain_expected(const weft__key_def *k, char *err, size_t len,
                             size_t *off) {
  msg_append(err, len, off, "expected ");
  explain_values(k, err, len, off);
}

void weft__config_values_text(const weft__key_def *k, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  explain_values(k, buf, len, &off);
  /* An integer's hint is in its values already; a boolean's says what it
   * switches (--help shows this text). */
  if ((k->kind == KIND_BOOL || k->kind == KIND_FLAG) && k->hint != NULL)
    msg_append(buf, len, &off, "; %s", k->hint);
}

void weft__config_value_text(const weft_config *cfg, const weft__key_def *k,
                             char *buf, size_t len) {
  const char *field = (const char *)cfg + k->off;
  long long n = 0;
  switch (k->kind) {
  case KIND_INT:
  case KIND_FLAG:
    n = *(const int *)(const void *)field;
    break;
  case KIND_I64:
    n = *(const int64_t *)(const void *)field;
    break;
  case KIND_SIZE: /* may exceed what a long long holds (SIZE_MAX) */
    snprintf(buf, len, "%zu", *(const size_t *)(const void *)field);
    return;
  case KIND_BOOL:
    snprintf(buf, len, "%s",
             *(const bool *)(const void *)field ? "true" : "false");
    return;
  case KIND_SCHEME:
  case KIND_URI:
    snprintf(buf, len, "%s", field);
    return;
  }
  if (k->kind == KIND_FLAG)
    snprintf(buf, len, "%s", n ? "true" : "false");
  else
    snprintf(buf, len, "%lld", k->zero_is_unset && n < 0 ? 0 : n);
}

const weft__section_def *weft__config_sections(size_t *n) {
  *n = N_SECTIONS;
  return sections;
}

static bool store_int(weft_config *cfg, const weft__key_def *k, const char *v) {
  long long n;
  if (!parse_int(v, &n) || n < k->min || n > k->max)
    return false;
  if (k->zero_is_unset && n == 0)
    n = -1;
  char *field = (char *)cfg + k->off;
  if (k->kind == KIND_I64)
    *(int64_t *)(void *)field = (int64_t)n;
  else if (k->kind == KIND_SIZE)
    *(size_t *)(void *)field = (size_t)n;
  else
    *(int *)(void *)field = (int)n;
  return true;
}

static bool store_bool(weft_config *cfg, const weft__key_def *k,
                       const char *v) {
  bool b;
  if (!parse_bool(v, &b))
    return false;
  char *field = (char *)cfg + k->off;
  if (k->kind == KIND_BOOL)
    *(bool *)(void *)field = b;
  else
    *(int *)(void *)field = b ? 1 : 0;
  return true;
}

/* A URI is checked now, so a typo is reported with its file and line; an
 * endpoint without a scheme is checked as if it had one, since the scheme
 * comes from [transport] name, which may follow. `why` gets the detail. */
static bool store_uri(weft_config *cfg, const weft__key_def *k, const char *v,
                      const char **why) {
  weft_endpoint ep;
  if (strlen(v) >= WEFT_CONFIG_URI_MAX) {
    *why = "longer than 299 characters";
    return false;
  }
  *why = weft__endpoint_parse_or(v, "any", &ep);
  if (*why != NULL)
    return false;
  if (strstr(v, "://") != NULL && !weft__transport_registered(ep.transport)) {
    *why = "its scheme names no registered transport";
    return false;
  }
  snprintf((char *)cfg + k->off, WEFT_CONFIG_URI_MAX, "%s", v);
  return true;
}

static bool store_value(weft_config *cfg, const weft__key_def *k, const char *v,
                        const char **why) {
  *why = NULL;
  switch (k->kind) {
  case KIND_INT:
  case KIND_I64:
  case KIND_SIZE:
    return store_int(cfg, k, v);
  case KIND_BOOL:
  case KIND_FLAG:
    return store_bool(cfg, k, v);
  case KIND_SCHEME:
    if (!weft__scheme_valid(v, strlen(v)))
      return false;
    if (!weft__transport_registered(v)) {
      *why = "no transport of that name is registered";
      return false;
    }
    snprintf(cfg->transport, sizeof cfg->transport, "%s", v);
    return true;
  case KIND_URI:
    return store_uri(cfg, k, v, why);
  }
  return false;
}

/* ---- error messages ---- */

static int bad_value(const char *where, const char *section,
                     const weft__key_def *k, const char *value, const char *why,
                     char *err, size_t len) {
  size_t off = 0;
  msg_where(err, len, &off, where);
  msg_append(err, len, &off, "[%s] %s = \"%s\": ", section, k->name, value);
  if (why != NULL)
    msg_append(err, len, &off, "%s; ", why);
  explain_expected(k, err, len, &off);
  return WEFT_EBADCONF;
}

/* " (did you mean X?)" when a candidate is close. */
static void did_you_mean(const weft__suggest *sg, char *err, size_t len,
                         size_t *off) {
  if (weft__suggest_best(sg) != NULL)
    msg_append(err, len, off, " (did you mean %s?)", weft__suggest_best(sg));
}

static int unknown_key(const char *where, const weft__section_def *s,
                       const char *key, char *err, size_t len) {
  size_t off = 0;
  weft__suggest sg;
  weft__suggest_init(&sg, key);
  for (size_t i = 0; i < s->n_keys; i++)
    weft__suggest_try(&sg, s->keys[i].name);
  msg_where(err, len, &off, where);
  msg_append(err, len, &off, "[%s] unknown key '%s'", s->name, key);
  did_you_mean(&sg, err, len, &off);
  msg_append(err, len, &off, "; valid keys:");
  for (size_t i = 0; i < s->n_keys; i++)
    msg_append(err, len, &off, "%s %s", i > 0 ? "," : "", s->keys[i].name);
  return WEFT_EBADCONF;
}

/* True if the application's table lists `section` (and `key`, if not
 * NULL). */
static bool app_has(const weft_config_key *keys, const char *section,
                    const char *key) {
  for (const weft_config_key *k = keys; k != NULL && k->section != NULL; k++)
    if (strcmp(k->section, section) == 0 &&
        (key == NULL || strcmp(k->name, key) == 0))
      return true;
  return false;
}

/* "loop, transport, server, client, kv; transport.<name> for a transport's
 * own keys (registered: tcp, uring)". */
static void list_sections(const weft_config_key *app, char *err, size_t len,
                          size_t *off) {
  for (size_t i = 0; i < N_SECTIONS; i++)
    msg_append(err, len, off, "%s %s", i > 0 ? "," : "", sections[i].name);
  for (const weft_config_key *k = app; k != NULL && k->section != NULL; k++)
    if (k == app || strcmp(k[-1].section, k->section) != 0)
      msg_append(err, len, off, ", %s", k->section);
  msg_append(err, len, off,
             "; transport.<name> for a transport's own keys (registered:");
  list_transports(err, len, off);
  msg_append(err, len, off, ")");
}

/* Without an application callback the section is simply unknown; so it is
 * when the application listed its keys (cfg->app_keys). With a callback
 * but no list, the application said "unknown" and weft cannot tell
 * whether it meant the section or the key, so the message names both. */
static int unknown_section(const weft_config *cfg, const char *where,
                           const char *section, const char *key, bool has_app,
                           char *err, size_t len) {
  size_t off = 0;
  weft__suggest sg;
  weft__suggest_init(&sg, section);
  for (size_t i = 0; i < N_SECTIONS; i++)
    weft__suggest_try(&sg, sections[i].name);
  for (const weft_config_key *k = cfg->app_keys; k != NULL && k->section; k++)
    weft__suggest_try(&sg, k->section);
  char plugin[16][32]; /* "transport.<name>", alive while `sg` is */
  const weft_transport_ops *ops;
  for (size_t i = 0; i < 16 && (ops = weft_transport_at(i)) != NULL; i++) {
    snprintf(plugin[i], sizeof plugin[i], "transport.%s", ops->name);
    weft__suggest_try(&sg, plugin[i]);
  }
  msg_where(err, len, &off, where);
  if (section[0] == '\0') {
    msg_append(err, len, &off,
               "key '%s' outside any section; valid "
               "sections:",
               key);
  } else if (!has_app || cfg->app_keys != NULL) {
    msg_append(err, len, &off, "unknown section [%s]", section);
    did_you_mean(&sg, err, len, &off);
    msg_append(err, len, &off, "; valid sections:");
  } else
    msg_append(err, len, &off,
               "[%s] unknown key '%s' (the application "
               "does not know it); weft's own sections:",
               section, key);
  list_sections(cfg->app_keys, err, len, &off);
  return WEFT_EBADCONF;
}

/* A key the application's table does not list, in a section it does. */
static int unknown_app_key(const weft_config *cfg, const char *where,
                           const char *section, const char *key, char *err,
                           size_t len) {
  size_t off = 0;
  weft__suggest sg;
  weft__suggest_init(&sg, key);
  for (const weft_config_key *k = cfg->app_keys; k->section != NULL; k++)
    if (strcmp(k->section, section) == 0)
      weft__suggest_try(&sg, k->name);
  msg_where(err, len, &off, where);
  msg_append(err, len, &off, "[%s] unknown key '%s'", section, key);
  did_you_mean(&sg, err, len, &off);
  msg_append(err, len, &off, "; valid keys:");
  const char *sep = "";
  for (const weft_config_key *k = cfg->app_keys; k->section != NULL; k++)
    if (strcmp(k->section, section) == 0) {
      msg_append(err, len, &off, "%s %s", sep, k->name);
      sep = ",";
    }
  return WEFT_EBADCONF;
}

static int app_value(const weft_config *cfg, const char *where,
                     const char *section, const char *key, const char *value,
                     weft_config_section_cb app, void *app_arg, char *err,
                     size_t len) {
  if (cfg->app_keys != NULL && !app_has(cfg->app_keys, section, NULL))
    return unknown_section(cfg, where, section, key, true, err, len);
  if (cfg->app_keys != NULL && !app_has(cfg->app_keys, section, key))
    return unknown_app_key(cfg, where, section, key, err, len);
  char why[512] = "";
  int rc = app(app_arg, section, key, value, why, sizeof why);
  if (rc == 0)
    return 0;
  if (rc == WEFT_ENOENT)
    return unknown_section(cfg, where, section, key, true, err, len);
  size_t off = 0;
  msg_where(err, len, &off, where);
  msg_append(err, len, &off, "[%s] %s = \"%s\": %s", section, key, value,
             why[0] != '\0' ? why : weft_strerror(rc));
  return WEFT_EBADCONF;
}

/* A key of a plugin's section: the registry checks it and hands it on. */
static int plugin_value(const char *where, const char *section, const char *key,
                        const char *value, char *err, size_t len) {
  char why[512] = "";
  int rc = weft_transport_config_set(section + 10, key, value, why, sizeof why);
  if (rc == 0)
    return 0;
  const weft_transport_ops *ops = NULL;
  for (size_t i = 0; (ops = weft_transport_at(i)) != NULL; i++)
    if (strcmp(ops->name, section + 10) == 0)
      break;
  size_t off = 0;
  msg_where(err, len, &off, where);
  if (rc != WEFT_ENOENT || ops == NULL) {
    msg_append(err, len, &off, "[%s] %s = \"%s\": %s", section, key, value,
               why);
    return WEFT_EBADCONF;
  }
  /* An unknown key of a known plugin: as for weft's own sections. */
  weft__suggest sg;
  weft__suggest_init(&sg, key);
  weft__suggest_try(&sg, "fallback");
  for (const weft_transport_key *k = ops->config_keys; k != NULL && k->name;
       k++)
    weft__suggest_try(&sg, k->name);
  msg_append(err, len, &off, "[%s] unknown key '%s'", section, key);
  did_you_mean(&sg, err, len, &off);
  msg_append(err, len, &off, "; valid keys: fallback");
  for (const weft_transport_key *k = ops->config_keys; k != NULL && k->name;
       k++)
    msg_append(err, len, &off, ", %s", k->name);
  return WEFT_EBADCONF;
}

/* ---- public entry points ---- */

void weft_config_init(weft_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  weft_loop_options_init(&cfg->loop);
  /* The first built-in transport, tcp: the portable baseline (the list is
   * transports/CMakeLists.txt's WEFT_TRANSPORTS). */
  snprintf(cfg->transport, sizeof cfg->transport, "%s",
           weft_transport_at(0)->name);
  /* The documented defaults, spelled out rather than -1, so that a config
   * shows what will be used and the watermark check compares real values. */
  cfg->channel = (weft_channel_config){
      .tcp_nodelay = 1,
      .so_sndbuf = -1,
      .so_rcvbuf = -1,
      .so_keepalive = 0,
      .write_low_watermark = 32 * 1024,
      .write_high_watermark = 64 * 1024,
      .connect_timeout_ms = 10000,
      .max_messages_per_read = WEFT_MAX_MESSAGES_PER_READ_DEFAULT,
      .max_bytes_per_read = WEFT_MAX_BYTES_PER_READ_DEFAULT,
  };
  snprintf(cfg->listen, sizeof cfg->listen, "0.0.0.0:7000");
  cfg->backlog = 511;
  cfg->flow_control = 1;
  cfg->output_limit = WEFT_SERVER_OUTPUT_LIMIT;
  snprintf(cfg->connect, sizeof cfg->connect, "127.0.0.1:7000");
}

const char *weft__config_unread(const weft_config *cfg, const char *section,
                                const char *key) {
  size_t sl = strlen(section), kl = strlen(key);
  for (size_t i = 0; cfg->unread_keys != NULL && cfg->unread_keys[i]; i++) {
    const char *u = cfg->unread_keys[i];
    if (strncmp(u, section, sl) == 0 && u[sl] == '.' &&
        strncmp(u + sl + 1, key, kl) == 0 && u[sl + 1 + kl] == '=')
      return u + sl + 1 + kl + 1;
  }
  return NULL;
}

/* 1 when the program reads `section` (or said nothing of what it reads). */
static bool section_read(const weft_config *cfg, const char *section) {
  if (cfg->read_sections == NULL)
    return true;
  const char *dot = strchr(section, '.'); /* transport.ucx -> transport */
  size_t len = dot != NULL ? (size_t)(dot - section) : strlen(section);
  for (size_t i = 0; cfg->read_sections[i] != NULL; i++)
    if (strlen(cfg->read_sections[i]) == len &&
        strncmp(cfg->read_sections[i], section, len) == 0)
      return true;
  return false;
}

/* A key the program would ignore: an error for -o (typed for this very
 * program), an info line from a file or the environment (shared by several
 * programs). Returns 0 to go on and set it, 1 when it was ignored with a
 * warning, or WEFT_EBADCONF. */
static int check_read(const weft_config *cfg, const char *where,
                      const char *section, const char *key, char *err,
                      size_t len) {
  /* A section nobody knows is reported as unknown, by the caller. */
  bool known = find_section(section) != NULL ||
               (strncmp(section, "transport.", 10) == 0 &&
                weft__transport_registered(section + 10)) ||
               app_has(cfg->app_keys, section, NULL);
  if (!known)
    return 0;
  const char *instead = weft__config_unread(cfg, section, key);
  bool read = section_read(cfg, section);
  if (read && instead == NULL)
    return 0;
  char why[512];
  size_t off = 0;
  if (!read) {
    msg_append(why, sizeof why, &off,
               "this program does not read [%s]; it reads", section);
    for (size_t i = 0; cfg->read_sections[i] != NULL; i++)
      msg_append(why, sizeof why, &off, "%s [%s]", i > 0 ? "," : "",
                 cfg->read_sections[i]);
  } else {
    msg_append(why, sizeof why, &off,
               "this program does not read [%s] %s; it reads %s instead",
               section, key, instead);
  }
  if (where != NULL && strncmp(where, "-o ", 3) == 0) {
    off = 0;
    msg_append(err, len, &off, "%s: %s", where, why);
    return WEFT_EBADCONF;
  }
  /* Info, not warn: one file (and one environment) may serve several
   * programs, each reading its own keys of it. */
  weft_log(WEFT_LOG_INFO, "%s: [%s] %s ignored: %s", where ? where : "config",
           section, key, why);
  return 1;
}

int weft_config_set(weft_config *cfg, const char *where, const char *section,
                    const char *key, const char *value,
                    weft_config_section_cb app, void *app_arg, char *err,
                    size_t err_len) {
  if (err == NULL)
    err_len = 0;
  if (section == NULL || key == NULL || value == NULL)
    return WEFT_EBADCONF;
  int read = check_read(cfg, where, section, key, err, err_len);
  if (read != 0)
    return read < 0 ? read : 0;
  /* [transport.<name>] belongs to that plugin, through the registry; a
   * section of a transport that is not registered may be the
   * application's. */
  if (strncmp(section, "transport.", 10) == 0 &&
      (app == NULL || weft__transport_registered(section + 10)))
    return plugin_value(where, section, key, value, err, err_len);
  const weft__section_def *s = find_section(section);
  if (s == NULL) {
    if (app != NULL && section[0] != '\0')
      return app_value(cfg, where, section, key, value, app, app_arg, err,
                       err_len);
    return unknown_section(cfg, where, section, key, false, err, err_len);
  }
  const weft__key_def *k = find_key(s, key);
  if (k == NULL)
    return unknown_key(where, s, key, err, err_len);
  const char *why;
  if (!store_value(cfg, k, value, &why))
    return bad_value(where, section, k, value, why, err, err_len);
  return 0;
}

int weft_config_set_option(weft_config *cfg, const char *spec,
                           weft_config_section_cb app, void *app_arg, char *err,
                           size_t err_len) {
  if (err == NULL)
    err_len = 0;
  char where[WEFT_CONFIG_URI_MAX + 64];
  snprintf(where, sizeof where, "-o %s", spec != NULL ? spec : "(null)");
  const char *eq = spec != NULL ? strchr(spec, '=') : NULL;
  const char *dot = eq;
  while (dot != NULL && dot > spec && *dot != '.')
    dot--;
  char section[128], key[64];
  size_t slen = dot != NULL ? (size_t)(dot - spec) : 0;
  size_t klen = dot != NULL ? (size_t)(eq - dot - 1) : 0;
  if (dot == NULL || *dot != '.' || slen == 0 || slen >= sizeof section ||
      klen == 0 || klen >= sizeof key) {
    size_t off = 0;
    msg_append(err, err_len, &off,
               "%s: expected section.key=value (the key is what follows the "
               "last dot before '='), e.g. -o loop.loops=1 or "
               "-o transport.ucx.tls=tcp",
               where);
    return WEFT_EBADCONF;
  }
  memcpy(section, spec, slen);
  section[slen] = '\0';
  memcpy(key, dot + 1, klen);
  key[klen] = '\0';
  return weft_config_set(cfg, where, section, key, eq + 1, app, app_arg, err,
                         err_len);
}

/* Checks what single keys cannot: relations between keys. */
static int check_relations(const weft_config *cfg, const char *where, char *err,
                           size_t len) {
  const weft_channel_config *ch = &cfg->channel;
  if (ch->write_low_watermark <= ch->write_high_watermark)
    return 0;
  size_t off = 0;
  msg_where(err, len, &off, where);
  msg_append(err, len, &off,
             "[transport] write_low_watermark = %lld is above "
             "write_high_watermark = %lld; write_low_watermark must be <= "
             "write_high_watermark",
             (long long)ch->write_low_watermark,
             (long long)ch->write_high_watermark);
  return WEFT_EBADCONF;
}

int weft_config_check(const weft_config *cfg, const char *where, char *err,
                      size_t err_len) {
  return check_relations(cfg, where, err, err != NULL ? err_len : 0);
}

/* ---- the file ---- */

/* State of one weft_config_load. Keys go into a copy of the config, which
 * replaces the caller's only if the whole file is good: a half-applied file
 * would leave a config that matches neither the file nor the defaults. */
typedef struct load_ctx {
  weft_config tmp;
  const char *path;
  FILE *f;
  int line;      /* lines read so far = the line being parsed */
  int fail_line; /* line of the first error we reported, 0 = none */
  weft_config_section_cb app;
  void *app_arg;
  char *err;
  size_t err_len;
} load_ctx;

/* inih's line reader, wrapped to count lines (the Debian build of libinih
 * does not pass line numbers to handlers), to stop at the first error
 * (its STOP_ON_FIRST_ERROR is off), and to refuse lines longer than its
 * buffer, which it would otherwise split into two lines silently. */
static char *read_line(char *str, int num, void *stream) {
  load_ctx *c = stream;
  if (c->fail_line != 0 || fgets(str, num, c->f) == NULL)
    return NULL;
  c->line++;
  size_t n = strlen(str);
  if (n == 0 || str[n - 1] == '\n')
    return str;
  int next = getc(c->f);
  if (next == EOF || next == '\n')
    return str; /* last line, or exactly full: the line is complete */
  c->fail_line = c->line;
  size_t off = 0;
  msg_append(c->err, c->err_len, &off,
             "%s:%d: line longer than %d "
             "characters (libinih's limit)",
             c->path, c->line, num - 1);
  return NULL;
}

static int on_key(void *user, const char *section, const char *key,
                  const char *value) {
  load_ctx *c = user;
  char where[4096 + 32];
  snprintf(where, sizeof where, "%s:%d", c->path, c->line);
  if (weft_config_set(&c->tmp, where, section, key, value, c->app, c->app_arg,
                      c->err, c->err_len) == 0)
    return 1;
  c->fail_line = c->line;
  return 0;
}

/* Turns what inih and the reader saw into one result and message. */
static int load_result(load_ctx *c, int ini_rc) {
  size_t off = 0;
  if (ini_rc > 0 && (c->fail_line == 0 || ini_rc < c->fail_line)) {
    msg_append(c->err, c->err_len, &off,
               "%s:%d: syntax error: expected "
               "[section], key = value, or a comment",
               c->path, ini_rc);
    return WEFT_EBADCONF;
  }
  if (c->fail_line != 0)
    return WEFT_EBADCONF;
  if (ini_rc < 0) {
    msg_append(c->err, c->err_len, &off, "%s: out of memory", c->path);
    return WEFT_ENOMEM;
  }
  if (ferror(c->f)) { /* e.g. a directory: fopen succeeds, reads fail */
    msg_append(c->err, c->err_len, &off, "%s: cannot read the file", c->path);
    return WEFT_EIO;
  }
  return check_relations(&c->tmp, c->path, c->err, c->err_len);
}

int weft_config_load(weft_config *cfg, const char *path,
                     weft_config_section_cb app, void *app_arg, char *err,
                     size_t err_len) {
  load_ctx c = {.tmp = *cfg,
                .path = path,
                .app = app,
                .app_arg = app_arg,
                .err = err,
                .err_len = err != NULL ? err_len : 0};
  size_t off = 0;
  c.f = fopen(path, "r");
  if (c.f == NULL) {
    int rc = -errno;
    msg_append(c.err, c.err_len, &off, "%s: cannot open the config file: %s",
               path, weft_strerror(rc));
    return rc;
  }
  int rc = load_result(&c, ini_parse_stream(read_line, &c, on_key, &c));
  fclose(c.f);
  if (rc == 0)
    *cfg = c.tmp;
  return rc;
}

/* ---- the environment ---- */

/* "transport.ucx", "rndv_thresh" -> "WEFT_TRANSPORT_UCX_RNDV_THRESH". */
static bool env_name(char *buf, size_t len, const char *section,
                     const char *key) {
  int n = snprintf(buf, len, "WEFT_%s_%s", section, key);
  if (n < 0 || (size_t)n >= len)
    return false;
  for (char *p = buf; *p != '\0'; p++)
    *p = isalnum((unsigned char)*p) ? (char)toupper((unsigned char)*p) : '_';
  return true;
}

static int env_one(weft_config *cfg, const char *section, const char *key,
                   weft_config_section_cb app, void *app_arg, char *err,
                   size_t len) {
  char var[256];
  if (!env_name(var, sizeof var, section, key))
    return 0; /* no such variable can be meant: nothing to apply */
  const char *v = getenv(var);
  if (v == NULL)
    return 0;
  return weft_config_set(cfg, var, section, key, v, app, app_arg, err, len);
}

/* "section.key" (the section may hold dots) -> one env_one. */
static int env_app_key(weft_config *cfg, const char *spec,
                       weft_config_section_cb app, void *app_arg, char *err,
                       size_t len) {
  const char *dot = strrchr(spec, '.');
  char section[128];
  size_t off = 0;
  if (dot == NULL || dot == spec || dot[1] == '\0' ||
      (size_t)(dot - spec) >= sizeof section) {
    msg_append(err, len, &off,
               "application key '%s': expected "
               "\"section.key\", e.g. \"kv.capacity\"",
               spec);
    return WEFT_EBADCONF;
  }
  memcpy(section, spec, (size_t)(dot - spec));
  section[dot - spec] = '\0';
  return env_one(cfg, section, dot + 1, app, app_arg, err, len);
}

/* WEFT_TRANSPORT_<NAME>_<KEY> for every registered plugin, now: flags
 * applied after this call then win over the environment. */
static int plugins_env(char *err, size_t len) {
  const weft_transport_ops *ops;
  for (size_t i = 0; (ops = weft_transport_at(i)) != NULL; i++) {
    int rc = weft__transport_env_apply(ops, true, err, len);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int weft_config_apply_env(weft_config *cfg, const char *const *app_keys,
                          weft_config_section_cb app, void *app_arg, char *err,
                          size_t err_len) {
  weft_config tmp = *cfg; /* all or nothing, as for a file */
  if (err == NULL)
    err_len = 0;
  for (size_t i = 0; i < N_SECTIONS; i++) {
    const weft__section_def *s = &sections[i];
    for (size_t j = 0; j < s->n_keys; j++) {
      int rc =
          env_one(&tmp, s->name, s->keys[j].name, app, app_arg, err, err_len);
      if (rc != 0)
        return rc;
    }
  }
  for (size_t i = 0; app_keys != NULL && app_keys[i] != NULL; i++) {
    int rc = env_app_key(&tmp, app_keys[i], app, app_arg, err, err_len);
    if (rc != 0)
      return rc;
  }
  for (const weft_config_key *k = tmp.app_keys; k != NULL && k->section != NULL;
       k++) {
    int rc = env_one(&tmp, k->section, k->name, app, app_arg, err, err_len);
    if (rc != 0)
      return rc;
  }
  int rc = check_relations(&tmp, "WEFT_* environment", err, err_len);
  if (rc == 0)
    rc = plugins_env(err, err_len);
  if (rc == 0)
    *cfg = tmp;
  return rc;
}

/* ---- WEFT_* variables that name no setting ---- */

/* Variables weft reads outside the configuration (log.c, pool.c, the bench
 * program), and the tests' prefix. */
static bool env_other(const char *name) {
  static const char *const other[] = {"WEFT_LOG_LEVEL", "WEFT_LEAK_DETECT",
                                      "WEFT_BENCH_LOOP_STATS", NULL};
  for (size_t i = 0; other[i] != NULL; i++)
    if (strcmp(name, other[i]) == 0)
      return true;
  return strncmp(name, "WEFT_TEST_", 10) == 0;
}

/* The closest candidate so far, kept in a buffer of its own (the
 * candidates' names are made one at a time). */
typedef struct env_match {
  const char *name; /* the variable's name */
  bool found;
  weft__suggest sg;
  char best[128];
} env_match;

static void env_try(env_match *m, const char *section, const char *key) {
  char var[128];
  if (m->found || !env_name(var, sizeof var, section, key))
    return;
  if (strcmp(var, m->name) == 0) {
    m->found = true;
    return;
  }
  const char *before = weft__suggest_best(&m->sg);
  weft__suggest_try(&m->sg, var);
  if (weft__suggest_best(&m->sg) != before) {
    snprintf(m->best, sizeof m->best, "%s", var);
    m->sg.best = m->best;
  }
}

static void env_check_one(const weft_config *cfg, const char *name) {
  env_match m = {.name = name};
  weft__suggest_init(&m.sg, name);
  for (size_t i = 0; i < N_SECTIONS; i++)
    for (size_t j = 0; j < sections[i].n_keys; j++)
      env_try(&m, sections[i].name, sections[i].keys[j].name);
  for (const weft_config_key *k = cfg->app_keys; k != NULL && k->section; k++)
    env_try(&m, k->section, k->name);
  const weft_transport_ops *ops;
  for (size_t i = 0; (ops = weft_transport_at(i)) != NULL; i++) {
    char section[48];
    snprintf(section, sizeof section, "transport.%s", ops->name);
    env_try(&m, section, "fallback");
    for (const weft_transport_key *k = ops->config_keys; k && k->name; k++)
      env_try(&m, section, k->name);
  }
  if (m.found)
    return;
  if (weft__suggest_best(&m.sg) != NULL)
    weft_log(WEFT_LOG_WARN,
             "environment: %s names no weft setting (did you mean %s?); "
             "ignored",
             name, weft__suggest_best(&m.sg));
  else
    weft_log(WEFT_LOG_WARN,
             "environment: %s names no weft setting; ignored (--help lists "
             "every key, WEFT_<SECTION>_<KEY>)",
             name);
}

extern char **environ;

void weft__config_env_check(const weft_config *cfg) {
  (void)weft_log_get_level(); /* reads WEFT_LOG_LEVEL now: a bad one is said */
  for (char **e = environ; *e != NULL; e++) {
    const char *eq = strchr(*e, '=');
    char name[128];
    if (strncmp(*e, "WEFT_", 5) != 0 || eq == NULL ||
        (size_t)(eq - *e) >= sizeof name)
      continue;
    memcpy(name, *e, (size_t)(eq - *e));
    name[eq - *e] = '\0';
    if (!env_other(name))
      env_check_one(cfg, name);
  }
}
