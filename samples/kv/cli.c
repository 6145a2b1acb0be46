/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv: the KV service's command-line client (binary RPC protocol).
 *
 *   weft-kv [-c FILE] [-o section.key=value]... [--connect URI] [--raw]
 *           [--cluster]
 *           [--timeout MS] [--user USER] [-a PASSWORD]
 *           [--tls [--cacert FILE] [--cert FILE --key FILE] [--sni NAME]]
 *           CMD ARGS...
 *
 * The address comes from --connect, else [client] connect of the config
 * (file, then WEFT_CLIENT_CONNECT, then -o client.connect=...), default
 * 127.0.0.1:7001 (the server's rpc_listen); an address without a scheme
 * takes [transport] name. With a password (client_auth.h: -a, [kv]
 * password, WEFT_KV_PASSWORD, REDISCLI_AUTH) the client sends AUTH before
 * the command. With --tls (client_tls.h) it speaks TLS to the server's
 * [kv] tls_rpc_listen. Replies print as redis-cli prints them. Exit
 * status: 0, 1 for an error reply or a failed call or connect, 2 for bad
 * usage.
 */
#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/cli.h>
#include <weft/config.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "client.h"
#include "client_auth.h"
#include "client_cluster.h"
#include "client_tls.h"
#include "kv_config.h"

#define KV_DEFAULT_CONNECT "127.0.0.1:7001"

static const char *prog = "weft-kv";

typedef struct cli_opts {
  const char *connect;
  int raw; /* -1 = by terminal */
  long timeout_ms;
  bool cluster; /* --cluster: route by slot (client_cluster.h) */
  kv_client_auth auth;
  kv_client_tls tls;
} cli_opts;

/* [kv]: TLS (client_tls.h) and the credentials (client_auth.h); the
 * server's keys, [cluster] and [kvbench] are accepted and ignored, as the file
 * may be shared. */
static int other_sections(void *arg, const char *section, const char *key,
                          const char *value, char *err, size_t err_len) {
  cli_opts *o = arg;
  if (strcmp(section, "kv") == 0) {
    int rc = kv_client_tls_key(&o->tls, key, value, err, err_len);
    return rc != WEFT_ENOENT
               ? rc
               : kv_client_auth_key(&o->auth, key, value, err, err_len);
  }
  if (strcmp(section, "kvbench") == 0 || strcmp(section, "cluster") == 0)
    return 0;
  return WEFT_ENOENT;
}

/* ---- printing, as redis-cli ---- */

static void print_quoted(const uint8_t *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    switch (s[i]) {
    case '\\':
    case '"':
      printf("\\%c", s[i]);
      break;
    case '\n':
      fputs("\\n", stdout);
      break;
    case '\r':
      fputs("\\r", stdout);
      break;
    case '\t':
      fputs("\\t", stdout);
      break;
    case '\a':
      fputs("\\a", stdout);
      break;
    case '\b':
      fputs("\\b", stdout);
      break;
    default:
      if (isprint(s[i]))
        putchar(s[i]);
      else
        printf("\\x%02x", s[i]);
    }
  }
  putchar('"');
}

static void print_value(const kv_reply *r, bool raw, int indent);

static void print_array(const kv_reply *r, bool raw, int indent) {
  if (r->len == 0) {
    if (!raw)
      fputs("(empty array)\n", stdout);
    return;
  }
  int width = snprintf(NULL, 0, "%zu", r->len);
  for (size_t i = 0; i < r->len; i++) {
    if (!raw) {
      if (i > 0)
        printf("%*s", indent, "");
      printf("%*zu) ", width, i + 1);
    }
    print_value(&r->elem[i], raw, indent + width + 2);
  }
}

static void print_value(const kv_reply *r, bool raw, int indent) {
  switch (r->tag) {
  case KV_TAG_SIMPLE:
    printf("%.*s\n", (int)r->len, (const char *)r->str);
    break;
  case KV_TAG_ERROR:
    printf(raw ? "%.*s\n" : "(error) %.*s\n", (int)r->len,
           (const char *)r->str);
    break;
  case KV_TAG_INTEGER:
    printf(raw ? "%lld\n" : "(integer) %lld\n", (long long)r->integer);
    break;
  case KV_TAG_BULK:
    if (raw)
      fwrite(r->str, 1, r->len, stdout);
    else
      print_quoted(r->str, r->len);
    putchar('\n');
    break;
  case KV_TAG_NULL:
    puts(raw ? "" : "(nil)");
    break;
  case KV_TAG_ARRAY:
    print_array(r, raw, indent);
    break;
  default:
    printf("(unknown reply type 0x%02x)\n", r->tag);
  }
}

/* ---- configuration ---- */

