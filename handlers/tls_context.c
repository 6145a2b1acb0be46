/* SPDX-License-Identifier: Apache-2.0 */
/* TLS contexts (weft/tls.h): options and their config keys, the shared
 * SSL_CTX with weft's policy, OpenSSL's callbacks, and the texts that say
 * why a handshake failed. The per-channel engine is tls_handler.c. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <weft/error.h>

#include "handlers/tls_internal.h"

/* ---- options ---- */

void weft_tls_options_init(weft_tls_options *o) {
  memset(o, 0, sizeof *o);
  o->verify = WEFT_TLS_VERIFY_DEFAULT;
  o->min_protocol = WEFT_TLS_1_2;
  o->max_protocol = WEFT_TLS_1_3;
  o->handshake_timeout_ms = WEFT_TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT;
}

const weft_config_key weft_tls_config_keys[] = {
    {"tls", "cert_file", "",
     "PEM file: the certificate, then its chain (a server needs one)"},
    {"tls", "key_file", "", "PEM private key file; empty = in cert_file"},
    {"tls", "ca_file", "",
     "PEM file of the CAs that sign the peer's certificate"},
    {"tls", "ca_dir", "", "directory of hashed CA certificates"},
    {"tls", "verify", "",
     "none, optional or required; empty = required on a client, none on a "
     "server"},
    {"tls", "server_name", "",
     "client: the server's name, sent as SNI and checked in its "
     "certificate"},
    {"tls", "alpn", "", "ALPN protocols, a comma list in order of preference"},
    {"tls", "min_protocol", "tls1.2", "tls1.2 or tls1.3"},
    {"tls", "max_protocol", "tls1.3", "tls1.2 or tls1.3"},
    {"tls", "handshake_timeout_ms", "10000",
     "ms to complete the handshake, an integer from 0 (none) to 3600000"},
    {"tls", "ktls", "off",
     "on or off: the kernel encrypts records after a TLS 1.3 handshake "
     "(tcp; else user-space records)"},
    {NULL, NULL, NULL, NULL}};

_Static_assert(sizeof weft_tls_config_keys / sizeof weft_tls_config_keys[0] ==
                   WEFT_TLS_CONFIG_KEY_COUNT + 1,
               "WEFT_TLS_CONFIG_KEY_COUNT");

int weft_tls_config_keys_copy(weft_config_key *out, size_t n,
                              const char *section) {
  if (n < WEFT_TLS_CONFIG_KEY_COUNT + 1)
    return WEFT_ENOSPC;
  for (size_t i = 0; i <= WEFT_TLS_CONFIG_KEY_COUNT; i++) {
    out[i] = weft_tls_config_keys[i];
    if (out[i].section != NULL)
      out[i].section = section;
  }
  return WEFT_TLS_CONFIG_KEY_COUNT;
}

static int set_text(char *dst, size_t cap, const char *value, char *err,
                    size_t len) {
  size_t n = strlen(value);
  if (n >= cap) {
    snprintf(err, len, "at most %zu bytes", cap - 1);
    return WEFT_EINVAL;
  }
  memcpy(dst, value, n + 1);
  return 0;
}

static int parse_version(const char *value, weft_tls_version *out, char *err,
                         size_t len) {
  if (strcasecmp(value, "tls1.2") == 0)
    *out = WEFT_TLS_1_2;
  else if (strcasecmp(value, "tls1.3") == 0)
    *out = WEFT_TLS_1_3;
  else {
    snprintf(err, len, "expected tls1.2 or tls1.3");
    return WEFT_EINVAL;
  }
  return 0;
}

static int parse_switch(const char *v, bool *out, char *err, size_t len) {
  static const char *const on[] = {"on", "true", "yes", "1"};
  static const char *const off[] = {"off", "false", "no", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, on[i]) == 0)
      return *out = true, 0;
    if (strcasecmp(v, off[i]) == 0)
      return *out = false, 0;
  }
  snprintf(err, len, "expected on or off");
  return WEFT_EINVAL;
}

/* The ALPN text "h2,http/1.1" in wire format: each name behind its length
 * byte. Returns the wire length, or WEFT_EINVAL with `err` filled. */
