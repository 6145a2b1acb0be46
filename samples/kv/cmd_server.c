/* SPDX-License-Identifier: Apache-2.0 */
/* The server commands (command_internal.h): PING, ECHO, SELECT, TIME, CONFIG
 * GET and SET, INFO with its sections, and COMMAND (COUNT, DOCS, INFO) from the
 * command table, answered as Redis 7 answers them. */
#include "command_internal.h"
#include "conn_limits.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/version.h>

/* ---- PING, ECHO, SELECT ---- */

void kv_cmd_ping(const kv_call *c) {
  if (c->argc > 1)
    return kv_reply_arity(c);
  if (c->argc == 1)
    return c->ops->bulk(c->w, c->argv[0].ptr, c->argv[0].len, NULL);
  c->ops->simple(c->w, "PONG");
}

/* ECHO message: the message as a bulk string. */
void kv_cmd_echo(const kv_call *c) {
  c->ops->bulk(c->w, c->argv[0].ptr, c->argv[0].len, NULL);
}

/* One database: SELECT 0 only. */
void kv_cmd_select(const kv_call *c) {
  int64_t db;
  if (!kv_parse_i64(&c->argv[0], &db))
    return kv_reply_not_integer(c);
  if (db != 0)
    return c->ops->error(c->w, "ERR DB index is out of range");
  c->ops->simple(c->w, "OK");
}

/* TIME: the Unix time as seconds and microseconds (two bulk strings). */
void kv_cmd_time(const kv_call *c) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char sec[24], usec[24];
  snprintf(sec, sizeof sec, "%lld", (long long)ts.tv_sec);
  snprintf(usec, sizeof usec, "%ld", ts.tv_nsec / 1000);
  c->ops->array(c->w, 2);
  kv_reply_cstr(c, sec);
  kv_reply_cstr(c, usec);
}

/* ---- CONFIG GET, SET ---- */

/* The parameters CONFIG knows: those clients ask for, answered as a Redis
 * with persistence off would (redis-benchmark asks for save and
 * appendonly). `value` NULL: computed (config_value). `live`: CONFIG SET
 * may change it; the others are fixed facts or weft's config file's
 * ([kv] ..., [server] ...) and only their current value is accepted. */
static const struct {
  const char *name, *value;
  bool live;
} params[] = {
    {"save", "", false},
    {"appendonly", "no", false},
    {"databases", "1", false},
    {"maxmemory", "0", false},
    {"maxmemory-policy", "noeviction", false},
    {"protected-mode", NULL, true},
    {"port", NULL, false},
    {"tls-port", NULL, false},
    {"maxclients", NULL, false},
    {"hz", NULL, false},
};
enum { N_PARAMS = sizeof params / sizeof params[0] };

/* Parameter i's value now, in `buf` when computed. */
static const char *config_value(const kv_call *c, size_t i, char *buf,
                                size_t cap) {
  const kv_shared *sh = c->sess->shared;
  const char *name = params[i].name;
  if (params[i].value != NULL)
    return params[i].value;
  if (strcmp(name, "protected-mode") == 0)
    return atomic_load(&sh->protected_mode) ? "yes" : "no";
  int v = strcmp(name, "port") == 0       ? sh->resp_port
          : strcmp(name, "tls-port") == 0 ? sh->tls_port
          : strcmp(name, "hz") == 0       ? (int)sh->hz
                                          : sh->max_clients;
  snprintf(buf, cap, "%d", v);
  return buf;
}

/* CONFIG GET pattern [pattern ...]: a map of the parameters matching any
 * pattern. */