static const char *const sections[] = {"loop", "transport", "client", "kv",
                                       NULL};

static weft_cli cli = {
    .prog = "weft-kv",
    .synopsis = "[options] COMMAND [ARG ...]",
    .about =
        "The KV service's command-line client (weft RPC): sends one command "
        "and prints\nthe reply as redis-cli does. Commands: those of the "
        "server but HELLO and QUIT\n(get set del exists incr decrby ttl "
        "expire keys scan info client ...).\nExit status 0, 1 for an error "
        "reply or a failed call, 2 for bad usage.\nThe password: -a, else "
        "[kv] password (or WEFT_KV_PASSWORD), else REDISCLI_AUTH;\n"
        "the user: --user, else [kv] client_user. --tls (or [kv] "
        "client_tls = yes):\nTLS to the server's [kv] tls_rpc_listen, the "
        "server's certificate checked\nagainst --cacert ([kv] "
        "tls_ca_cert_file) and the connect host (or --sni).",
    .flags = "  --connect URI           server address (default [client] "
             "connect, 127.0.0.1:7001)\n"
             "  --raw                   print strings as they are (default "
             "when stdout is not a terminal)\n"
             "  --no-raw                quote strings (default on a "
             "terminal)\n"
             "  --timeout MS            give up after MS milliseconds "
             "(default 10000; 0 = never)\n"
             "  --cluster               a Redis Cluster of weft-kv-server "
             "nodes: send the command\n"
             "                          to its key's node, following "
             "MOVED and ASK (redis-cli -c)\n"
             "  -a, --pass PASSWORD     AUTH with it before the command "
             "(visible to ps: prefer\n"
             "                          WEFT_KV_PASSWORD or [kv] password)\n"
             "  --user USER             AUTH as this user (default: the "
             "default user)\n"
             "  --no-auth-warning       no warning for a password on the "
             "command line\n" KV_CLIENT_TLS_FLAGS_HELP,
    .examples = "weft-kv set greeting hello\n"
                "weft-kv --connect uring://127.0.0.1:7001 get greeting\n"
                "weft-kv --tls --cacert ca.pem --connect 127.0.0.1:7002 get "
                "greeting",
    .sections = sections,
    .unread = kv_client_unread,
    .app = other_sections};

/* Returns the index of the command in argv, 0 when --help or --version was
 * answered, or -1 after printing the error. */
