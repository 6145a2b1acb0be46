/* SPDX-License-Identifier: Apache-2.0 */
/* The KV server's TLS listeners (server.h, server_internal.h): the [kv]
 * keys that set them up, in Redis' names mapped to weft's (tls-cert-file
 * is tls_cert_file, ...), the one server context both TLS listeners'
 * channels share, and their pipelines: the TLS handler first, then the
 * protocol's handlers, as on the plaintext listeners. */
#include "server_internal.h"

#include "kv_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- [kv] keys ---- */

/* weft_tls_options keys (from) that are [kv] keys (to) under another
 * name. */
static const kv_config_name tls_names[] = {
    {"cert_file", "tls_cert_file"},
    {"key_file", "tls_key_file"},
    {"ca_file", "tls_ca_cert_file"},
    {"ca_dir", "tls_ca_cert_dir"},
    {"min_protocol", "tls_min_protocol"},
    {"handshake_timeout_ms", "tls_handshake_timeout_ms"},
    {"ktls", "tls_ktls"}};

#define N_TLS_NAMES (sizeof tls_names / sizeof tls_names[0])

/* tls_auth_clients as Redis spells tls-auth-clients. */
static int parse_auth_clients(const char *v, weft_tls_verify *out, char *err,
                              size_t err_len) {
  static const struct {
    const char *name;
    weft_tls_verify verify;
  } values[] = {{"no", WEFT_TLS_VERIFY_NONE},
                {"optional", WEFT_TLS_VERIFY_OPTIONAL},
                {"yes", WEFT_TLS_VERIFY_REQUIRED}};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
    if (strcasecmp(v, values[i].name) == 0) {
      *out = values[i].verify;
      return 0;
    }
  snprintf(err, err_len,
           "expected no (no client certificate asked), optional (checked "
           "when sent) or yes (required)");
  return WEFT_EINVAL;
}

int kv_server_tls_key(kv_server_options *o, const char *key, const char *value,
                      char *err, size_t err_len) {
  if (strcmp(key, "tls_listen") == 0 || strcmp(key, "tls_rpc_listen") == 0) {
    char *dst = key[4] == 'l' ? o->tls_listen : o->tls_rpc_listen;
    if (strlen(value) >= WEFT_CONFIG_URI_MAX) {
      snprintf(err, err_len, "expected at most %d bytes",
               WEFT_CONFIG_URI_MAX - 1);
      return WEFT_EINVAL;
    }
    strcpy(dst, value);
    return 0;
  }
  if (strcmp(key, "tls_auth_clients") == 0)
    return parse_auth_clients(value, &o->tls.verify, err, err_len);
  for (size_t i = 0; i < N_TLS_NAMES; i++)
    if (strcmp(key, tls_names[i].to) == 0)
      return weft_tls_options_set(&o->tls, tls_names[i].from, value, err,
                                  err_len);
  return WEFT_ENOENT;
}

/* ---- the context ---- */

/* MIGRATE's client context, for a server that serves RESP over TLS: the
 * cluster's nodes then speak TLS to each other as Redis' tls-cluster. The
 * target's certificate is checked against the server's CAs (tls_ca_cert_*,
 * else the system's) and the address MIGRATE connects to; the client
 * certificate (targets ask for one with tls_auth_clients = yes, the
 * default) is tls_client_cert_file, else the server's own, as Redis'
 * tls-client-cert-file. */
static int migrate_tls_init(kv_server *srv, char *err, size_t err_len) {
  const weft_tls_options *s = &srv->opts.tls;
  weft_tls_options o;
  weft_tls_options_init(&o);
  const kv_server_options *so = &srv->opts;
  if (so->tls_client_cert_file[0] != '\0') { /* Redis' tls-client-cert-file */
    memcpy(o.cert_file, so->tls_client_cert_file, sizeof o.cert_file);
    memcpy(o.key_file, so->tls_client_key_file, sizeof o.key_file);
  } else {
    memcpy(o.cert_file, s->cert_file, sizeof o.cert_file);
    memcpy(o.key_file, s->key_file, sizeof o.key_file);
  }
  memcpy(o.ca_file, s->ca_file, sizeof o.ca_file);
  memcpy(o.ca_dir, s->ca_dir, sizeof o.ca_dir);
  o.min_protocol = s->min_protocol;
  o.handshake_timeout_ms = s->handshake_timeout_ms;
  o.verify = WEFT_TLS_VERIFY_REQUIRED;
  char why[400];
  int rc = weft_tls_context_new(&srv->shared.migrate_tls, WEFT_TLS_CLIENT, &o,
                                why, sizeof why);
  if (rc < 0 && so->tls_client_cert_file[0] != '\0') {
    /* its own keys, not the listeners' (tls_names) */
    static const kv_config_name mine[] = {{"cert_file", "tls_client_cert_file"},
                                          {"key_file", "tls_client_key_file"}};
    char renamed[400];
    kv_config_rename(why, mine, 2, renamed, sizeof renamed);
    snprintf(err, err_len, "%s (MIGRATE's client certificate)", renamed);
  } else if (rc < 0) {
    snprintf(err, err_len, "%s (MIGRATE's client context)", why);
  }
  return rc;
}