static void config_get(const kv_call *c) {
  if (c->argc < 2)
    return c->ops->error(
        c->w, "ERR wrong number of arguments for 'config|get' command");
  bool hit[N_PARAMS] = {false};
  size_t n = 0;
  for (size_t i = 0; i < N_PARAMS; i++)
    for (size_t a = 1; a < c->argc && !hit[i]; a++)
      if (c->argv[a].len <= KV_SCAN_PATTERN_MAX &&
          kv_glob_match(c->argv[a].ptr, c->argv[a].len, params[i].name,
                        strlen(params[i].name)))
        hit[i] = true, n++;
  c->ops->map(c->w, n);
  char buf[24];
  for (size_t i = 0; i < N_PARAMS; i++)
    if (hit[i]) {
      kv_reply_cstr(c, params[i].name);
      kv_reply_cstr(c, config_value(c, i, buf, sizeof buf));
    }
}

/* The parameter named `a`, or N_PARAMS. */
static size_t config_find(const kv_arg *a) {
  size_t i = 0;
  while (i < N_PARAMS && !kv_arg_is(a, params[i].name))
    i++;
  return i;
}

/* CONFIG SET parameter value [parameter value ...], all or nothing as in
 * Redis 7: protected-mode (yes or no) changes for the connections that
 * come next; another known parameter takes its current value only (weft
 * sets it in its config file); an unknown one is refused. */
static void config_set(const kv_call *c) {
  if (c->argc < 3 || c->argc % 2 == 0)
    return c->ops->error(
        c->w, "ERR wrong number of arguments for 'config|set' command");
  char msg[200], buf[24], name[64];
  int protected_mode = -1; /* the new value, once all are checked */
  for (size_t a = 1; a < c->argc; a += 2) {
    size_t i = config_find(&c->argv[a]);
    size_t n =
        c->argv[a].len < sizeof name - 1 ? c->argv[a].len : sizeof name - 1;
    memcpy(name, c->argv[a].ptr, n);
    name[n] = '\0';
    const kv_arg *v = &c->argv[a + 1];
    if (i == N_PARAMS)
      return kv_reply_errorf(
          c, "ERR Unknown option or number of arguments for CONFIG SET - '%s'",
          name);
    if (params[i].live) {
      if (!kv_arg_is(v, "yes") && !kv_arg_is(v, "no"))
        return kv_reply_errorf(c,
                               "ERR CONFIG SET failed (possibly related to "
                               "argument '%s') - argument must be 'yes' or "
                               "'no'",
                               name);
      protected_mode = kv_arg_is(v, "yes");
    } else if (!kv_arg_is(v, config_value(c, i, buf, sizeof buf))) {
      snprintf(msg, sizeof msg,
               "ERR CONFIG SET failed (possibly related to argument '%s') - "
               "weft-kv-server sets it in its config file, not at run time",
               name);
      return c->ops->error(c->w, msg);
    }
  }
  if (protected_mode >= 0)
    atomic_store(&c->sess->shared->protected_mode, protected_mode == 1);
  c->ops->simple(c->w, "OK");
}

/* CONFIG GET | SET | RESETSTAT | HELP. */
void kv_cmd_config(const kv_call *c) {
  if (kv_arg_is(&c->argv[0], "GET"))
    return config_get(c);
  if (kv_arg_is(&c->argv[0], "SET"))
    return config_set(c);
  if (kv_arg_is(&c->argv[0], "RESETSTAT") && c->argc == 1)
    return c->ops->simple(c->w, "OK"); /* INFO's counters stay */
  c->ops->error(c->w, "ERR CONFIG: only CONFIG GET and CONFIG SET "
                      "<parameter> <value> are supported");
}

/* ---- INFO ---- */

/* Bytes the process holds from malloc (glibc's count), 0 when unknown. */
static uint64_t heap_bytes(void) {
#ifdef __GLIBC__
  struct mallinfo2 mi = mallinfo2();
  return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
#else
  return 0;
#endif
}

/* Resident bytes of the process (/proc/self/statm), 0 when unknown. */
static uint64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, rss = 0;
  if (f == NULL)
    return 0;
  int n = fscanf(f, "%llu %llu", &size, &rss);
  fclose(f);
  return n == 2 ? rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* "1.50M": Redis' bytesToHuman. */
