/* SPDX-License-Identifier: Apache-2.0 */
/* Credentials of the KV client programs (client_auth.h): a flag, the [kv]
 * keys, REDISCLI_AUTH, in that order; never echoed. */
#include "client_auth.h"
#include "kv_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

/* Copies `value` into `dst` if it fits. */
static int take(char *dst, const char *value, const char *what, char *err,
                size_t err_len) {
  if (strlen(value) >= KV_CLIENT_SECRET_MAX) {
    snprintf(err, err_len, "%s: expected at most %d bytes", what,
             KV_CLIENT_SECRET_MAX - 1);
    return WEFT_EINVAL;
  }
  strcpy(dst, value);
  return 0;
}

int kv_client_auth_key(kv_client_auth *a, const char *key, const char *value,
                       char *err, size_t err_len) {
  if (strcmp(key, "password") == 0)
    return a->flag_password
               ? 0
               : take(a->password, value, "the password", err, err_len);
  if (strcmp(key, "client_user") == 0)
    return a->flag_user ? 0 : take(a->user, value, "the user", err, err_len);
  return 0; /* the server's keys */
}

int kv_client_auth_option(kv_client_auth *a, const weft_cli *cli, int opt,
                          char *arg) {
  if (opt == KV_AUTH_OPT_NO_WARNING) {
    a->no_warning = true;
    return 1;
  }
  if (opt != 'a' && opt != KV_AUTH_OPT_USER)
    return 0;
  bool user = opt == KV_AUTH_OPT_USER;
  char err[80];
  if (take(user ? a->user : a->password, arg, user ? "--user" : "--pass", err,
           sizeof err) < 0) {
    weft_cli_usage_error(cli, "%s", err);
    return -1;
  }
  *(user ? &a->flag_user : &a->flag_password) = true;
  if (!user)
    kv_secret_scrub(arg); /* out of /proc/PID/cmdline */
  return 1;
}

void kv_client_auth_apply(kv_client_auth *a, kv_client_options *o) {
  const char *env = getenv("REDISCLI_AUTH");
  if (a->password[0] == '\0' && env != NULL && strlen(env) < sizeof a->password)
    strcpy(a->password, env);
  o->password = a->password[0] != '\0' ? a->password : NULL;
  o->user = o->password != NULL && a->user[0] != '\0' ? a->user : NULL;
}

void kv_client_auth_clear(kv_client_auth *a) { explicit_bzero(a, sizeof *a); }

void kv_client_auth_warn(const kv_client_auth *a) {
  if (!a->flag_password || a->no_warning)
    return;
  fprintf(stderr, "Warning: Using a password with '-a' or '--pass' may not "
                  "be safe (other users can see it, e.g. with ps);\n"
                  "prefer WEFT_KV_PASSWORD, REDISCLI_AUTH or [kv] password "
                  "(--no-auth-warning: no warning).\n");
}
