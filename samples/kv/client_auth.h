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

#include "client.h"

/** Longest password or user name taken, bytes with the NUL. */
#define KV_CLIENT_SECRET_MAX 1024

/** A program's credentials. Zero-initialise. */
typedef struct kv_client_auth {
  char user[KV_CLIENT_SECRET_MAX];     /* "" = the default user */
  char password[KV_CLIENT_SECRET_MAX]; /* "" = no AUTH */
  bool flag_password;                  /* a flag set it: it wins */
  bool flag_user;
} kv_client_auth;

/**
 * A [kv] key for a client program's section callback: takes `password`
 * and `client_user` (unless a flag set them), accepts the server's other
 * keys. Returns 0, or WEFT_EINVAL for a value too long (the message does
 * not quote it).
 */
int kv_client_auth_key(kv_client_auth *a, const char *key, const char *value,
                       char *err, size_t err_len);

/**
 * The --pass / -a flag (`is_user` false) or --user flag: copies `arg` and
 * overwrites it in place (argv), so the password is not left in the
 * process's command line. Returns 0 or WEFT_EINVAL (longer than
 * KV_CLIENT_SECRET_MAX - 1 bytes; nothing printed).
 */
int kv_client_auth_flag(kv_client_auth *a, char *arg, bool is_user);

/**
 * After the configuration: REDISCLI_AUTH when no password came from a
 * flag or [kv] password, then sets the client options' user and password
 * (pointing into `a`, which must outlive the connect).
 */
void kv_client_auth_apply(kv_client_auth *a, kv_client_options *o);

/** Prints redis-cli's warning about a password on the command line (to
 *  stderr), in weft's words. */
void kv_client_auth_warn(void);

/** Overwrites the credentials held in `a`. */
void kv_client_auth_clear(kv_client_auth *a);

#endif
