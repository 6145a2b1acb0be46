/* SPDX-License-Identifier: Apache-2.0 */
/* The KV service (server.h): its options and [kv] keys, and its start and
 * stop: one shared store and the state every connection shares (command.h:
 * passwords, counters), served over weft RPC (rpc_server.c, any transport)
 * and RESP (resp_server.c, tcp and uring), each also over TLS
 * (server_tls.c), with a periodic active-expiry timer. */
#include "server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "multi.h"
#include "session.h"

#define EXPIRE_BUDGET 64 /* keys one expiry pass may look at */

/* ---- options ---- */

void kv_server_config_defaults(weft_config *cfg) {
  cfg->max_connections = 10000; /* Redis' maxclients */
  /* Replies a connection may leave unread before it is closed (Redis'
   * client-output-buffer-limit). Flow control keeps a client that reads
   * slowly near the high watermark; this catches the rest. */
  cfg->output_limit = 64 << 20;
}

void kv_server_options_init(kv_server_options *o) {
  *o = (kv_server_options){.max_value_bytes = 1 << 20,
                           .stripes = 64,
                           .expire_hz = 10,
                           .protected_mode = true,
                           .auth_timeout_ms = 10000,
                           .command_timeout_ms = 30000,
                           .query_buffers_max = (size_t)256 << 20,
                           .migrate_timeout_max_ms = KV_MIGRATE_TIMEOUT_MAX_MS,
                           .shutdown_command = KV_SHUTDOWN_LOCAL};
  strcpy(o->rpc_listen, "127.0.0.1:7001");
  strcpy(o->resp_listen, "127.0.0.1:6380");
  weft_tls_options_init(&o->tls);
  kv_cluster_options_init(&o->cluster);
  o->tls.verify = WEFT_TLS_VERIFY_REQUIRED; /* Redis' tls-auth-clients yes */
}

static int parse_ulong(const char *v, unsigned long max, unsigned long *out,
                       char *err, size_t err_len) {
  char *end;
  unsigned long n = strtoul(v, &end, 10);
  if (*v == '\0' || *v == '-' || *end != '\0' || n < 1 || n > max) {
    snprintf(err, err_len, "expected an integer from 1 to %lu", max);
    return WEFT_EINVAL;
  }
  *out = n;
  return 0;
}

/* An integer from 0 to `max` (0 turns the limit off). */
static int parse_limit(const char *v, unsigned long max, unsigned long *out,
                       char *err, size_t err_len) {
  char *end;
  unsigned long n = strtoul(v, &end, 10);
  if (*v == '\0' || *v == '-' || *end != '\0' || n > max) {
    snprintf(err, err_len, "expected an integer from 0 (none) to %lu", max);
    return WEFT_EINVAL;
  }
  *out = n;
  return 0;
}

/* The limits' keys (conn_limits.h); WEFT_ENOENT for other keys. */
static int limit_key(kv_server_options *o, const char *key, const char *value,
                     char *err, size_t err_len) {
  static const struct {
    const char *key;
    unsigned long max;
  } keys[] = {{"auth_timeout_ms", 86400000ul},
              {"command_timeout_ms", 86400000ul},
              {"client_query_buffer_limit", 1ul << 40},
              {"query_buffers_max", 1ul << 40}};
  unsigned long *dst[] = {&o->auth_timeout_ms, &o->command_timeout_ms,
                          &o->client_query_buffer_limit, &o->query_buffers_max};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (strcmp(key, keys[i].key) == 0)
      return parse_limit(value, keys[i].max, dst[i], err, err_len);
  return WEFT_ENOENT;
}

/* Copies `value` into `dst` (`cap` bytes with the NUL), or says how long
 * it may be. Never quotes the value: it may be a password. */
static int copy_text(char *dst, size_t cap, const char *value, char *err,
                     size_t err_len) {
  if (strlen(value) >= cap) {
    snprintf(err, err_len, "expected at most %zu bytes", cap - 1);
    return WEFT_EINVAL;
  }
  strcpy(dst, value);
  return 0;
}

/* yes/no as Redis writes protected-mode, and weft's other spellings. */
static int parse_flag(const char *v, bool *out, char *err, size_t err_len) {
  static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {
                                                                   "no",
                                                                   "false",
                                                                   "off", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
      *out = strcasecmp(v, yes[i]) == 0;
      return 0;
    }
  }
  snprintf(err, err_len, "expected yes or no (true, false, on, off, 1, 0)");
  return WEFT_EINVAL;
}

