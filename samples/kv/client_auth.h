/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/client_auth.h: where weft-kv and weft-kvbench take their
 * credentials from (client_auth.c), one rule for both: the -a / --pass /
 * --password flag (and --user), else [kv] password and [kv] client_user
 * (from -o, the environment's WEFT_KV_PASSWORD and WEFT_KV_CLIENT_USER, or
 * the file, in weft's order), else REDISCLI_AUTH as redis-cli reads it. The
 * password is never printed: error messages name the setting, not its
 * value, and a flag's copy in argv is overwritten so `ps` does not show
 * it. */
#ifndef WEFT_SAMPLES_KV_CLIENT_AUTH_H
#define WEFT_SAMPLES_KV_CLIENT_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/cli.h>

#include "client.h"

/** Longest password or user name taken, bytes with the NUL. */
#define KV_CLIENT_SECRET_MAX 1024

/** A program's credentials. Zero-initialise. */
typedef struct kv_client_auth {
  char user[KV_CLIENT_SECRET_MAX];     /* "" = the default user */
  char password[KV_CLIENT_SECRET_MAX]; /* "" = no AUTH */
  bool flag_password;                  /* a flag set it: it wins */
  bool flag_user;
  bool no_warning; /* --no-auth-warning */
} kv_client_auth;

/** getopt values of the long options below (-a is 'a'). */
enum { KV_AUTH_OPT_USER = 0x100, KV_AUTH_OPT_NO_WARNING = 0x101 };

/** The programs' credential options, for their getopt_long tables (with
 *  "a:" in the short options): --pass and --password (-a), --user,
 *  --no-auth-warning. */
// clang-format off
#define KV_CLIENT_AUTH_LONGOPTS                                                \
  {"pass", required_argument, NULL, 'a'},                                      \
  {"password", required_argument, NULL, 'a'},                                  \
  {"user", required_argument, NULL, KV_AUTH_OPT_USER},                         \
  {"no-auth-warning", no_argument, NULL, KV_AUTH_OPT_NO_WARNING}
// clang-format on

/**
 * A [kv] key for a client program's section callback: takes `password`
 * and `client_user` (unless a flag set them), accepts the server's other
 * keys. Returns 0, or WEFT_EINVAL for a value too long (the message does
 * not quote it).
 */
int kv_client_auth_key(kv_client_auth *a, const char *key, const char *value,
                       char *err, size_t err_len);

/**
 * Takes a getopt option if it is one of KV_CLIENT_AUTH_LONGOPTS': the
 * password's is copied and then overwritten in place (argv), so it is not
 * left in the process's command line. Returns 1 when taken, 0 when `opt`
 * is another option, -1 after printing a usage error through `cli`
 * (longer than KV_CLIENT_SECRET_MAX - 1 bytes).
 */
int kv_client_auth_option(kv_client_auth *a, const weft_cli *cli, int opt,
                          char *arg);

/**
 * After the configuration: REDISCLI_AUTH when no password came from a
 * flag or [kv] password, then sets the client options' user and password
 * (pointing into `a`, which must outlive the connect).
 */
void kv_client_auth_apply(kv_client_auth *a, kv_client_options *o);

/** Prints redis-cli's warning about a password on the command line (to
 *  stderr), in weft's words, when a flag gave one and --no-auth-warning
 *  did not silence it. */
void kv_client_auth_warn(const kv_client_auth *a);

/** Overwrites the credentials held in `a`. */
void kv_client_auth_clear(kv_client_auth *a);

#endif
