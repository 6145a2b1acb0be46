/* SPDX-License-Identifier: Apache-2.0 */
/* The KV server's passwords (auth.h) and the commands that check them:
 * AUTH [user] password, and HELLO [2|3 [AUTH user password] [SETNAME
 * name]], in Redis 7's words. Passwords are hashed with SHA-256 (OpenSSL's
 * EVP) and the digests compared in constant time (CRYPTO_memcmp). */
#include "command_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <weft/error.h>

int kv_auth_init(kv_auth *a, const char *requirepass, const char *user,
                 const char *user_password, char *err, size_t err_len) {
  memset(a, 0, sizeof *a);
  bool has_user = user != NULL && user[0] != '\0';
  bool has_upass = user_password != NULL && user_password[0] != '\0';
  if (has_user != has_upass) {
    snprintf(err, err_len,
             "[kv] user and [kv] user_password go together: "
             "set both, or neither");
    return WEFT_EINVAL;
  }
  if (has_user && (strlen(user) > KV_USER_MAX || strcmp(user, "default") == 0 ||
                   strchr(user, ' '))) {
    snprintf(err, err_len,
             "[kv] user: expected a name of 1 to %d bytes without spaces, "
             "other than \"default\" (whose password is [kv] requirepass)",
             KV_USER_MAX);
    return WEFT_EINVAL;
  }
  bool hashed = true;
  if (requirepass != NULL && requirepass[0] != '\0') {
    a->default_pass = true;
    hashed = kv_sha256(requirepass, strlen(requirepass), a->default_digest);
  }
  if (has_user) {
    a->user_set = true;
    snprintf(a->user, sizeof a->user, "%s", user);
    hashed &= kv_sha256(user_password, strlen(user_password), a->user_digest);
  }
  if (!hashed) {
    snprintf(err, err_len,
             "cannot hash the passwords: OpenSSL has no SHA-256 here");
    return WEFT_ENOTSUP;
  }
  return 0;
}

bool kv_sha256(const void *data, size_t len, uint8_t out[KV_SHA256_BYTES]) {
  unsigned int n = 0;
  if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) == 1 &&
      n == KV_SHA256_BYTES)
    return true;
  RAND_bytes(out, KV_SHA256_BYTES); /* a digest that matches nothing */
  return false;
}

bool kv_digest_equal(const uint8_t *a, const uint8_t *b) {
  return CRYPTO_memcmp(a, b, KV_SHA256_BYTES) == 0;
}

kv_auth_result kv_auth_check(const kv_auth *a, const void *user, size_t ulen,
                             const void *pass, size_t plen) {
  uint8_t digest[KV_SHA256_BYTES];
  kv_sha256(pass, plen, digest); /* on failure it matches nothing */
  bool is_default =
      user == NULL || (ulen == 7 && memcmp(user, "default", 7) == 0);
  if (is_default) {
    if (!a->default_pass) /* nopass: any password */
      return KV_AUTH_OK_DEFAULT;
    return kv_digest_equal(digest, a->default_digest) ? KV_AUTH_OK_DEFAULT
                                                      : KV_AUTH_WRONGPASS;
  }
  bool named = a->user_set && ulen == strlen(a->user) &&
               memcmp(user, a->user, ulen) == 0;
  /* The digest is compared for an unknown user too: the same work. */
  bool match = kv_digest_equal(digest, a->user_digest);
  return named && match ? KV_AUTH_OK_USER : KV_AUTH_WRONGPASS;
}

/* Authenticates the session as `user` (NULL: default) with `pass`. True
 * when it worked; a failure leaves the session as it was (Redis' rule). */
static bool authenticate(kv_session *s, const kv_arg *user,
                         const kv_arg *pass) {
  kv_auth_result r = kv_auth_check(&s->shared->auth, user ? user->ptr : NULL,
                                   user ? user->len : 0, pass->ptr, pass->len);
  if (r == KV_AUTH_WRONGPASS)
    return false;
  bool was = s->authenticated;
  s->authenticated = true;
  s->acl_user = r == KV_AUTH_OK_USER;
  if (!was)
    kv_session_authenticated(s);
  return true;
}

/* Wipes a password where the command read it: its bytes lie in the
 * received buffer (RESP's argv, RPC's payload, a MULTI queue's copy),
 * which goes back to the pool, and would stay readable there until
 * reused. */