/* [kv] shutdown_command: local, or yes/no in parse_flag's spellings. */
static int parse_shutdown_policy(const char *v, int *out, char *err,
                                 size_t err_len) {
  bool yes;
  if (strcasecmp(v, "local") == 0) {
    *out = KV_SHUTDOWN_LOCAL;
    return 0;
  }
  if (parse_flag(v, &yes, err, err_len) < 0) {
    snprintf(err, err_len, "expected yes, local or no");
    return WEFT_EINVAL;
  }
  *out = yes ? KV_SHUTDOWN_YES : KV_SHUTDOWN_NO;
  return 0;
}

int kv_server_config_section(void *arg, const char *section, const char *key,
                             const char *value, char *err, size_t err_len) {
  kv_server_options *o = arg;
  unsigned long n;
  if (strcmp(section, "kvbench") == 0)
    return 0; /* weft-kvbench's section, when the file is shared */
  if (strcmp(section, "cluster") == 0)
    return kv_cluster_config_key(&o->cluster, key, value, err, err_len);
  if (strcmp(section, "kv") != 0)
    return WEFT_ENOENT;
  if (strcmp(key, "rpc_listen") == 0 || strcmp(key, "resp_listen") == 0)
    return copy_text(key[1] == 'p' ? o->rpc_listen : o->resp_listen,
                     WEFT_CONFIG_URI_MAX, value, err, err_len);
  if (strcmp(key, "requirepass") == 0)
    return copy_text(o->requirepass, sizeof o->requirepass, value, err,
                     err_len);
  if (strcmp(key, "user") == 0)
    return copy_text(o->user, sizeof o->user, value, err, err_len);
  if (strcmp(key, "user_password") == 0)
    return copy_text(o->user_password, sizeof o->user_password, value, err,
                     err_len);
  if (strcmp(key, "protected_mode") == 0)
    return parse_flag(value, &o->protected_mode, err, err_len);
  if (strcmp(key, "migrate_any_host") == 0)
    return parse_flag(value, &o->migrate_any_host, err, err_len);
  if (strcmp(key, "shutdown_command") == 0)
    return parse_shutdown_policy(value, &o->shutdown_command, err, err_len);
  if (strcmp(key, "migrate_timeout_max_ms") == 0) {
    int rc = parse_ulong(value, 3600000, &n, err, err_len);
    o->migrate_timeout_max_ms =
        rc == 0 ? (unsigned)n : o->migrate_timeout_max_ms;
    return rc;
  }
  if (strcmp(key, "password") == 0 || strcmp(key, "client_user") == 0 ||
      strcmp(key, "client_tls") == 0 || strcmp(key, "client_sni") == 0)
    return 0; /* the clients' keys (weft-kv, weft-kvbench) */
  if (strcmp(key, "tls_client_cert_file") == 0 ||
      strcmp(key, "tls_client_key_file") == 0) /* the clients', and MIGRATE's */
    return copy_text(key[11] == 'c' ? o->tls_client_cert_file
                                    : o->tls_client_key_file,
                     WEFT_TLS_PATH_MAX, value, err, err_len);
  int tls_rc = kv_server_tls_key(o, key, value, err, err_len);
  if (tls_rc != WEFT_ENOENT)
    return tls_rc;
  int limit_rc = limit_key(o, key, value, err, err_len);
  if (limit_rc != WEFT_ENOENT)
    return limit_rc;
  if (strcmp(key, "max_value_bytes") == 0) {
    int rc = parse_ulong(value, 512ul << 20, &n, err, err_len);
    o->max_value_bytes = rc == 0 ? n : o->max_value_bytes;
    return rc;
  }
  if (strcmp(key, "stripes") == 0 || strcmp(key, "expire_hz") == 0) {
    bool stripes = key[0] == 's';
    int rc = parse_ulong(value, stripes ? 4096 : 1000, &n, err, err_len);
    if (rc == 0 && stripes && (n & (n - 1)) != 0) {
      snprintf(err, err_len, "expected a power of two from 1 to 4096");
      return WEFT_EINVAL;
    }
    if (rc == 0)
      *(stripes ? &o->stripes : &o->expire_hz) = (unsigned)n;
    return rc;
  }
  return WEFT_ENOENT;
}

/* ---- start and stop ---- */

static void expire_tick(void *arg) {
  kv_server *srv = arg;
  kv_store_expire_some(srv->shared.store, EXPIRE_BUDGET);
}

