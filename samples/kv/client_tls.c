/* SPDX-License-Identifier: Apache-2.0 */
/* TLS for the KV client programs (client_tls.h): redis-cli's flags or the
 * [kv] keys, then one client context for every connection. */
#include "client_tls.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <weft/endpoint.h>
#include <weft/error.h>

#include "kv_config.h"

/* One setting: its flag, its key, where it goes, and its bit in by_flag. */
typedef struct setting {
  int opt;
  const char *flag, *key;
  size_t off, cap; /* offset in kv_client_tls; cap 0 = a switch */
} setting;

#define TEXT(f) offsetof(kv_client_tls, f), sizeof(((kv_client_tls *)0)->f)

static const setting settings[] = {
    {KV_TLS_OPT_TLS, "--tls", "client_tls", offsetof(kv_client_tls, on), 0},
    {KV_TLS_OPT_CACERT, "--cacert", "tls_ca_cert_file", TEXT(ca_file)},
    {KV_TLS_OPT_CACERTDIR, "--cacertdir", "tls_ca_cert_dir", TEXT(ca_dir)},
    {KV_TLS_OPT_CERT, "--cert", "tls_client_cert_file", TEXT(cert_file)},
    {KV_TLS_OPT_KEY, "--key", "tls_client_key_file", TEXT(key_file)},
    {KV_TLS_OPT_SNI, "--sni", "client_sni", TEXT(sni)},
    {KV_TLS_OPT_INSECURE, "--insecure", NULL, offsetof(kv_client_tls, insecure),
     0}};

#define N_SETTINGS (sizeof settings / sizeof settings[0])

/* yes/no, as the server's switches take them. */
static int parse_switch(const char *v, bool *out, char *err, size_t err_len) {
  static const char *const yes[] = {"yes", "true", "on", "1"};
  static const char *const no[] = {"no", "false", "off", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
      *out = strcasecmp(v, yes[i]) == 0;
      return 0;
    }
  }
  snprintf(err, err_len, "expected yes or no (true, false, on, off, 1, 0)");
  return WEFT_EINVAL;
}

/* Sets setting `s` of `t` from `value`. */
static int set(kv_client_tls *t, const setting *s, const char *value, char *err,
               size_t err_len) {
  char *field = (char *)t + s->off;
  if (s->cap == 0)
    return parse_switch(value, (bool *)field, err, err_len);
  if (strlen(value) >= s->cap) {
    snprintf(err, err_len, "expected at most %zu bytes", s->cap - 1);
    return WEFT_EINVAL;
  }
  strcpy(field, value);
  return 0;
}

int kv_client_tls_key(kv_client_tls *t, const char *key, const char *value,
                      char *err, size_t err_len) {
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (settings[i].key != NULL && strcmp(key, settings[i].key) == 0)
      return t->by_flag & (1u << i) ? 0
                                    : set(t, &settings[i], value, err, err_len);
  return WEFT_ENOENT;
}

int kv_client_tls_option(kv_client_tls *t, const weft_cli *cli, int opt,
                         const char *arg) {
  for (size_t i = 0; i < N_SETTINGS; i++) {
    if (settings[i].opt != opt)
      continue;
    char err[96];
    if (set(t, &settings[i], settings[i].cap == 0 ? "yes" : arg, err,
            sizeof err) < 0) {
      weft_cli_usage_error(cli, "%s: %s", settings[i].flag, err);
      return -1;
    }
    t->by_flag |= 1u << i;
    return 1;
  }
  return 0;
}

int kv_client_tls_apply(kv_client_tls *t, const char *uri, kv_client_options *o,
                        char *err, size_t err_len) {
  if (!t->on)
    return 0;
  weft_tls_options to;
  weft_tls_options_init(&to);
  memcpy(to.ca_file, t->ca_file, sizeof to.ca_file);
  memcpy(to.ca_dir, t->ca_dir, sizeof to.ca_dir);
  memcpy(to.cert_file, t->cert_file, sizeof to.cert_file);
  memcpy(to.key_file, t->key_file, sizeof to.key_file);
  to.verify = t->insecure ? WEFT_TLS_VERIFY_NONE : WEFT_TLS_VERIFY_REQUIRED;
  if (t->sni[0] != '\0') {
    snprintf(t->server_name, sizeof t->server_name, "%s", t->sni);
  } else {
    weft_endpoint ep;
    if (weft_endpoint_parse(uri, &ep, NULL, 0) == 0)
      snprintf(t->server_name, sizeof t->server_name, "%s", ep.host);
  }
  if (t->server_name[0] == '\0')
    snprintf(t->server_name, sizeof t->server_name, "localhost");
  /* weft's option names in errors, as the flags and keys name them. */
  static const kv_config_name names[] = {
      {"ca_file", "--cacert ([kv] tls_ca_cert_file)"},
      {"ca_dir", "--cacertdir ([kv] tls_ca_cert_dir)"},
      {"cert_file", "--cert ([kv] tls_client_cert_file)"},
      {"key_file", "--key ([kv] tls_client_key_file)"}};
  char why[400];
  int rc = weft_tls_context_new(&t->ctx, WEFT_TLS_CLIENT, &to, why, sizeof why);
  if (rc < 0) {
    char mine[600];
    kv_config_rename(why, names, sizeof names / sizeof names[0], mine,
                     sizeof mine);
    snprintf(err, err_len, "TLS: %s", mine);
    return rc;
  }
  o->tls = t->ctx;
  o->tls_server_name = t->server_name;
  return 0;
}

void kv_client_tls_release(kv_client_tls *t) {
  weft_tls_context_release(t->ctx);
  t->ctx = NULL;
}