static void wipe_arg(const kv_arg *a) {
  OPENSSL_cleanse((void *)a->ptr, a->len);
}

/* AUTH password | AUTH username password. */
static void auth_run(const kv_call *c) {
  if (c->argc > 2)
    return kv_reply_syntax(c);
  if (c->argc == 1 && !c->sess->shared->auth.default_pass)
    return c->ops->error(c->w, KV_AUTH_NOPASS_TEXT);
  bool ok = c->argc == 1 ? authenticate(c->sess, NULL, &c->argv[0])
                         : authenticate(c->sess, &c->argv[0], &c->argv[1]);
  if (!ok)
    return c->ops->error(c->w, KV_WRONGPASS_TEXT);
  c->ops->simple(c->w, "OK");
}

void kv_cmd_auth(const kv_call *c) {
  auth_run(c);
  for (size_t i = 0; i < c->argc; i++) /* the password is the last; */
    wipe_arg(&c->argv[i]);             /* with a syntax error, any */
}

/* Replies "ERR Syntax error in HELLO option '<opt>'". */
static void hello_syntax(const kv_call *c, const kv_arg *opt) {
  char o[64];
  size_t n = opt->len < sizeof o - 1 ? opt->len : sizeof o - 1;
  memcpy(o, opt->ptr, n);
  o[n] = '\0';
  kv_reply_errorf(c, "ERR Syntax error in HELLO option '%s'", o);
}

/* HELLO [protover [AUTH username password] [SETNAME clientname]]: Redis
 * 7's checks in its order, then the map of server facts, in the protocol
 * version just chosen. */
static void hello_run(const kv_call *c) {
  int64_t ver = 0;
  size_t j = 0;
  if (c->argc >= 1) {
    if (!kv_parse_i64(&c->argv[j++], &ver))
      return c->ops->error(
          c->w, "ERR Protocol version is not an integer or out of range");
    if (ver < 2 || ver > 3)
      return c->ops->error(c->w, "NOPROTO unsupported protocol version");
  }
  const kv_arg *user = NULL, *pass = NULL, *name = NULL;
  for (; j < c->argc; j++) {
    size_t more = c->argc - 1 - j;
    if (kv_arg_is(&c->argv[j], "AUTH") && more >= 2) {
      user = &c->argv[j + 1];
      pass = &c->argv[j + 2];
      j += 2;
    } else if (kv_arg_is(&c->argv[j], "SETNAME") && more >= 1) {
      name = &c->argv[++j];
    } else {
      return hello_syntax(c, &c->argv[j]);
    }
  }
  if (user != NULL && !authenticate(c->sess, user, pass))
    return c->ops->error(c->w, KV_WRONGPASS_TEXT);
  if (!c->sess->authenticated)
    return c->ops->error(c->w, KV_HELLO_NOAUTH_TEXT);
  const char *err = name != NULL ? kv_session_set_name(c->sess, name) : NULL;
  if (err != NULL)
    return c->ops->error(c->w, err);
  if (ver != 0)
    c->sess->resp = (uint8_t)ver;
  c->ops->map(c->w, 7);
  kv_reply_cstr(c, "server");
  kv_reply_cstr(c, "redis");
  kv_reply_cstr(c, "version");
  kv_reply_cstr(c, KV_REDIS_VERSION);
  kv_reply_cstr(c, "proto");
  c->ops->integer(c->w, c->sess->resp);
  kv_reply_cstr(c, "id");
  c->ops->integer(c->w, (int64_t)c->sess->id);
  kv_reply_cstr(c, "mode");
  kv_reply_cstr(c, "standalone");
  kv_reply_cstr(c, "role");
  kv_reply_cstr(c, "master");
  kv_reply_cstr(c, "modules");
  c->ops->array(c->w, 0);
}

/* HELLO, then the password of every AUTH option is wiped (wipe_arg),
 * whatever the reply was. */
void kv_cmd_hello(const kv_call *c) {
  hello_run(c);
  for (size_t j = 0; j + 2 < c->argc; j++)
    if (kv_arg_is(&c->argv[j], "AUTH"))
      wipe_arg(&c->argv[j + 2]);
}
