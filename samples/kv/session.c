/* SPDX-License-Identifier: Apache-2.0 */
/* A connection's session (session.h): its start (id, addresses, the
 * protected-mode check) and end, and the commands about the connection
 * itself: CLIENT (ID, GETNAME, SETNAME, INFO, ...) and QUIT. */
#include "command_internal.h"
#include "conn_limits.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <weft/clock.h>
#include <weft/log.h>
#include <weft/loop.h>

#include "migrate.h"

bool kv_addr_is_loopback(const char *addr) {
  char host[KV_ADDR_MAX];
  const char *colon = strrchr(addr, ':');
  if (colon == NULL)
    return false;
  size_t n = (size_t)(colon - addr);
  if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']')
    addr++, n -= 2; /* "[v6]:port" */
  if (n == 0 || n >= sizeof host)
    return false;
  memcpy(host, addr, n);
  host[n] = '\0';
  struct in_addr v4;
  struct in6_addr v6;
  if (inet_pton(AF_INET, host, &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &v6) != 1)
    return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6))
    return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

uint64_t kv_session_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Logs a refusal, at most once per KV_DENIED_LOG_INTERVAL_NS per server
 * (any thread). */
static void log_denied(const kv_session *s) {
  weft_log_limited(&s->shared->denied_log, WEFT_LOG_WARN,
                   "kv: protected mode refused a %s connection from %s: no "
                   "password is set for the default user and the client is "
                   "not on the loopback interface; set [kv] requirepass "
                   "(clients then AUTH), or [kv] protected_mode = no to "
                   "accept clients from other hosts without one",
                   s->rpc ? "weft RPC" : "RESP", s->addr);
}

/* The authentication deadline passed: the connection goes, with a line
 * (at most one a second: a flood of idle connections would flood the
 * log). */
static void auth_timeout(void *arg) {
  kv_session *s = arg;
  if (s->authenticated)
    return;
  kv_conn_limits *l = s->shared->limits;
  atomic_fetch_add(&l->auth_timeouts, 1);
  weft_log_limited(&l->auth_timeout_log, WEFT_LOG_WARN,
                   "kv: %s connection from %s did not authenticate within "
                   "%" PRIu64 " ms ([kv] auth_timeout_ms); closing it",
                   s->rpc ? "weft RPC" : "RESP", s->addr,
                   l->auth_timeout_ns / 1000000u);
  weft_channel_close(s->channel, WEFT_PROMISE_NONE);
}

/* A connection that starts unauthenticated: the small output limit and
 * the deadline (its decoder was added with the small limits). */
static void start_unauthenticated(kv_session *s) {
  kv_conn_limits *l = s->shared->limits;
  if (l == NULL || s->authenticated || s->denied)
    return;
  kv_conn_limits_unauthenticated(l, s->channel);
  if (l->auth_timeout_ns > 0)
    weft_timer_start(&s->auth_timer, l->auth_timeout_ns, 0, auth_timeout, s);
}

void kv_session_authenticated(kv_session *s) {
  weft_timer_stop(&s->auth_timer);
  if (s->shared->limits != NULL)
    kv_conn_limits_authenticated(s->shared->limits, s->channel, s->rpc);
}

void kv_session_init(kv_session *s, kv_shared *shared, weft_channel *ch,
                     bool rpc) {
  memset(s, 0, sizeof *s);
  s->shared = shared;
  s->id = atomic_fetch_add(&shared->next_client_id, 1) + 1;
  int idx = weft_loop_index(weft_channel_loop(ch));
  s->loop_index = idx >= 0 ? (unsigned)idx : UINT32_MAX;
  s->resp = 2;
  s->rpc = rpc;
  s->authenticated = !shared->auth.default_pass; /* Redis' nopass default */
  s->channel = ch;
  weft_timer_init(weft_channel_loop(ch), &s->auth_timer);
  s->created_ns = kv_session_now_ns();
  atomic_store_explicit(&s->last_ns, s->created_ns, memory_order_relaxed);
  if (weft_channel_remote_address(ch, s->addr, sizeof s->addr) < 0)
    snprintf(s->addr, sizeof s->addr, "?");
  if (weft_channel_local_address(ch, s->laddr, sizeof s->laddr) < 0)
    snprintf(s->laddr, sizeof s->laddr, "?");
  atomic_fetch_add(&shared->connected_clients, 1);
  atomic_fetch_add(&shared->total_connections, 1);
  kv_client_register(s);
  /* Redis 7's protected mode: without a password for the default user,
   * only the loopback network may connect (an unknown address is not). */
  if (shared->protected_mode && !shared->auth.default_pass &&
      !kv_addr_is_loopback(s->addr)) {
    s->denied = true;
    atomic_fetch_add(&shared->rejected_connections, 1);
    log_denied(s);
  }
  start_unauthenticated(s);
}

void kv_session_fini(kv_session *s) {
  weft_timer_stop(&s->auth_timer);
  kv_migrate_detach(s); /* a MIGRATE in flight ends without a reply */
  kv_keys_detach(s);    /* and a KEYS taking steps */
  kv_multi_reset(&s->multi);
  kv_watch_reset(&s->watch);
  kv_client_unregister(s);
  atomic_fetch_sub(&s->shared->connected_clients, 1);
}

/* ---- CLIENT ---- */

#define STR(x) #x
#define XSTR(x) STR(x)

