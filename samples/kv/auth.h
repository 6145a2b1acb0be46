/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/auth.h: passwords of the KV server, as Redis 7 has them: one
 * for the default user ([kv] requirepass) and one ACL user with its own
 * ([kv] user, [kv] user_password). Only SHA-256 digests are kept (OpenSSL's
 * EVP digest), and a password is checked by comparing its digest with the
 * stored one in constant time (CRYPTO_memcmp), so neither the password's
 * length nor the position of its first wrong byte shows in the time a
 * check takes.
 *
 * Without requirepass the default user needs no password: every connection
 * is authenticated from the start (Redis' "nopass"), and then protected
 * mode (server.h) refuses clients from other hosts.
 */
#ifndef WEFT_SAMPLES_KV_AUTH_H
#define WEFT_SAMPLES_KV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Bytes of a SHA-256 digest. */
#define KV_SHA256_BYTES 32

/**
 * Writes the SHA-256 digest of `len` bytes at `data` into `out` (OpenSSL's
 * EVP_Digest). False if OpenSSL could not (no memory, or a provider
 * without SHA-256): `out` is then filled with random bytes, so it matches
 * no stored digest. Any thread.
 */
bool kv_sha256(const void *data, size_t len, uint8_t out[KV_SHA256_BYTES]);

/** Longest ACL user name, bytes. */
#define KV_USER_MAX 64

/** The passwords. Initialise with kv_auth_init(). */
typedef struct kv_auth {
  bool default_pass; /* requirepass set: connections start unauthenticated */
  uint8_t default_digest[KV_SHA256_BYTES];
  bool user_set; /* the ACL user exists */
  char user[KV_USER_MAX + 1];
  uint8_t user_digest[KV_SHA256_BYTES];
} kv_auth;

/**
 * Fills `a` from the settings: `requirepass` (NULL or "" = none), `user`
 * and `user_password` (both set or both empty; the user may not be
 * "default", whose password is requirepass). Returns 0, or WEFT_EINVAL with
 * the reason in `err` (naming the [kv] keys, never a password).
 */
int kv_auth_init(kv_auth *a, const char *requirepass, const char *user,
                 const char *user_password, char *err, size_t err_len);

/** What an AUTH attempt came to. */
typedef enum kv_auth_result {
  KV_AUTH_OK_DEFAULT, /* authenticated as the default user */
  KV_AUTH_OK_USER,    /* authenticated as the ACL user */
  KV_AUTH_WRONGPASS,  /* no such user, or the wrong password */
} kv_auth_result;

/**
 * Checks `user` (NULL or "default" for the default user) and `pass`. The
 * default user without requirepass takes any password, as Redis' nopass
 * user. Any thread.
 */
kv_auth_result kv_auth_check(const kv_auth *a, const void *user, size_t ulen,
                             const void *pass, size_t plen);

/** True when `a` and `b` (KV_SHA256_BYTES each) are equal; the time taken
 *  does not depend on where they differ. */
bool kv_digest_equal(const uint8_t *a, const uint8_t *b);

/** Redis' error texts. */
#define KV_NOAUTH_TEXT "NOAUTH Authentication required."
#define KV_WRONGPASS_TEXT                                                      \
  "WRONGPASS invalid username-password pair or user is disabled."
#define KV_AUTH_NOPASS_TEXT                                                    \
  "ERR AUTH <password> called without any password configured for the "        \
  "default user. Are you sure your configuration is correct?"
#define KV_HELLO_NOAUTH_TEXT                                                   \
  "NOAUTH HELLO must be called with the client already authenticated, "        \
  "otherwise the HELLO AUTH <user> <pass> option can be used to "              \
  "authenticate the client and select the RESP protocol version at the "       \
  "same time"

/**
 * The reply to a client that protected mode refuses (Redis 7's text, with
 * weft's settings named).
 */
#define KV_DENIED_TEXT                                                         \
  "DENIED weft-kv-server is running in protected mode because protected "      \
  "mode is enabled and no password is set for the default user. In this "      \
  "mode connections are only accepted from the loopback interface. If you "    \
  "want to connect from external computers to weft-kv-server you may "         \
  "adopt one of the following solutions: 1) Just disable protected mode "      \
  "by setting '[kv] protected_mode = no' in the server's configuration "       \
  "file (or WEFT_KV_PROTECTED_MODE=no in its environment) and restarting "     \
  "the server, however MAKE SURE weft-kv-server is not publicly "              \
  "accessible from internet if you do so. 2) If you started the server "       \
  "manually just for testing, restart it with the '-o "                        \
  "kv.protected_mode=no' option. 3) Set up an authentication password for "    \
  "the default user with '[kv] requirepass'. NOTE: You only need to do "       \
  "one of the above things in order for the server to start accepting "        \
  "connections from the outside."

#endif
