/* SPDX-License-Identifier: Apache-2.0 */
/* The KV service's config keys (kv_config.h). The programs parse the
 * values; this table says what they are, for --help, the environment and
 * error messages. */
#include "kv_config.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const weft_config_key kv_config_keys[] = {
    {"kv", "rpc_listen", "127.0.0.1:7001",
     "weft RPC endpoint, host:port or scheme://host:port; empty = off"},
    {"kv", "resp_listen", "127.0.0.1:6380",
     "Redis protocol endpoint (a stream transport: tcp or uring), "
     "host:port or scheme://host:port; empty = off"},
    {"kv", "requirepass", "",
     "the default user's password (Redis' requirepass), at most 1023 "
     "bytes; empty = none: every client is authenticated. Give it in "
     "WEFT_KV_REQUIREPASS or a -c file, not -o (ps shows the command "
     "line)"},
    {"kv", "user", "",
     "an ACL user's name (AUTH user password), at most 64 bytes, not "
     "\"default\"; with user_password"},
    {"kv", "user_password", "",
     "the ACL user's password, at most 1023 bytes; as requirepass, "
     "WEFT_KV_USER_PASSWORD or a -c file"},
    {"kv", "protected_mode", "yes",
     "yes or no: without requirepass, refuse clients from outside the "
     "loopback network"},
    {"kv", "password", "",
     "the password weft-kv and weft-kvbench send (AUTH); also "
     "WEFT_KV_PASSWORD or REDISCLI_AUTH"},
    {"kv", "client_user", "",
     "the user weft-kv and weft-kvbench authenticate as; empty = default"},
    {"kv", "tls_listen", "",
     "Redis protocol over TLS (Redis' tls-port), host:port or "
     "scheme://host:port (tcp or uring); empty = off"},
    {"kv", "tls_rpc_listen", "",
     "weft RPC over TLS, host:port or scheme://host:port; empty = off"},
    {"kv", "tls_cert_file", "",
     "PEM: the server's certificate, then its chain (tls-cert-file); needed "
     "by the TLS listeners"},
    {"kv", "tls_key_file", "",
     "PEM: the server's private key (tls-key-file); empty = in "
     "tls_cert_file"},
    {"kv", "tls_ca_cert_file", "",
     "PEM: the CAs that sign client certificates (server) and the "
     "server's (weft-kv, weft-kvbench) (tls-ca-cert-file)"},
    {"kv", "tls_ca_cert_dir", "",
     "a directory of hashed CA certificates, as tls_ca_cert_file "
     "(tls-ca-cert-dir)"},
    {"kv", "tls_auth_clients", "yes",
     "no (no client certificate asked), optional (checked when sent) or "
     "yes (required) (tls-auth-clients)"},
    {"kv", "tls_min_protocol", "tls1.2", "tls1.2 or tls1.3"},
    {"kv", "tls_handshake_timeout_ms", "10000",
     "ms for a client to complete the TLS handshake, an integer from 0 "
     "(none) to 3600000"},
    {"kv", "tls_ktls", "off",
     "on or off: the kernel encrypts replies after a TLS 1.3 handshake "
     "(tcp; else user-space records)"},
    {"kv", "client_tls", "no",
     "yes or no: weft-kv and weft-kvbench speak TLS (to tls_rpc_listen); "
     "also --tls"},
    {"kv", "tls_client_cert_file", "",
     "PEM: the certificate weft-kv and weft-kvbench present "
     "(tls-client-cert-file); also --cert; the server's MIGRATE over TLS "
     "presents it too (empty: tls_cert_file)"},
    {"kv", "tls_client_key_file", "",
     "PEM: its private key (tls-client-key-file); also --key"},
    {"kv", "client_sni", "",
     "the server name weft-kv and weft-kvbench send and check in the "
     "server's certificate; empty = the host they connect to; also --sni"},
    {"kv", "migrate_any_host", "no",
     "yes or no: MIGRATE may reach any numeric address, not only the "
     "[cluster] node lines"},
    {"kv", "migrate_timeout_max_ms", "10000",
     "ms: MIGRATE's timeout (how long a silent target is waited for) is "
     "clamped to this, an integer from 1 to 3600000"},
    {"kv", "shutdown_command", "local",
     "who may stop the server with SHUTDOWN (once authenticated): yes "
     "(any client, as Redis), local (clients on the loopback network) or "
     "no (nobody)"},
    {"kv", "max_value_bytes", "1048576",
     "largest value in bytes, an integer from 1 to 536870912"},
    {"kv", "stripes", "64",
     "lock stripes of the store, a power of two from 1 to 4096"},
    {"kv", "expire_hz", "10",
     "active expiry passes per second per loop, an integer from 1 to 1000"},
    {"kv", "auth_timeout_ms", "10000",
     "with a password set, a connection that has not authenticated this "
     "long after it connected is closed; 0 = never"},
    {"kv", "command_timeout_ms", "30000",
     "a command still incomplete this long after its first bytes arrived "
     "closes its connection; 0 = never"},
    {"kv", "client_query_buffer_limit", "0",
     "bytes one connection's partial input may hold (Redis' "
     "client-query-buffer-limit); 0 = twice the largest command, "
     "2 x (max_value_bytes + 131072)"},
    {"kv", "query_buffers_max", "268435456",
     "bytes the partial input of all connections may hold together; past "
     "it the connection whose input grew is closed; 0 = no bound"},
    {"cluster", "enabled", "no",
     "yes or no: serve as a node of a static Redis Cluster (the node "
     "lines)"},
    {"cluster", "myself", "",
     "this server's node: the NAME of one of the node lines"},
    {"cluster", "node", "",
     "one line per node (the key repeats): NAME HOST:PORT "
     "[rpc=HOST:PORT] [slots=FIRST-LAST,...] [id=40 hex digits]; HOST:PORT "
     "is its RESP address, slots from 0 to 16383, each given once"},
    {"cluster", "config_file", "",
     "the node's state file (Redis' nodes.conf: slot map and epochs, "
     "written at every CLUSTER SETSLOT, loaded at start); empty = beside "
     "the -c file, its name without the extension plus .nodes.conf"},
    {"kvbench", "workload", "A",
     "A (50/50 read/update), B (95/5) or C (read only)"},
    {"kvbench", "records", "100000", "keys in the key space, an integer > 0"},
    {"kvbench", "operations", "0",
     "measured operations, an integer >= 0 (0 = run for the duration)"},
    {"kvbench", "duration", "10", "measured seconds >= 0"},
    {"kvbench", "warmup", "2", "unmeasured seconds >= 0 before the run"},
    {"kvbench", "distribution", "zipfian", "uniform, zipfian or scrambled"},
    {"kvbench", "value_size", "100", "bytes, at most 1048576"},
    {"kvbench", "connections", "4", "an integer from 1 to 10000"},
    {"kvbench", "pipeline", "16",
     "outstanding requests per connection, an integer from 1 to 10000"},
    {"kvbench", "load", "true",
     "true or false: SET every record before the run"},
    {"kvbench", "json", "false", "true or false: one JSON object as output"},
    {"kvbench", "seed", "1", "random seed, an integer >= 0"},
    {"kvbench", "cluster", "false",
     "true or false: a Redis Cluster of weft-kv-server nodes: learn the "
     "slot map from --connect and route each key to its node"},
    {NULL, NULL, NULL, NULL}};