static int alpn_wire(const char *text, unsigned char *out, size_t cap,
                     char *err, size_t len) {
  size_t n = 0;
  const char *p = text;
  while (*p != '\0') {
    size_t l = strcspn(p, ",");
    const char *name = p;
    p += l + (p[l] == ',');
    while (l > 0 && *name == ' ')
      name++, l--;
    while (l > 0 && name[l - 1] == ' ')
      l--;
    if (l == 0 || l > 255 || n + 1 + l > cap) {
      snprintf(err, len,
               "expected a comma list of protocol names of 1 to 255 bytes, "
               "%zu bytes in all at most",
               cap - 1);
      return WEFT_EINVAL;
    }
    out[n++] = (unsigned char)l;
    memcpy(out + n, name, l);
    n += l;
  }
  return (int)n;
}

int weft_tls_options_set(weft_tls_options *o, const char *key,
                         const char *value, char *err, size_t len) {
  if (strcmp(key, "cert_file") == 0)
    return set_text(o->cert_file, sizeof o->cert_file, value, err, len);
  if (strcmp(key, "key_file") == 0)
    return set_text(o->key_file, sizeof o->key_file, value, err, len);
  if (strcmp(key, "ca_file") == 0)
    return set_text(o->ca_file, sizeof o->ca_file, value, err, len);
  if (strcmp(key, "ca_dir") == 0)
    return set_text(o->ca_dir, sizeof o->ca_dir, value, err, len);
  if (strcmp(key, "server_name") == 0)
    return set_text(o->server_name, sizeof o->server_name, value, err, len);
  if (strcmp(key, "alpn") == 0) {
    unsigned char wire[WEFT_TLS_NAME_MAX];
    int rc = alpn_wire(value, wire, sizeof wire, err, len);
    return rc < 0 ? rc : set_text(o->alpn, sizeof o->alpn, value, err, len);
  }
  if (strcmp(key, "verify") == 0) {
    static const char *const names[] = {"", "none", "optional", "required"};
    for (int i = 0; i < 4; i++)
      if (strcasecmp(value, names[i]) == 0)
        return o->verify = (weft_tls_verify)i, 0;
    snprintf(err, len, "expected none, optional or required");
    return WEFT_EINVAL;
  }
  if (strcmp(key, "min_protocol") == 0)
    return parse_version(value, &o->min_protocol, err, len);
  if (strcmp(key, "max_protocol") == 0)
    return parse_version(value, &o->max_protocol, err, len);
  if (strcmp(key, "handshake_timeout_ms") == 0) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < 0 || v > 3600000) {
      snprintf(err, len, "expected an integer from 0 (none) to 3600000 (ms)");
      return WEFT_EINVAL;
    }
    o->handshake_timeout_ms = (int)v;
    return 0;
  }
  if (strcmp(key, "ktls") == 0)
    return parse_switch(value, &o->ktls, err, len);
  return WEFT_ENOENT;
}

/* ---- what OpenSSL's errors mean ---- */

void weft__tls_name(char *buf, size_t len, X509_NAME *name) {
  buf[0] = '\0';
  BIO *b = BIO_new(BIO_s_mem());
  if (b == NULL || name == NULL) {
    BIO_free(b);
    return;
  }
  X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  int n = BIO_read(b, buf, (int)len - 1);
  buf[n > 0 ? n : 0] = '\0';
  BIO_free(b);
}

/* The reason of an OpenSSL error code as text ("wrong version number"); a
 * system error's is strerror's ("No such file or directory"), which
 * OpenSSL 3.0 has no string for. */
static const char *reason_text(unsigned long e, char *buf, size_t len) {
  if (ERR_GET_LIB(e) == ERR_LIB_SYS && ERR_GET_REASON(e) > 0)
    return strerror(ERR_GET_REASON(e));
  const char *r = ERR_reason_error_string(e);
  if (r != NULL)
    return r;
  ERR_error_string_n(e, buf, len);
  return buf;
}