int kv_tls_context_init(kv_server *srv) {
  const kv_server_options *o = &srv->opts;
  if (o->tls_listen[0] == '\0' && o->tls_rpc_listen[0] == '\0')
    return 0;
  if (o->tls.cert_file[0] == '\0') {
    weft_log(WEFT_LOG_ERROR,
             "kv: [kv] tls_listen and tls_rpc_listen need [kv] tls_cert_file "
             "(the server's certificate chain, PEM) and tls_key_file (its "
             "private key)");
    return WEFT_EINVAL;
  }
  if (o->tls.verify != WEFT_TLS_VERIFY_NONE && o->tls.ca_file[0] == '\0' &&
      o->tls.ca_dir[0] == '\0') {
    weft_log(WEFT_LOG_ERROR,
             "kv: [kv] tls_auth_clients = %s needs [kv] tls_ca_cert_file or "
             "tls_ca_cert_dir (the CAs that sign client certificates); or set "
             "tls_auth_clients = no when clients send no certificate",
             o->tls.verify == WEFT_TLS_VERIFY_OPTIONAL ? "optional" : "yes");
    return WEFT_EINVAL;
  }
  char err[512], kv_err[600];
  int rc = weft_tls_context_new(&srv->tls, WEFT_TLS_SERVER, &o->tls, err,
                                sizeof err);
  if (rc == 0 && o->tls_listen[0] != '\0')
    rc = migrate_tls_init(srv, err, sizeof err);
  if (rc < 0) {
    kv_config_rename(err, tls_names, N_TLS_NAMES, kv_err, sizeof kv_err);
    weft_log(WEFT_LOG_ERROR, "kv: TLS: [kv] %s", kv_err);
  }
  return rc;
}

/* ---- pipelines ---- */

/* The state of the handler after TLS that takes failed handshakes. */
typedef struct hs_watch {
  kv_server *srv;
  bool failed; /* the handshake failed: the next exception is its */
} hs_watch;

static void hs_event(weft_ctx *ctx, void *event) {
  hs_watch *w = weft_ctx_state(ctx);
  /* Not every event is a weft_msg: weft_event_read_resumed is an int. */
  if (event != &weft_event_read_resumed &&
      weft_msg_is(event, &weft_tls_event_type) &&
      ((const weft_tls_event *)event)->kind == WEFT_TLS_HANDSHAKE_FAILED)
    w->failed = true;
  weft_ctx_fire_user_event(ctx, event);
}

/* A failed handshake's exception: logged here at most once a second per
 * server with the count of the others (a client can fail handshakes as
 * fast as it connects: 1000 stalled ones made 1000 WARN lines), and the
 * channel closed, instead of the tail's line each. */
static void hs_exception(weft_ctx *ctx, int err, const char *reason) {
  hs_watch *w = weft_ctx_state(ctx);
  if (!w->failed) {
    weft_ctx_fire_exception_caught(ctx, err, reason);
    return;
  }
  weft_log_limited(&w->srv->tls_fail_log, WEFT_LOG_WARN,
                   "kv: channel %llu: %s; closing the channel",
                   (unsigned long long)weft_channel_id(weft_ctx_channel(ctx)),
                   reason != NULL ? reason : weft_strerror(err));
  weft_channel_close(weft_ctx_channel(ctx), WEFT_PROMISE_NONE);
}

static void hs_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler hs_handler = {.name = "kv-tls-failures",
                                        .user_event = hs_event,
                                        .exception_caught = hs_exception,
                                        .handler_removed = hs_removed};

/* Puts the TLS handler first, and the one that logs failed handshakes
 * after it; false (the channel closed) when it could not. */
static bool add_tls(weft_channel *ch, kv_server *srv) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  int rc = weft_tls_add_first(p, srv->tls, NULL);
  hs_watch *w = rc == 0 ? calloc(1, sizeof *w) : NULL;
  if (rc == 0 && w == NULL)
    rc = WEFT_ENOMEM;
  if (w != NULL) {
    w->srv = srv;
    if ((rc = weft_pipeline_add_last(p, "tls-failures", &hs_handler, w)) < 0)
      free(w);
  }
  if (rc == 0)
    return true;
  weft_channel_log(ch, WEFT_LOG_WARN, "kv: cannot add the TLS handler: %s",
                   weft_strerror(rc));
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  return false;
}

void kv_resp_tls_channel_init(weft_channel *ch, void *arg) {
  if (add_tls(ch, arg))
    kv_resp_channel_init(ch, arg);
}

void kv_rpc_tls_channel_init(weft_channel *ch, void *arg) {
  if (add_tls(ch, arg))
    kv_rpc_channel_init(ch, arg);
}

void kv_tls_reject_init(weft_channel *ch, void *arg) { add_tls(ch, arg); }