static void human(char *buf, size_t cap, uint64_t n) {
  static const char units[] = "BKMGTP";
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 5)
    v /= 1024, u++;
  if (u == 0)
    snprintf(buf, cap, "%" PRIu64 "B", n);
  else
    snprintf(buf, cap, "%.2f%c", v, units[u]);
}

/* INFO's server section. */
static void info_server(kv_text *t, const kv_shared *sh) {
  struct utsname u;
  if (uname(&u) != 0)
    memset(&u, 0, sizeof u);
  uint64_t up = (weft_now_ns() - sh->start_ns) / 1000000000u;
  kv_text_add(t,
              "# Server\r\nredis_version:%s\r\nweft_version:%s\r\n"
              "redis_mode:%s\r\nos:%s %s %s\r\narch_bits:%d\r\n"
              "multiplexing_api:%s\r\nprocess_id:%ld\r\nrun_id:%s\r\n"
              "tcp_port:%d\r\nweft_rpc_port:%d\r\nserver_time_usec:%" PRId64
              "\r\nuptime_in_seconds:%" PRIu64 "\r\nuptime_in_days:%" PRIu64
              "\r\nhz:%u\r\nconfigured_hz:%u\r\n",
              KV_REDIS_VERSION, weft_version(),
              sh->cluster != NULL ? "cluster" : "standalone", u.sysname,
              u.release, u.machine, (int)(sizeof(void *) * 8),
              sh->transport != NULL ? sh->transport : "", (long)getpid(),
              sh->run_id, sh->resp_port, sh->rpc_port, kv_unix_ms() * 1000, up,
              up / 86400, sh->hz, sh->hz);
}

/* INFO's clients section. */
static void info_clients(kv_text *t, const kv_shared *sh) {
  kv_text_add(t,
              "# Clients\r\nconnected_clients:%" PRIu64
              "\r\nmaxclients:%d\r\nblocked_clients:0\r\n",
              (uint64_t)atomic_load(&sh->connected_clients), sh->max_clients);
}

/* INFO's memory section: Redis' fields, and weft's bound on partial
 * commands (conn_limits.h): what they hold now, the bound, and the
 * connections closed by it or the per-connection limit. */
static void info_memory(kv_text *t, const kv_shared *sh,
                        const kv_store_stats *st) {
  uint64_t heap = heap_bytes(), rss = rss_bytes();
  char h[32], r[32];
  human(h, sizeof h, heap);
  human(r, sizeof r, rss);
  kv_text_add(t,
              "# Memory\r\nused_memory:%" PRIu64 "\r\nused_memory_human:%s\r\n"
              "used_memory_rss:%" PRIu64 "\r\nused_memory_rss_human:%s\r\n"
              "used_memory_dataset:%" PRIu64 "\r\nmaxmemory:0\r\n"
              "maxmemory_policy:noeviction\r\nmem_allocator:libc\r\n",
              heap, h, rss, r, st->mem_bytes);
  if (sh->limits != NULL)
    kv_text_add(t,
                "weft_query_buffers:%zu\r\nweft_query_buffers_max:%zu\r\n"
                "weft_client_query_buffer_limit:%zu\r\n"
                "weft_query_buffer_closes:%" PRIu64 "\r\n",
                atomic_load(&sh->limits->query_bytes), sh->limits->query_max,
                sh->limits->client_query_max,
                (uint64_t)atomic_load(&sh->limits->query_closed));
}

/* INFO's stats section: the server's and the store's counters. */
static void info_stats(kv_text *t, const kv_shared *sh,
                       const kv_store_stats *st) {
  uint64_t commands = 0;
  for (unsigned i = 0; i < sh->n_loops; i++)
    commands +=
        atomic_load_explicit(&sh->loops[i].commands, memory_order_relaxed);
  kv_text_add(t,
              "# Stats\r\ntotal_connections_received:%" PRIu64
              "\r\ntotal_commands_processed:%" PRIu64
              "\r\nrejected_connections:%" PRIu64 "\r\nexpired_keys:%" PRIu64
              "\r\nevicted_keys:0\r\nkeyspace_hits:%" PRIu64
              "\r\nkeyspace_misses:%" PRIu64 "\r\n",
              (uint64_t)atomic_load(&sh->total_connections), commands,
              (uint64_t)atomic_load(&sh->rejected_connections),
              st->expired_keys, st->hits, st->misses);
}