static int parse_args(int argc, char **argv, weft_config *cfg, cli_opts *o) {
  static const struct option longs[] = {
      {"connect", required_argument, NULL, 'C'},
      {"raw", no_argument, NULL, 'r'},
      {"no-raw", no_argument, NULL, 'R'},
      {"timeout", required_argument, NULL, 't'},
      {"cluster", no_argument, NULL, 'K'},
      KV_CLIENT_AUTH_LONGOPTS,
      KV_CLIENT_TLS_LONGOPTS,
      WEFT_CLI_LONG_OPTS,
      {NULL, 0, NULL, 0}};
  *o = (cli_opts){.raw = -1, .timeout_ms = 10000};
  weft_config_init(cfg);
  cfg->app_keys = kv_config_keys;
  cli.app_arg = o;
  snprintf(cfg->connect, sizeof cfg->connect, "%s", KV_DEFAULT_CONNECT);
  opterr = 0;
  int opt;
  /* '+': stop at the command, so "weft-kv incrby k -1" keeps its -1. */
  while ((opt = getopt_long(argc, argv, "+:" WEFT_CLI_OPTS "a:", longs,
                            NULL)) != -1) {
    char *end;
    int rc = weft_cli_option(&cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_auth_option(&o->auth, &cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_tls_option(&o->tls, &cli, opt, optarg);
    if (rc < 0)
      return -1;
    if (rc > 0)
      continue;
    switch (opt) {
    case 'C':
      o->connect = optarg;
      break;
    case 'K':
      o->cluster = true;
      break;
    case 'r':
    case 'R':
      o->raw = opt == 'r';
      break;
    case 't':
      o->timeout_ms = strtol(optarg, &end, 10);
      if (*optarg == '\0' || *end != '\0' || o->timeout_ms < 0) {
        weft_cli_usage_error(&cli, "--timeout %s: expected milliseconds >= 0",
                             optarg);
        return -1;
      }
      break;
    case 'h':
      return weft_cli_help(&cli, cfg, stdout) == 0 ? 0 : -1;
    case 'V':
      return weft_cli_version(&cli, stdout) == 0 ? 0 : -1;
    default:
      weft_cli_bad_option(&cli, opt, argv[optind - 1]);
      return -1;
    }
  }
  kv_client_auth_warn(&o->auth);
  if (weft_cli_configure(&cli, cfg) < 0)
    return -1;
  if (o->connect != NULL)
    snprintf(cfg->connect, sizeof cfg->connect, "%s", o->connect);
  if (optind >= argc) {
    weft_cli_usage_error(&cli, "no command given");
    return -1;
  }
  return optind;
}

/* ---- main ---- */

static void close_client(kv_client *c, kv_cluster_client *cc) {
  if (cc != NULL)
    kv_cluster_client_close(cc);
  else
    kv_sync_close(c);
}

static int run(weft_loop_group *group, const weft_config *cfg, const char *uri,
               int cmd, int argc, char **argv, cli_opts *o) {
  kv_client_options co;
  kv_client_options_init(&co);
  co.channel = cfg->channel;
  kv_client_auth_apply(&o->auth, &co);
  char err[600];
  if (kv_client_tls_apply(&o->tls, uri, &co, err, sizeof err) < 0) {
    kv_client_auth_clear(&o->auth);
    fprintf(stderr, "%s: %s\n", prog, err);
    return 1;
  }
  kv_client *c = NULL;
  kv_cluster_client *cc = NULL;
  int rc = o->cluster ? kv_cluster_client_connect(&cc, group, uri, &co)
                      : kv_sync_connect(&c, group, uri, &co);
  kv_client_auth_clear(&o->auth);
  kv_client_tls_release(&o->tls);
  if (rc == WEFT_EACCES) {
    fprintf(stderr,
            "%s: %s refused the connection: AUTH failed or protected "
            "mode (the log line above has the server's answer)\n",
            prog, uri);
    return 1;
  }
  if (rc < 0) {
    fprintf(stderr, "%s: cannot connect to %s: %s%s\n", prog, uri,
            weft_strerror(rc),
            co.tls != NULL && rc != WEFT_ECONNREFUSED
                ? " (TLS: a line above may say why)"
                : "");
    return 1;
  }
  kv_arg *args = calloc((size_t)argc + 1, sizeof *args);
  if (args == NULL) {
    close_client(c, cc);
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  for (int i = 0; i < argc; i++)
    args[i] = (kv_arg){argv[i], strlen(argv[i])};
  kv_reply *r = NULL;
  uint64_t timeout = (uint64_t)o->timeout_ms * 1000000u;
  rc = cc != NULL
           ? kv_cluster_sync_call(cc, cmd, (size_t)argc, args, timeout, &r)
           : kv_sync_call(c, cmd, (size_t)argc, args, timeout, &r);
  free(args);
  close_client(c, cc);
  if (rc < 0) {
    fprintf(stderr, "%s: %s to %s failed: %s\n", prog, kv_cmd_name(cmd), uri,
            weft_strerror(rc));
    return 1;
  }
  /* INFO's text is for reading, as redis-cli shows it. */
  bool raw = o->raw >= 0 ? o->raw : !isatty(STDOUT_FILENO);
  print_value(r, raw || cmd == KV_CMD_INFO, 0);
  int status = kv_reply_is_error(r) ? 1 : 0;
  kv_reply_free(r);
  return status;
}

int main(int argc, char **argv) {
  cli_opts o;
  weft_config cfg;
  int first = parse_args(argc, argv, &cfg, &o);
  if (first <= 0)
    return first == 0 ? 0 : 2;
  int cmd = kv_cmd_from_name(argv[first], strlen(argv[first]));
  if (cmd == 0 || !kv_cmd_rpc(cmd)) {
    weft_cli_usage_error(&cli,
                         cmd == 0 ? "unknown command '%s'"
                                  : "%s is about RESP connections: not a "
                                    "command of weft RPC",
                         argv[first]);
    return 2;
  }
  char uri[WEFT_CONFIG_URI_MAX + 32];
  if (weft_config_endpoint(&cfg, cfg.connect, uri, sizeof uri) < 0) {
    fprintf(stderr, "%s: address too long: %s\n", prog, cfg.connect);
    return 2;
  }
  /* One loop that sleeps when idle: a command line tool should not spin. */
  weft_loop_options lo = cfg.loop;
  lo.n_loops = 1;
  lo.busy_poll_us = 0;
  lo.pin = false;
  lo.name = "weft-kv";
  weft_loop_group *group;
  int rc = weft_loop_group_new(&group, &lo);
  if (rc == 0 && (rc = weft_loop_group_start(group)) < 0)
    weft_loop_group_free(group);
  if (rc < 0) {
    fprintf(stderr, "%s: cannot start an event loop: %s\n", prog,
            weft_strerror(rc));
    return 1;
  }
  int status =
      run(group, &cfg, uri, cmd, argc - first - 1, argv + first + 1, &o);
  weft_loop_group_stop(group);
  weft_loop_group_join(group);
  weft_loop_group_free(group);
  return status;
}