#define SERVER_KEY(k) "kv." k "=nothing: [kv] " k " is weft-kv-server's"
const char *const kv_client_unread[] = {
    SERVER_KEY("rpc_listen"),
    SERVER_KEY("resp_listen"),
    "kv.requirepass=[kv] password (requirepass is the server's)",
    SERVER_KEY("user"),
    "kv.user_password=[kv] password (user_password is the server's)",
    SERVER_KEY("protected_mode"),
    SERVER_KEY("tls_listen"),
    SERVER_KEY("tls_rpc_listen"),
    "kv.tls_cert_file=[kv] tls_client_cert_file (tls_cert_file is the "
    "server's)",
    "kv.tls_key_file=[kv] tls_client_key_file (tls_key_file is the server's)",
    SERVER_KEY("tls_auth_clients"),
    SERVER_KEY("tls_min_protocol"),
    SERVER_KEY("tls_handshake_timeout_ms"),
    SERVER_KEY("tls_ktls"),
    SERVER_KEY("max_value_bytes"),
    SERVER_KEY("stripes"),
    SERVER_KEY("expire_hz"),
    SERVER_KEY("auth_timeout_ms"),
    SERVER_KEY("command_timeout_ms"),
    SERVER_KEY("client_query_buffer_limit"),
    SERVER_KEY("query_buffers_max"),
    SERVER_KEY("migrate_any_host"),
    SERVER_KEY("migrate_timeout_max_ms"),
    SERVER_KEY("shutdown_command"),
    NULL};

#define CLIENT_KEY(k) "kv." k "=nothing: [kv] " k " is the clients'"
const char *const kv_server_unread[] = {
    "server.listen=[kv] rpc_listen, resp_listen, tls_listen and "
    "tls_rpc_listen",
    "kv.password=[kv] requirepass (password is the clients')",
    CLIENT_KEY("client_user"),
    CLIENT_KEY("client_tls"),
    CLIENT_KEY("client_sni"),
    NULL};

/* The index of the name `in` starts with as a whole word, or n. */
static size_t name_at(const char *in, const kv_config_name *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(names[i].from);
    if (strncmp(in, names[i].from, l) == 0 &&
        !(isalnum((unsigned char)in[l]) || in[l] == '_'))
      return i;
  }
  return n;
}

void kv_config_rename(const char *in, const kv_config_name *names, size_t n,
                      char *out, size_t len) {
  size_t o = 0;
  while (*in != '\0' && o + 1 < len) {
    bool word_start = o == 0 || out[o - 1] == ' ' || out[o - 1] == '(';
    size_t i = word_start ? name_at(in, names, n) : n;
    if (i == n) {
      out[o++] = *in++;
      continue;
    }
    int w = snprintf(out + o, len - o, "%s", names[i].to);
    o = w < 0 || (size_t)w >= len - o ? len - 1 : o + (size_t)w;
    in += strlen(names[i].from);
  }
  out[o] = '\0';
}

void kv_secret_scrub(char *arg) { memset(arg, 'x', strlen(arg)); }

void kv_config_scrub_argv(int argc, char **argv, const char *const *keys) {
  for (int i = 1; i < argc; i++)
    for (const char *const *k = keys; *k != NULL; k++) {
      char *at = strstr(argv[i], *k);
      size_t n = strlen(*k);
      if (at != NULL && at[n] == '=')
        kv_secret_scrub(at + n + 1);
    }
}