int weft__tls_failure(char *buf, size_t len, const char *what, SSL *ssl,
                      int ssl_err, const weft__tls_note *note) {
  unsigned long e = ERR_get_error(); /* the first: the root cause */
  ERR_clear_error();
  char tmp[160];
  if (e == 0) {
    if (ssl_err == SSL_ERROR_SYSCALL || ssl_err == SSL_ERROR_ZERO_RETURN)
      snprintf(buf, len, "%s: the peer ended the connection", what);
    else
      snprintf(buf, len, "%s: OpenSSL error %d", what, ssl_err);
    return WEFT_EPROTO;
  }
  int reason = ERR_GET_REASON(e);
  const char *text = reason_text(e, tmp, sizeof tmp);
  if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
      reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    long v = note != NULL && note->verify_err != 0 ? note->verify_err
             : ssl != NULL                         ? SSL_get_verify_result(ssl)
                                                   : X509_V_OK;
    if (note != NULL && note->verify_err != 0)
      snprintf(buf, len, "%s: %s: %s (peer certificate: %s, depth %d)", what,
               text, X509_verify_cert_error_string(v),
               note->verify_subject[0] ? note->verify_subject : "no subject",
               note->verify_depth);
    else
      snprintf(buf, len, "%s: %s: %s", what, text,
               X509_verify_cert_error_string(v));
    return WEFT_EPROTO;
  }
  const char *hint = "";
  if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
      (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST ||
       reason == SSL_R_HTTPS_PROXY_REQUEST ||
       reason == SSL_R_PACKET_LENGTH_TOO_LONG))
    hint = " (is the peer speaking plain text?)";
  else if (ERR_GET_LIB(e) == ERR_LIB_SSL && reason >= SSL_AD_REASON_OFFSET)
    hint = " (an alert from the peer: it refused the handshake)";
  else if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
           reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)
    hint = " (the peer closed without close_notify)";
  snprintf(buf, len, "%s: %s%s", what, text, hint);
  return WEFT_EPROTO;
}

/* ---- callbacks the context installs ---- */

void weft__tls_note_bind(SSL *ssl, weft__tls_note *note) {
  SSL_set_app_data(ssl, note);
}

/* Notes the first failure of the chain check (the certificate and why),
 * so the handshake's error can name them; the verdict is OpenSSL's. */
static int verify_cb(int ok, X509_STORE_CTX *store) {
  SSL *ssl =
      X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
  weft__tls_note *note = ssl != NULL ? SSL_get_app_data(ssl) : NULL;
  if (!ok && note != NULL && note->verify_err == 0) {
    note->verify_err = X509_STORE_CTX_get_error(store);
    note->verify_depth = X509_STORE_CTX_get_error_depth(store);
    X509 *cert = X509_STORE_CTX_get_current_cert(store);
    weft__tls_name(note->verify_subject, sizeof note->verify_subject,
                   cert != NULL ? X509_get_subject_name(cert) : NULL);
  }
  return ok;
}

/* Sees OpenSSL refuse a renegotiation (it sends no_renegotiation). */
static void info_cb(const SSL *ssl, int where, int ret) {
  if ((where & SSL_CB_WRITE_ALERT) == 0 ||
      (ret & 0xff) != SSL_AD_NO_RENEGOTIATION)
    return;
  weft__tls_note *note = SSL_get_app_data(ssl);
  if (note != NULL)
    note->reneg_refused = true;
}

/* Server: the first of our protocols the client offers; a client that
 * offers only others is refused (RFC 7301: no_application_protocol). */