/* INFO's cluster section (redis-py's RedisCluster checks it). */
static void info_cluster(kv_text *t, const kv_shared *sh) {
  kv_text_add(t, "# Cluster\r\ncluster_enabled:%d\r\n", sh->cluster != NULL);
}

/* INFO's keyspace section. */
static void info_keyspace(kv_text *t, const kv_store_stats *st) {
  kv_text_add(t, "# Keyspace\r\n");
  if (st->keys > 0) /* Redis lists only databases with keys */
    kv_text_add(t, "db0:keys=%" PRIu64 ",expires=%" PRIu64 ",avg_ttl=0\r\n",
                st->keys, st->expires);
}

/* INFO [section ...]: server, clients, memory, stats, cluster, keyspace; none,
 * "default", "all" or "everything" for all of them. Unknown sections are
 * left out (an empty reply if nothing is left), as Redis does. */
void kv_cmd_info(const kv_call *c) {
  static const char *const names[] = {"server", "clients", "memory",
                                      "stats",  "cluster", "keyspace"};
  enum { N = sizeof names / sizeof names[0] };
  bool want[N];
  bool all = c->argc == 0;
  for (size_t a = 0; a < c->argc; a++)
    all = all || kv_arg_is(&c->argv[a], "default") ||
          kv_arg_is(&c->argv[a], "all") || kv_arg_is(&c->argv[a], "everything");
  for (size_t i = 0; i < N; i++) {
    want[i] = all;
    for (size_t a = 0; a < c->argc && !want[i]; a++)
      want[i] = kv_arg_is(&c->argv[a], names[i]);
  }
  kv_store_stats st;
  kv_store_stats_get(c->store, &st);
  const kv_shared *sh = c->sess->shared;
  kv_text t = {0};
  kv_text_add(&t, "%s", "");
  for (size_t i = 0; i < N; i++) {
    if (!want[i])
      continue;
    if (t.len > 0)
      kv_text_add(&t, "\r\n");
    switch (i) {
    case 0:
      info_server(&t, sh);
      break;
    case 1:
      info_clients(&t, sh);
      break;
    case 2:
      info_memory(&t, sh, &st);
      break;
    case 3:
      info_stats(&t, sh, &st);
      break;
    case 4:
      info_cluster(&t, sh);
      break;
    default:
      info_keyspace(&t, &st);
    }
  }
  if (t.failed)
    kv_reply_store_error(c, WEFT_ENOMEM);
  else
    c->ops->verbatim(c->w, t.buf, t.len);
  free(t.buf);
}

/* ---- COMMAND ---- */

/* The command's name in lower case into `buf`. */
static const char *lower(const kv_command *k, char *buf, size_t cap) {
  const char *upper = kv_cmd_name(k->id);
  size_t i = 0;
  for (; upper[i] != '\0' && i + 1 < cap; i++)
    buf[i] = (char)(upper[i] | 0x20);
  buf[i] = '\0';
  return buf;
}

/* One command's COMMAND INFO entry, Redis 7's ten fields (tips, key
 * specifications and subcommands empty). */