static int expire_start(void *arg) {
  kv_server *srv = arg;
  uint64_t period = 1000000000ull / srv->opts.expire_hz;
  weft_timer_start(&srv->expire_timer, period, period, expire_tick, srv);
  return 0;
}

static int expire_stop(void *arg) {
  weft_timer_stop(&((kv_server *)arg)->expire_timer);
  return 0;
}

/* `reject` is what a client past [server] max_connections reads before
 * the close (NULL: the close alone), after the TLS handshake on a TLS
 * listener (`tls`). */
static int bind_one(kv_server *srv, const weft_config *cfg,
                    const weft_endpoint *ep, weft_channel_init_cb init,
                    const char *reject, bool tls, weft_server **out) {
  weft_server_bootstrap sb = {.group = srv->group,
                              .child_init = init,
                              .child_init_arg = srv,
                              .reject_message = reject,
                              .reject_init = tls ? kv_tls_reject_init : NULL};
  weft_config_server_bootstrap(cfg, &sb);
  return weft_server_bind_endpoint(out, &sb, ep); /* failures are logged */
}

/* RESP is for Redis' clients, which speak TCP: a listener on a message
 * transport (ucx, verbs) would accept nothing they can send. Refused at
 * start, naming the setting (`key`). */
static int resp_transport_check(const weft_endpoint *ep, const char *key) {
  uint32_t caps = weft_endpoint_caps(ep, NULL, 0);
  if (!(caps & WEFT_ENDPOINT_AVAILABLE) || (caps & WEFT_ENDPOINT_TCP))
    return 0; /* bind reports unavailable endpoints itself */
  char full[WEFT_CONFIG_URI_MAX + 32];
  weft_endpoint_format(ep, full, sizeof full);
  weft_log(WEFT_LOG_ERROR,
           "kv: [kv] %s = %s: the Redis protocol needs a transport "
           "that is TCP on the wire (tcp or uring), and %s is not; set "
           "[kv] %s = tcp://HOST:PORT (or empty to turn it off)",
           key, full, ep->transport, key);
  return WEFT_ENOTSUP;
}

static void setup_codecs(kv_server *srv, const weft_config *cfg) {
  const kv_server_options *o = &srv->opts;
  kv_conn_limits_init(&srv->limits, o->max_value_bytes, o->auth_timeout_ms,
                      o->command_timeout_ms, o->client_query_buffer_limit,
                      o->query_buffers_max, cfg->output_limit);
  srv->shared.limits = &srv->limits;
  kv_rpc_methods_init(srv);
}

/* The port of a bound server's address ("tcp://127.0.0.1:6380"), 0 when
 * there is none. */
static int bound_port(const weft_server *ws) {
  char a[WEFT_CONFIG_URI_MAX + 32];
  if (ws == NULL || weft_server_address(ws, a, sizeof a) < 0)
    return 0;
  const char *colon = strrchr(a, ':');
  return colon != NULL ? atoi(colon + 1) : 0;
}

/* Says, once at start, what protected mode does for a listener that
 * clients of other hosts can reach. */
static void protected_notice(const kv_server *srv, const weft_server *ws,
                             const char *key) {
  char a[WEFT_CONFIG_URI_MAX + 32];
  if (ws == NULL || srv->shared.auth.default_pass ||
      weft_server_address(ws, a, sizeof a) < 0)
    return;
  const char *hp = strstr(a, "://");
  if (kv_addr_is_loopback(hp != NULL ? hp + 3 : a))
    return;
  if (srv->shared.protected_mode)
    weft_log(WEFT_LOG_WARN,
             "kv: [kv] %s = %s without a password: protected mode accepts "
             "clients from the loopback interface only; set [kv] "
             "requirepass, or [kv] protected_mode = no",
             key, a);
  else
    weft_log(WEFT_LOG_WARN,
             "kv: [kv] %s = %s without a password and [kv] protected_mode = "
             "no: every host that reaches it can read and change the store",
             key, a);
}

/* The cluster's state file at start: loaded over the [cluster] lines,
 * then written back at once, as Redis writes nodes.conf when it starts, so
 * a path the server cannot write stops it now rather than at the first
 * CLUSTER SETSLOT. */
static int cluster_state_start(kv_cluster *c) {
  char err[KV_CLUSTER_PATH_MAX + 512];
  if (c->config_file[0] == '\0') {
    weft_log(WEFT_LOG_WARN,
             "kv: [cluster] config_file is not set (no -c file to derive it "
             "from): CLUSTER SETSLOT changes are lost at a restart");
    return 0;
  }
  int rc = kv_cluster_state_load(c, err, sizeof err);
  if (rc == 0)
    rc = kv_cluster_state_save(c, err, sizeof err);
  if (rc < 0)
    weft_log(WEFT_LOG_ERROR, "kv: [cluster] config_file: %s", err);
  return rc;
}