const char *kv_session_set_name(kv_session *s, const kv_arg *name) {
  const unsigned char *p = name->ptr;
  for (size_t i = 0; i < name->len; i++)
    if (p[i] < '!' || p[i] > '~')
      return "ERR Client names cannot contain spaces, newlines or special "
             "characters.";
  if (name->len > KV_CLIENT_NAME_MAX)
    return "ERR Client names are limited to " XSTR(KV_CLIENT_NAME_MAX) " bytes";
  pthread_mutex_lock(&s->shared->clients_lock); /* CLIENT LIST reads it */
  memcpy(s->name, name->ptr, name->len);
  s->name[name->len] = '\0';
  pthread_mutex_unlock(&s->shared->clients_lock);
  return NULL;
}

/* CLIENT SETNAME name. */
static void client_setname(const kv_call *c) {
  const char *err = kv_session_set_name(c->sess, &c->argv[1]);
  if (err != NULL)
    return c->ops->error(c->w, err);
  c->ops->simple(c->w, "OK");
}

/* CLIENT INFO: Redis' line of `key=value` fields, with what weft knows:
 * the fields about Redis' own buffers are 0, fd is -1. */
static void client_info(const kv_call *c) {
  const kv_session *s = c->sess;
  uint64_t now = kv_session_now_ns();
  char line[KV_CLIENT_NAME_MAX + 2 * KV_ADDR_MAX + 512];
  int n = snprintf(
      line, sizeof line,
      "id=%" PRIu64 " addr=%s laddr=%s fd=-1 name=%s age=%" PRIu64
      " idle=%" PRIu64 " flags=%s db=0 sub=0 psub=0 ssub=0 multi=%ld "
      "qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=%zu rbs=0 rbp=0 obl=0 oll=0 "
      "omem=0 tot-mem=0 events=r cmd=client|info user=%s redir=-1 resp=%d\n",
      s->id, s->addr, s->laddr, s->name, (now - s->created_ns) / 1000000000u,
      (now - atomic_load_explicit(&s->last_ns, memory_order_relaxed)) /
          1000000000u,
      s->multi.active ? "x" : "N", s->multi.active ? (long)s->multi.count : -1L,
      s->multi.bytes, s->acl_user ? s->shared->auth.user : "default", s->resp);
  c->ops->verbatim(c->w, line,
                   n < (int)sizeof line ? (size_t)n : sizeof line - 1);
}

/* CLIENT ID | GETNAME | SETNAME name | INFO | LIST | KILL | SETINFO attr value
 * | NO-EVICT on|off | NO-TOUCH on|off | HELP. */
void kv_cmd_client(const kv_call *c) {
  if (kv_arg_is(&c->argv[0], "LIST"))
    return kv_client_list(c);
  if (kv_arg_is(&c->argv[0], "KILL"))
    return kv_client_kill(c);
  static const struct {
    const char *name;
    size_t args; /* after the subcommand */
  } subs[] = {{"ID", 0},      {"GETNAME", 0},  {"SETNAME", 1},  {"INFO", 0},
              {"SETINFO", 2}, {"NO-EVICT", 1}, {"NO-TOUCH", 1}, {"HELP", 0}};
  size_t i = 0;
  while (i < sizeof subs / sizeof subs[0] &&
         !kv_arg_is(&c->argv[0], subs[i].name))
    i++;
  char sub[64];
  size_t n = c->argv[0].len < sizeof sub - 1 ? c->argv[0].len : sizeof sub - 1;
  for (size_t k = 0; k < n; k++)
    sub[k] = (char)(((const char *)c->argv[0].ptr)[k] | 0x20);
  sub[n] = '\0';
  if (i == sizeof subs / sizeof subs[0]) {
    memcpy(sub, c->argv[0].ptr, n);
    return kv_reply_errorf(c, "ERR unknown subcommand '%s'. Try CLIENT HELP.",
                           sub);
  }
  if (c->argc - 1 != subs[i].args)
    return kv_reply_errorf(
        c, "ERR wrong number of arguments for 'client|%s' command", sub);
  switch (i) {
  case 0:
    return c->ops->integer(c->w, (int64_t)c->sess->id);
  case 1:
    return c->sess->name[0] != '\0' ? kv_reply_cstr(c, c->sess->name)
                                    : c->ops->null(c->w);
  case 2:
    return client_setname(c);
  case 3:
    return client_info(c);
  case 7:
    c->ops->array(c->w, 6);
    kv_reply_cstr(c, "CLIENT ID | GETNAME | SETNAME <name> | INFO");
    kv_reply_cstr(c, "CLIENT LIST [TYPE normal|master|replica|pubsub] "
                     "[ID id ...]");
    kv_reply_cstr(c, "CLIENT KILL <ip:port> | [ID id] [ADDR ip:port] "
                     "[LADDR ip:port] [USER name] [SKIPME yes|no]");
    kv_reply_cstr(c, "CLIENT SETINFO <lib-name|lib-ver> <value> (accepted)");
    kv_reply_cstr(c, "CLIENT NO-EVICT <on|off> (accepted)");
    return kv_reply_cstr(c, "CLIENT NO-TOUCH <on|off> (accepted)");
  default: /* SETINFO, NO-EVICT, NO-TOUCH: nothing to change here */
    return c->ops->simple(c->w, "OK");
  }
}

/* QUIT: OK, then the connection closes once that is sent. */
void kv_cmd_quit(const kv_call *c) {
  c->sess->quit = true;
  c->ops->simple(c->w, "OK");
}
