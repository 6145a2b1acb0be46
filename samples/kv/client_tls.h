/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/client_tls.h: TLS for weft-kv and weft-kvbench
 * (client_tls.c), one rule for both, with redis-cli's flags: --tls,
 * --cacert FILE, --cacertdir DIR, --cert FILE, --key FILE, --sni NAME,
 * --insecure; or the [kv] keys client_tls, tls_ca_cert_file,
 * tls_ca_cert_dir, tls_client_cert_file, tls_client_key_file, client_sni
 * (from -o, the environment or the file, in weft's order). A flag wins
 * over its key. The client checks the server's certificate against the CAs
 * (the system's when none is given) and the name it connects to (--sni,
 * else the connect address's host: an IP address is checked against the
 * certificate's IP entries); --insecure checks nothing.
 */
#ifndef WEFT_SAMPLES_KV_CLIENT_TLS_H
#define WEFT_SAMPLES_KV_CLIENT_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/cli.h>
#include <weft/tls.h>

#include "client.h"

/** A program's TLS settings. Zero-initialise. */
typedef struct kv_client_tls {
  bool on;                           /* --tls or [kv] client_tls */
  bool insecure;                     /* --insecure */
  char ca_file[WEFT_TLS_PATH_MAX];   /* --cacert, tls_ca_cert_file */
  char ca_dir[WEFT_TLS_PATH_MAX];    /* --cacertdir, tls_ca_cert_dir */
  char cert_file[WEFT_TLS_PATH_MAX]; /* --cert, tls_client_cert_file */
  char key_file[WEFT_TLS_PATH_MAX];  /* --key, tls_client_key_file */
  char sni[WEFT_TLS_NAME_MAX];       /* --sni, client_sni */
  unsigned by_flag;      /* bits of the settings a flag set (kept) */
  weft_tls_context *ctx; /* made by kv_client_tls_apply, or NULL */
  char server_name[WEFT_TLS_NAME_MAX]; /* what kv_client_tls_apply chose */
} kv_client_tls;

/** getopt values of KV_CLIENT_TLS_LONGOPTS. */
enum {
  KV_TLS_OPT_TLS = 0x200,
  KV_TLS_OPT_CACERT,
  KV_TLS_OPT_CACERTDIR,
  KV_TLS_OPT_CERT,
  KV_TLS_OPT_KEY,
  KV_TLS_OPT_SNI,
  KV_TLS_OPT_INSECURE
};

/** The programs' TLS options, for their getopt_long tables. */
// clang-format off
#define KV_CLIENT_TLS_LONGOPTS                                                 \
  {"tls", no_argument, NULL, KV_TLS_OPT_TLS},                                  \
  {"cacert", required_argument, NULL, KV_TLS_OPT_CACERT},                      \
  {"cacertdir", required_argument, NULL, KV_TLS_OPT_CACERTDIR},                \
  {"cert", required_argument, NULL, KV_TLS_OPT_CERT},                          \
  {"key", required_argument, NULL, KV_TLS_OPT_KEY},                            \
  {"sni", required_argument, NULL, KV_TLS_OPT_SNI},                            \
  {"insecure", no_argument, NULL, KV_TLS_OPT_INSECURE}
// clang-format on

/** The flags' lines for weft_cli.flags. */
#define KV_CLIENT_TLS_FLAGS_HELP                                               \
  "  --tls                   speak TLS (to the server's [kv] "                 \
  "tls_rpc_listen)\n"                                                          \
  "  --cacert FILE           CAs that sign the server's certificate "          \
  "(PEM)\n"                                                                    \
  "  --cacertdir DIR         or a directory of hashed CA certificates\n"       \
  "  --cert FILE, --key FILE a client certificate and its key (PEM)\n"         \
  "  --sni NAME              the server's name (default: the connect "         \
  "host)\n"                                                                    \
  "  --insecure              do not check the server's certificate\n"

/**
 * A [kv] key for a client program's section callback: client_tls,
 * tls_ca_cert_file, tls_ca_cert_dir, tls_client_cert_file,
 * tls_client_key_file, client_sni (unless a flag set them). Returns 0,
 * WEFT_ENOENT for another key, or WEFT_EINVAL with the valid values in
 * `err`.
 */
int kv_client_tls_key(kv_client_tls *t, const char *key, const char *value,
                      char *err, size_t err_len);

/**
 * Takes a getopt option if it is one of KV_CLIENT_TLS_LONGOPTS'. Returns 1
 * when taken, 0 when `opt` is another option, -1 after printing a usage
 * error through `cli` (a value too long).
 */
int kv_client_tls_option(kv_client_tls *t, const weft_cli *cli, int opt,
                         const char *arg);

/**
 * After the configuration: when TLS is on, makes the client context (the
 * CAs, the client certificate, verify required, or none with --insecure)
 * and sets `o->tls` and `o->tls_server_name` (the --sni name, else the
 * host of `uri`, pointing into `t`, which must outlive the connect).
 * Returns 0 (nothing done when TLS is off), or WEFT_EINVAL with `err`
 * naming the flag or key and the file.
 */
int kv_client_tls_apply(kv_client_tls *t, const char *uri, kv_client_options *o,
                        char *err, size_t err_len);

/** Drops the context kv_client_tls_apply made (the clients hold their own
 *  references). */
void kv_client_tls_release(kv_client_tls *t);

#endif
