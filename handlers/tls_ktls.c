/* SPDX-License-Identifier: Apache-2.0 */
/* kTLS for the TLS handler: once a TLS 1.3 handshake completed and its
 * last flight left, the kernel takes over record encryption (TLS_TX) on
 * transports that can (tcp's ktls_tx op). Decryption stays in OpenSSL.
 *
 * OpenSSL 3.0 cannot switch a memory-BIO connection to kTLS itself, so
 * the pieces are put together here: the application traffic secrets come
 * from the key log callback (the only way 3.0 gives them out), the key
 * and IV are derived with HKDF-Expand-Label (RFC 8446, 7.3), and the
 * record sequence is 0: the client has sent no application record yet,
 * and a server with ktls sends no session tickets (tls_context.c), so it
 * has not either. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <linux/tls.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "handlers/tls_internal.h"

/* ---- the secrets, from the key log ---- */

static int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

void weft__tls_keylog_cb(const SSL *ssl, const char *line) {
  weft__tls_note *note = SSL_get_app_data(ssl);
  static const char *const labels[2] = {"CLIENT_TRAFFIC_SECRET_0 ",
                                        "SERVER_TRAFFIC_SECRET_0 "};
  for (int i = 0; note != NULL && i < 2; i++) {
    size_t l = strlen(labels[i]);
    if (strncmp(line, labels[i], l) != 0)
      continue;
    const char *hex = strchr(line + l, ' '); /* past the client random */
    if (hex == NULL)
      return;
    hex++;
    size_t n = 0;
    while (n < sizeof note->secret[i] && hex_value(hex[2 * n]) >= 0 &&
           hex_value(hex[2 * n + 1]) >= 0) {
      note->secret[i][n] = (unsigned char)(hex_value(hex[2 * n]) << 4 |
                                           hex_value(hex[2 * n + 1]));
      n++;
    }
    note->secret_len[i] = n;
  }
}

/* ---- keys ---- */

/* HKDF-Expand-Label(secret, label, "", out_len) of RFC 8446. */
static int expand_label(const EVP_MD *md, const unsigned char *secret,
                        size_t secret_len, const char *label,
                        unsigned char *out, size_t out_len) {
  unsigned char info[2 + 1 + 6 + 16 + 1];
  size_t l = strlen(label), n = 0;
  info[n++] = (unsigned char)(out_len >> 8);
  info[n++] = (unsigned char)out_len;
  info[n++] = (unsigned char)(6 + l);
  memcpy(info + n, "tls13 ", 6);
  memcpy(info + n + 6, label, l);
  n += 6 + l;
  info[n++] = 0; /* no context */
  EVP_KDF *kdf = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_HKDF, NULL);
  EVP_KDF_CTX *kctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
  EVP_KDF_free(kdf);
  if (kctx == NULL)
    return -1;
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                       (char *)EVP_MD_get0_name(md), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret,
                                        secret_len),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n),
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode), OSSL_PARAM_END};
  int rc = EVP_KDF_derive(kctx, out, out_len, params) == 1 ? 0 : -1;
  EVP_KDF_CTX_free(kctx);
  return rc;
}

typedef union crypto_info {
  struct tls12_crypto_info_aes_gcm_128 aes128;
  struct tls12_crypto_info_aes_gcm_256 aes256;
  struct tls12_crypto_info_chacha20_poly1305 chacha;
} crypto_info;

/* Fills `ci` for the session's cipher from our traffic secret. Returns its
 * size, or 0 with `why` filled. */
