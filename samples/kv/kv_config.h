/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/kv_config.h: the keys of the KV service's config file. */
#ifndef WEFT_SAMPLES_KV_KV_CONFIG_H
#define WEFT_SAMPLES_KV_KV_CONFIG_H

#include <weft/config.h>

/**
 * Every key of the KV service's own sections, with defaults and valid
 * values: [kv] (read by weft-kv-server) and [kvbench] (weft-kvbench). One
 * table, so that one file serves every program of the service: each
 * program sets it as weft_config.app_keys and ignores the sections of the
 * others (their keys are still checked, and --help shows only its own).
 */
extern const weft_config_key kv_config_keys[];

/** A name and what kv_config_rename writes for it. */
typedef struct kv_config_name {
  const char *from, *to;
} kv_config_name;

/**
 * Copies `in` into `out` (`len` bytes with the NUL, cut if need be) with
 * every word that is one of the `n` names' `from` replaced by its `to`: a
 * word starts the text or follows a space or '(' and ends before a
 * character that is not a letter, a digit or '_'. For messages of weft's
 * TLS options ("cert_file x.pem: ...") in the words of a program's own
 * settings ("tls_cert_file x.pem: ...").
 */
void kv_config_rename(const char *in, const kv_config_name *names, size_t n,
                      char *out, size_t len);

#endif