/* Fills srv->shared: the store is made, the passwords hashed. Logs and
 * returns an error for bad [kv] settings. */
static int shared_init(kv_server *srv, const weft_config *cfg) {
  kv_shared *sh = &srv->shared;
  pthread_mutex_init(&sh->clients_lock, NULL);
  char err[256];
  int rc = kv_auth_init(&sh->auth, srv->opts.requirepass, srv->opts.user,
                        srv->opts.user_password, err, sizeof err);
  /* Only the digests stay. */
  explicit_bzero(srv->opts.requirepass, sizeof srv->opts.requirepass);
  explicit_bzero(srv->opts.user_password, sizeof srv->opts.user_password);
  if (rc < 0) {
    weft_log(WEFT_LOG_ERROR, "kv: %s", err);
    return rc;
  }
  sh->protected_mode = srv->opts.protected_mode;
  sh->denied_log.interval_ns = KV_DENIED_LOG_INTERVAL_NS;
  srv->tls_fail_log.interval_ns = 1000000000u;
  sh->migrate_any_host = srv->opts.migrate_any_host;
  sh->migrate_timeout_max_ms = srv->opts.migrate_timeout_max_ms;
  sh->shutdown_policy = srv->opts.shutdown_command;
  sh->shutdown = srv->opts.shutdown;
  sh->shutdown_arg = srv->opts.shutdown_arg;
  sh->n_loops = (unsigned)weft_loop_group_size(srv->group);
  sh->loops = aligned_alloc(_Alignof(kv_loop_counters),
                            sh->n_loops * sizeof *sh->loops);
  if (sh->loops == NULL)
    return WEFT_ENOMEM;
  memset(sh->loops, 0, sh->n_loops * sizeof *sh->loops);
  if (srv->opts.cluster.enabled) {
    rc = kv_cluster_options_check(&srv->opts.cluster, err, sizeof err);
    if (rc < 0) {
      weft_log(WEFT_LOG_ERROR, "kv: %s", err);
      return rc;
    }
    if ((rc = kv_cluster_new(&sh->cluster, &srv->opts.cluster)) < 0)
      return rc;
    if ((rc = cluster_state_start(sh->cluster)) < 0)
      return rc;
  }
  sh->multi_max_bytes = kv_multi_limit(srv->opts.max_value_bytes);
  sh->start_ns = weft_now_ns();
  sh->hz = srv->opts.expire_hz;
  sh->max_clients = cfg->max_connections;
  snprintf(srv->transport, sizeof srv->transport, "%s", cfg->transport);
  sh->transport = srv->transport;
  uint8_t id[20];
  if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id)
    memset(id, 0, sizeof id);
  for (size_t i = 0; i < sizeof id; i++)
    snprintf(sh->run_id + 2 * i, 3, "%02x", id[i]);
  kv_store_options so;
  kv_store_options_init(&so);
  so.n_stripes = srv->opts.stripes;
  so.max_value_len = srv->opts.max_value_bytes;
  return kv_store_new(&sh->store, &so);
}

/* The server's listeners, in kv_listener order, and how to bind each. */
typedef struct listener_spec {
  const char *key; /* its [kv] key */
  const char *uri; /* its setting; "" = off */
  weft_channel_init_cb init;
  bool resp, tls;
  weft_server **out;
} listener_spec;

static void listener_specs(kv_server *srv, listener_spec *l) {
  const kv_server_options *o = &srv->opts;
  l[KV_LISTENER_RPC] =
      (listener_spec){"rpc_listen", o->rpc_listen, kv_rpc_channel_init,
                      false,        false,         &srv->rpc};
  l[KV_LISTENER_RESP] =
      (listener_spec){"resp_listen", o->resp_listen, kv_resp_channel_init,
                      true,          false,          &srv->resp};
  l[KV_LISTENER_TLS] =
      (listener_spec){"tls_listen", o->tls_listen, kv_resp_tls_channel_init,
                      true,         true,          &srv->tls_resp};
  l[KV_LISTENER_TLS_RPC] = (listener_spec){
      "tls_rpc_listen", o->tls_rpc_listen, kv_rpc_tls_channel_init, false, true,
      &srv->tls_rpc};
}