static void command_info(const kv_call *c, const kv_command *k) {
  char name[16];
  const char *flags[4];
  size_t nf = 0;
  if (k->flags & KV_CF_WRITE)
    flags[nf++] = "write";
  if (k->flags & KV_CF_READONLY)
    flags[nf++] = "readonly";
  if (k->flags & KV_CF_FAST)
    flags[nf++] = "fast";
  if (k->flags & KV_CF_NOAUTH)
    flags[nf++] = "no_auth";
  c->ops->array(c->w, 10);
  kv_reply_cstr(c, lower(k, name, sizeof name));
  c->ops->integer(c->w, k->arity);
  c->ops->array(c->w, nf);
  for (size_t i = 0; i < nf; i++)
    c->ops->simple(c->w, flags[i]);
  c->ops->integer(c->w, k->first_key);
  c->ops->integer(c->w, k->last_key);
  c->ops->integer(c->w, k->key_step);
  c->ops->array(c->w, 2);
  c->ops->simple(c->w, k->flags & KV_CF_WRITE ? "@write" : "@read");
  c->ops->simple(c->w, k->flags & KV_CF_FAST ? "@fast" : "@slow");
  c->ops->array(c->w, 0);
  c->ops->array(c->w, 0);
  c->ops->array(c->w, 0);
}

/* One command's COMMAND DOCS entry: name, then a map of summary, since,
 * group. */
static void command_docs(const kv_call *c, const kv_command *k) {
  char name[16];
  kv_reply_cstr(c, lower(k, name, sizeof name));
  c->ops->map(c->w, 3);
  kv_reply_cstr(c, "summary");
  kv_reply_cstr(c, k->summary);
  kv_reply_cstr(c, "since");
  kv_reply_cstr(c, k->since);
  kv_reply_cstr(c, "group");
  kv_reply_cstr(c, k->group);
}

/* The commands named by the arguments from `from` on (all of them when
 * there are none): into `out` (NULL where a name is unknown), returns how
 * many slots it filled. */
static size_t command_pick(const kv_call *c, size_t from,
                           const kv_command **out, size_t cap) {
  size_t n = 0, rows;
  const kv_command *t = kv_command_table(&rows);
  if (c->argc <= from) {
    for (size_t i = 0; i < rows && n < cap; i++)
      if (t[i].fn != NULL)
        out[n++] = &t[i];
    return n;
  }
  for (size_t a = from; a < c->argc && n < cap; a++)
    out[n++] =
        kv_command_find(kv_cmd_from_name(c->argv[a].ptr, c->argv[a].len));
  return n;
}

/* COMMAND [COUNT | DOCS [name ...] | INFO [name ...]]: from the table. */
void kv_cmd_command(const kv_call *c) {
  const kv_command *picked[1024]; /* one per argument: the decoders' most */
  enum { CAP = sizeof picked / sizeof picked[0] };
  if (c->argc >= 1 && kv_arg_is(&c->argv[0], "COUNT")) {
    if (c->argc != 1)
      return c->ops->error(
          c->w, "ERR wrong number of arguments for 'command|count' command");
    return c->ops->integer(c->w, (int64_t)command_pick(c, 1, picked, CAP));
  }
  if (c->argc >= 1 && kv_arg_is(&c->argv[0], "DOCS")) {
    size_t n = command_pick(c, 1, picked, CAP), found = 0;
    for (size_t i = 0; i < n; i++)
      found += picked[i] != NULL;
    c->ops->map(c->w, found);
    for (size_t i = 0; i < n; i++)
      if (picked[i] != NULL)
        command_docs(c, picked[i]);
    return;
  }
  bool info = c->argc >= 1 && kv_arg_is(&c->argv[0], "INFO");
  if (c->argc >= 1 && !info) {
    char sub[64];
    size_t n =
        c->argv[0].len < sizeof sub - 1 ? c->argv[0].len : sizeof sub - 1;
    memcpy(sub, c->argv[0].ptr, n);
    sub[n] = '\0';
    return kv_reply_errorf(c, "ERR unknown subcommand '%s'. Try COMMAND HELP.",
                           sub);
  }
  size_t n = command_pick(c, 1, picked, CAP);
  c->ops->array(c->w, n);
  for (size_t i = 0; i < n; i++)
    if (picked[i] == NULL)
      c->ops->null(c->w);
    else
      command_info(c, picked[i]);
}
