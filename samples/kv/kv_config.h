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

/**
 * weft_cli.unread lists (weft_config.unread_keys) for the service's
 * programs, which share [kv]: the server's [kv] keys that its clients
 * (weft-kv, weft-kvbench) do not read, and the clients' that the server
 * does not read, with [server] listen (the server has four listeners). A
 * [kv] key is in one of them or read by both (the CA files, and the client
 * certificate that MIGRATE presents): test_kv_cluster checks it, so a new
 * key is sorted.
 */
extern const char *const kv_client_unread[];
extern const char *const kv_server_unread[];

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

/**
 * Overwrites the text of a secret that came on the command line (a
 * password flag's argument) in place, so `ps` and /proc/PID/cmdline no
 * longer show it. The length stays (the kernel's copy of the command line
 * is this memory). Take a copy first.
 */
void kv_secret_scrub(char *arg);

/**
 * Scrubs (kv_secret_scrub) the value of every "-o section.key=value" in
 * `argv` whose section.key is one of the NULL-terminated `keys` (e.g.
 * "kv.requirepass"), in whatever argument it stands ("-o" "k=v", "-ok=v").
 * Call once the configuration has been read.
 */
void kv_config_scrub_argv(int argc, char **argv, const char *const *keys);

#endif