/* Binds every listener that is set; on a failure closes those bound. */
static int bind_all(kv_server *srv, const weft_config *cfg) {
  listener_spec l[KV_LISTENER_COUNT_];
  listener_specs(srv, l);
  int rc = 0;
  for (int i = 0; i < KV_LISTENER_COUNT_ && rc == 0; i++) {
    if (l[i].uri[0] == '\0')
      continue;
    weft_endpoint ep; /* the setting and [transport] name, parsed once */
    char why[WEFT_CONFIG_URI_MAX + 160];
    if ((rc = weft_config_endpoint_parse(cfg, l[i].uri, &ep, why, sizeof why)) <
        0)
      weft_log(WEFT_LOG_ERROR, "%s", why);
    else if (l[i].resp && (rc = resp_transport_check(&ep, l[i].key)) < 0)
      break;
    else
      rc = bind_one(srv, cfg, &ep, l[i].init,
                    l[i].resp ? "-ERR max number of clients reached\r\n" : NULL,
                    l[i].tls, l[i].out);
    if (rc < 0) /* the setting to change, beside the library's own line */
      weft_log(WEFT_LOG_ERROR, "kv: [kv] %s = %s: %s", l[i].key, l[i].uri,
               weft_strerror(rc));
  }
  if (rc < 0)
    for (int i = 0; i < KV_LISTENER_COUNT_; i++) {
      weft_server_close(*l[i].out);
      *l[i].out = NULL;
    }
  return rc;
}

/* Frees what a server owns besides its listeners (closed by then). */
static void server_free(kv_server *s) {
  weft_tls_context_release(s->tls);
  weft_tls_context_release(s->shared.migrate_tls);
  kv_store_free(s->shared.store);
  kv_cluster_free(s->shared.cluster);
  free(s->shared.loops);
  pthread_mutex_destroy(&s->shared.clients_lock);
  free(s);
}

int kv_server_bind(kv_server **out, weft_loop_group *group,
                   const weft_config *cfg, const kv_server_options *opts) {
  kv_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL)
    return WEFT_ENOMEM;
  srv->group = group;
  srv->opts = *opts;
  int rc = shared_init(srv, cfg);
  if (rc == 0)
    rc = kv_tls_context_init(srv);
  if (rc == 0) {
    setup_codecs(srv, cfg);
    rc = bind_all(srv, cfg);
  }
  if (rc < 0) {
    server_free(srv);
    return rc;
  }
  srv->shared.rpc_port = bound_port(srv->rpc);
  srv->shared.resp_port = bound_port(srv->resp);
  srv->shared.tls_port = bound_port(srv->tls_resp);
  listener_spec l[KV_LISTENER_COUNT_];
  listener_specs(srv, l);
  for (int i = 0; i < KV_LISTENER_COUNT_; i++)
    protected_notice(srv, *l[i].out, l[i].key);
  weft_loop *loop0 = weft_loop_group_get(group, 0);
  weft_timer_init(loop0, &srv->expire_timer);
  weft_loop_call(loop0, expire_start, srv);
  *out = srv;
  return 0;
}

int kv_server_address(const kv_server *s, int which, char *buf, size_t len) {
  weft_server *const all[KV_LISTENER_COUNT_] = {[KV_LISTENER_RPC] = s->rpc,
                                                [KV_LISTENER_RESP] = s->resp,
                                                [KV_LISTENER_TLS] = s->tls_resp,
                                                [KV_LISTENER_TLS_RPC] =
                                                    s->tls_rpc};
  weft_server *ws =
      which >= 0 && which < KV_LISTENER_COUNT_ ? all[which] : NULL;
  if (ws == NULL)
    return WEFT_ENOENT;
  return weft_server_address(ws, buf, len);
}

kv_store *kv_server_store(kv_server *s) { return s->shared.store; }

void kv_server_close(kv_server *s) {
  if (s == NULL)
    return;
  weft_loop_call(weft_loop_group_get(s->group, 0), expire_stop, s);
  weft_server_close(s->rpc);
  weft_server_close(s->resp);
  weft_server_close(s->tls_resp);
  weft_server_close(s->tls_rpc);
  server_free(s); /* channels still open hold their own references */
}

/* ---- the work budget per turn (server_internal.h) ---- */

void kv_turn_start(kv_turn *t) {
  if (t->start_ns == 0)
    t->start_ns = kv_session_now_ns();
}

bool kv_turn_spent(kv_turn *t) {
  return ++t->cmds >= KV_TURN_COMMANDS ||
         kv_session_now_ns() - t->start_ns >= KV_TURN_NS;
}