static size_t build_crypto_info(weft__tls_handler *s, crypto_info *ci,
                                char *why, size_t len) {
  const SSL_CIPHER *c = SSL_get_current_cipher(s->ssl);
  int dir = s->tctx->mode == WEFT_TLS_SERVER; /* our sending secret */
  if (c == NULL || s->note.secret_len[dir] == 0) {
    snprintf(why, len, "no traffic secret from OpenSSL's key log");
    return 0;
  }
  const EVP_MD *md = SSL_CIPHER_get_handshake_digest(c);
  uint16_t id = SSL_CIPHER_get_protocol_id(c);
  size_t key_len = id == 0x1301 ? 16 : 32; /* TLS_AES_128_GCM_SHA256 */
  if (md == NULL || (id != 0x1301 && id != 0x1302 && id != 0x1303)) {
    snprintf(why, len, "the kernel has no kTLS for cipher %s",
             SSL_CIPHER_get_name(c));
    return 0;
  }
  unsigned char key[32], iv[12];
  const unsigned char *secret = s->note.secret[dir];
  size_t secret_len = s->note.secret_len[dir];
  if (expand_label(md, secret, secret_len, "key", key, key_len) < 0 ||
      expand_label(md, secret, secret_len, "iv", iv, sizeof iv) < 0) {
    snprintf(why, len, "deriving the record keys failed");
    return 0;
  }
  /* AES-GCM: the IV's first 4 bytes are the kernel's salt, the rest its
   * IV; ChaCha20-Poly1305 takes all 12 as IV. */
#define FILL(f, cipher, salt_len)                                              \
  (ci->f.info.version = TLS_1_3_VERSION, ci->f.info.cipher_type = (cipher),    \
   memcpy(ci->f.salt, iv, (salt_len)),                                         \
   memcpy(ci->f.iv, iv + (salt_len), sizeof ci->f.iv),                         \
   memcpy(ci->f.key, key, sizeof ci->f.key), sizeof ci->f)
  memset(ci, 0, sizeof *ci);
  size_t size = id == 0x1303   ? FILL(chacha, TLS_CIPHER_CHACHA20_POLY1305, 0)
                : id == 0x1302 ? FILL(aes256, TLS_CIPHER_AES_GCM_256, 4)
                               : FILL(aes128, TLS_CIPHER_AES_GCM_128, 4);
#undef FILL
  /* rec_seq stays 0: no application record was sent yet. */
  OPENSSL_cleanse(key, sizeof key);
  OPENSSL_cleanse(iv, sizeof iv);
  return size;
}

/* One WARN line per process the first time kTLS was asked for and is not
 * used, with the reason. */
static void fallback_note(weft__tls_handler *s, const char *why) {
  static atomic_bool logged;
  if (!atomic_exchange(&logged, true))
    weft_channel_log(s->ch, WEFT_LOG_WARN,
                     "TLS: ktls = on, but %s; using user-space records "
                     "(logged once per process)",
                     why);
}

bool weft__tls_ktls_start(weft__tls_handler *s, bool drained) {
  char why[160];
  const weft_transport_ops *t = weft_channel_transport(s->ch);
  bool ok = false;
  if (!drained) {
    snprintf(why, sizeof why,
             "the handshake's last bytes did not leave within %d ms",
             WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS);
  } else if (SSL_version(s->ssl) != TLS1_3_VERSION) {
    snprintf(why, sizeof why,
             "this session is %s and kTLS is done here for "
             "TLS 1.3 only",
             SSL_get_version(s->ssl));
  } else if (t->ktls_tx == NULL || t->ktls_send_record == NULL) {
    snprintf(why, sizeof why, "transport %s has no kTLS", t->name);
  } else {
    crypto_info ci;
    size_t size = build_crypto_info(s, &ci, why, sizeof why);
    int rc = size > 0 ? t->ktls_tx(s->ch, &ci, size) : 0;
    OPENSSL_cleanse(&ci, sizeof ci);
    if (size > 0 && rc < 0)
      snprintf(why, sizeof why, "setting it up failed: %s%s", weft_strerror(rc),
               rc == WEFT_ENOENT ? " (no tls module in this kernel)" : "");
    ok = size > 0 && rc == 0;
  }
  OPENSSL_cleanse(s->note.secret, sizeof s->note.secret);
  if (!ok)
    fallback_note(s, why);
  return ok;
}