static int alpn_select_cb(SSL *ssl, const unsigned char **out,
                          unsigned char *outlen, const unsigned char *in,
                          unsigned int inlen, void *arg) {
  (void)ssl;
  weft_tls_context *c = arg;
  unsigned char *sel;
  if (SSL_select_next_proto(&sel, outlen, c->alpn, (unsigned)c->alpn_len, in,
                            inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

/* ---- contexts ---- */

/* "<what> <file>: <OpenSSL's reason>" into err. */
static int load_failed(char *err, size_t len, const char *what,
                       const char *file) {
  unsigned long e = ERR_peek_last_error();
  char tmp[160];
  /* The system error (the file is missing) says it best when there is one:
   * it is the first error queued; OpenSSL's own is the last. */
  unsigned long first = ERR_peek_error();
  if (first != 0 && ERR_GET_LIB(first) == ERR_LIB_SYS)
    e = first;
  snprintf(err, len, "%s %s: %s", what, file,
           e != 0 ? reason_text(e, tmp, sizeof tmp) : "cannot be loaded");
  ERR_clear_error();
  return WEFT_EINVAL;
}

static int version_of(weft_tls_version v) {
  return v == WEFT_TLS_1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
}

static int check_options(weft_tls_mode mode, const weft_tls_options *o,
                         char *err, size_t len) {
  if ((o->min_protocol != WEFT_TLS_1_2 && o->min_protocol != WEFT_TLS_1_3) ||
      (o->max_protocol != WEFT_TLS_1_2 && o->max_protocol != WEFT_TLS_1_3)) {
    snprintf(err, len, "min_protocol and max_protocol: tls1.2 or tls1.3");
    return WEFT_EINVAL;
  }
  if (o->min_protocol > o->max_protocol) {
    snprintf(err, len, "min_protocol (tls1.3) is above max_protocol (tls1.2)");
    return WEFT_EINVAL;
  }
  if (o->verify < WEFT_TLS_VERIFY_DEFAULT ||
      o->verify > WEFT_TLS_VERIFY_REQUIRED || o->handshake_timeout_ms < 0) {
    snprintf(err, len, "verify or handshake_timeout_ms out of range");
    return WEFT_EINVAL;
  }
  if (mode == WEFT_TLS_SERVER && o->cert_file[0] == '\0') {
    snprintf(err, len, "a TLS server needs cert_file (and key_file)");
    return WEFT_EINVAL;
  }
  if (o->key_file[0] != '\0' && o->cert_file[0] == '\0') {
    snprintf(err, len, "key_file %s is set without cert_file", o->key_file);
    return WEFT_EINVAL;
  }
  if (mode == WEFT_TLS_SERVER && o->verify >= WEFT_TLS_VERIFY_OPTIONAL &&
      o->ca_file[0] == '\0' && o->ca_dir[0] == '\0') {
    snprintf(err, len,
             "verify = %s on a server needs ca_file or ca_dir (the CAs that "
             "sign client certificates)",
             o->verify == WEFT_TLS_VERIFY_REQUIRED ? "required" : "optional");
    return WEFT_EINVAL;
  }
  return 0;
}

static int load_files(weft_tls_context *c, const weft_tls_options *o, char *err,
                      size_t len) {
  SSL_CTX *x = c->ssl_ctx;
  if (o->cert_file[0] != '\0') {
    const char *key = o->key_file[0] != '\0' ? o->key_file : o->cert_file;
    if (SSL_CTX_use_certificate_chain_file(x, o->cert_file) != 1)
      return load_failed(err, len, "cert_file", o->cert_file);
    bool loaded = SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) == 1;
    unsigned long e = ERR_peek_last_error();
    if (!loaded && !(ERR_GET_LIB(e) == ERR_LIB_X509 &&
                     ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH))
      return load_failed(err, len, "key_file", key);
    if (!loaded || SSL_CTX_check_private_key(x) != 1) {
      ERR_clear_error();
      snprintf(err, len, "cert_file %s and key_file %s do not match",
               o->cert_file, key);
      return WEFT_EINVAL;
    }
  }
  bool verifying = c->verify != WEFT_TLS_VERIFY_NONE;
  if (o->ca_file[0] != '\0' || o->ca_dir[0] != '\0') {
    const char *f = o->ca_file[0] ? o->ca_file : NULL;
    const char *d = o->ca_dir[0] ? o->ca_dir : NULL;
    if (SSL_CTX_load_verify_locations(x, f, d) != 1)
      return load_failed(err, len, f != NULL ? "ca_file" : "ca_dir",
                         f != NULL ? f : d);
    if (c->mode == WEFT_TLS_SERVER && f != NULL) {
      /* Tells clients which CAs we take, so they pick the right cert. */
      STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f);
      if (names != NULL)
        SSL_CTX_set_client_CA_list(x, names);
      ERR_clear_error();
    }
  } else if (verifying && SSL_CTX_set_default_verify_paths(x) != 1) {
    ERR_clear_error(); /* no system store: every chain will fail, clearly */
  }
  return 0;
}

static int apply_policy(weft_tls_context *c, const weft_tls_options *o,
                        char *err, size_t len) {
  SSL_CTX *x = c->ssl_ctx;
  if (SSL_CTX_set_min_proto_version(x, version_of(o->min_protocol)) != 1 ||
      SSL_CTX_set_max_proto_version(x, version_of(o->max_protocol)) != 1) {
    ERR_clear_error();
    snprintf(err, len, "this OpenSSL does not support the protocol range");
    return WEFT_EINVAL;
  }
  /* Renegotiation is a DoS lever and a source of confusion: off both
   * ways (client-initiated renegotiation is refused in OpenSSL 3 unless
   * SSL_OP_ALLOW_CLIENT_RENEGOTIATION, which stays clear). */
  SSL_CTX_set_options(x, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_clear_options(x, SSL_OP_ALLOW_CLIENT_RENEGOTIATION |
                               SSL_OP_LEGACY_SERVER_CONNECT);
  /* OpenSSL's three TLS 1.3 suites, AES-128-GCM first (as Go and
   * BoringSSL order them): its 10 rounds encrypt bulk data ~15% faster
   * than AES-256's 14 here, at a strength TLS 1.3 rates alike. A server
   * follows the client's order (OpenSSL's default), so peers that put
   * AES-256 first get it. */
  if (SSL_CTX_set_ciphersuites(x, "TLS_AES_128_GCM_SHA256:"
                                  "TLS_AES_256_GCM_SHA384:"
                                  "TLS_CHACHA20_POLY1305_SHA256") != 1) {
    ERR_clear_error();
    snprintf(err, len, "this OpenSSL lacks the TLS 1.3 AES-GCM suites");
    return WEFT_EINVAL;
  }
  /* Idle connections give their read and write buffers back. */
  SSL_CTX_set_mode(x, SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char sid_ctx[] = "weft";
  SSL_CTX_set_session_id_context(x, sid_ctx, sizeof sid_ctx - 1);
  int mode = SSL_VERIFY_NONE;
  if (c->mode == WEFT_TLS_SERVER) {
    if (c->verify == WEFT_TLS_VERIFY_OPTIONAL)
      mode = SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
    else if (c->verify == WEFT_TLS_VERIFY_REQUIRED)
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT |
             SSL_VERIFY_CLIENT_ONCE;
  } else if (c->verify != WEFT_TLS_VERIFY_NONE) {
    mode = SSL_VERIFY_PEER;
  }
  SSL_CTX_set_verify(x, mode, verify_cb);
  SSL_CTX_set_info_callback(x, info_cb);
  if (o->ktls) {
    /* The traffic secrets for the kernel: OpenSSL 3.0 gives them out
     * through the key log only. A server sends no session tickets, so the
     * kernel's first record is number 0 (tls_ktls.c). */
    SSL_CTX_set_keylog_callback(x, weft__tls_keylog_cb);
    if (c->mode == WEFT_TLS_SERVER)
      SSL_CTX_set_num_tickets(x, 0);
  }
  if (o->alpn[0] != '\0') {
    int n = alpn_wire(o->alpn, c->alpn, sizeof c->alpn, err, len);
    if (n < 0)
      return n;
    c->alpn_len = (size_t)n;
    if (c->mode == WEFT_TLS_SERVER)
      SSL_CTX_set_alpn_select_cb(x, alpn_select_cb, c);
    else if (SSL_CTX_set_alpn_protos(x, c->alpn, (unsigned)c->alpn_len) != 0)
      return ERR_clear_error(), WEFT_ENOMEM;
  }
  return 0;
}

int weft_tls_context_new(weft_tls_context **out, weft_tls_mode mode,
                         const weft_tls_options *o, char *err, size_t len) {
  if (err != NULL && len > 0)
    err[0] = '\0';
  char scratch[8];
  if (err == NULL || len == 0)
    err = scratch, len = sizeof scratch;
  if (mode != WEFT_TLS_CLIENT && mode != WEFT_TLS_SERVER) {
    snprintf(err, len, "mode: WEFT_TLS_CLIENT or WEFT_TLS_SERVER");
    return WEFT_EINVAL;
  }
  int rc = check_options(mode, o, err, len);
  if (rc < 0)
    return rc;
  weft_tls_context *c = calloc(1, sizeof *c);
  if (c == NULL)
    return WEFT_ENOMEM;
  atomic_init(&c->refs, 1);
  c->mode = mode;
  c->verify = o->verify != WEFT_TLS_VERIFY_DEFAULT ? o->verify
              : mode == WEFT_TLS_CLIENT            ? WEFT_TLS_VERIFY_REQUIRED
                                                   : WEFT_TLS_VERIFY_NONE;
  c->handshake_timeout_ms = o->handshake_timeout_ms;
  c->ktls = o->ktls;
  memcpy(c->server_name, o->server_name, sizeof c->server_name);
  c->server_name[sizeof c->server_name - 1] = '\0';
  ERR_clear_error();
  c->ssl_ctx = SSL_CTX_new(mode == WEFT_TLS_SERVER ? TLS_server_method()
                                                   : TLS_client_method());
  if (c->ssl_ctx == NULL) {
    ERR_clear_error();
    free(c);
    return WEFT_ENOMEM;
  }
  rc = apply_policy(c, o, err, len);
  if (rc == 0)
    rc = load_files(c, o, err, len);
  if (rc < 0) {
    weft_tls_context_release(c);
    return rc;
  }
  *out = c;
  return 0;
}

weft_tls_context *weft_tls_context_retain(weft_tls_context *c) {
  atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void weft_tls_context_release(weft_tls_context *c) {
  if (c == NULL ||
      atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
    return;
  SSL_CTX_free(c->ssl_ctx);
  free(c);
}

weft_tls_mode weft_tls_context_mode(const weft_tls_context *c) {
  return c->mode;
}
