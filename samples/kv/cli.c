/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv: the KV service's command-line client (binary RPC protocol),
 * with redis-cli's habits.
 *
 *   weft-kv [-c FILE] [-o section.key=value]... [-h HOST] [-p PORT]
 *           [--connect URI] [--raw] [--cluster] [-n 0] [-r COUNT]
 *           [-i SECONDS] [--timeout MS] [--user USER] [-a PASSWORD]
 *           [--tls [--cacert FILE] [--cert FILE --key FILE] [--sni NAME]]
 *           [CMD ARGS...]
 *
 * The address: -h HOST and -p PORT as redis-cli (either defaults to
 * 127.0.0.1 and 7001), else --connect, else [client] connect of the
 * config (file, then WEFT_CLIENT_CONNECT, then -o client.connect=...),
 * default 127.0.0.1:7001 (the server's rpc_listen); an address without a
 * scheme takes [transport] name. -h is the host, so help is --help only
 * (weft_cli.help_long_only). With a password (client_auth.h: -a, [kv]
 * password, WEFT_KV_PASSWORD, REDISCLI_AUTH) the client sends AUTH before
 * the command. With --tls (client_tls.h) it speaks TLS to the server's
 * [kv] tls_rpc_listen. Replies print as redis-cli prints them. Without a
 * command it reads commands: interactively on a terminal (cli_repl.c),
 * else one per line from stdin. Exit status: 0, 1 for an error reply or a
 * failed call or connect, 2 for bad usage; reading stdin, 0 unless a call
 * got no reply (redis-cli's 0 for error replies).
 */
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <weft/cli.h>
#include <weft/config.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "cli_internal.h"
#include "client.h"
#include "client_auth.h"
#include "client_cluster.h"
#include "client_tls.h"
#include "kv_config.h"

#define KV_DEFAULT_HOST "127.0.0.1"
#define KV_DEFAULT_PORT "7001"
#define KV_DEFAULT_CONNECT KV_DEFAULT_HOST ":" KV_DEFAULT_PORT

static const char *prog = "weft-kv";

/* getopt values of the long options without a letter */
enum {
  OPT_CONNECT = 0x300,
  OPT_RAW,
  OPT_NO_RAW,
  OPT_TIMEOUT,
  OPT_CLUSTER,
  OPT_HELP
};

typedef struct cli_opts {
  const char *connect;
  const char *host, *port; /* -h, -p */
  int raw;                 /* -1 = by terminal */
  long timeout_ms;
  long repeat;     /* -r: times to run the command; -1 = forever */
  double interval; /* -i: seconds between them */
  bool cluster;    /* --cluster: route by slot (client_cluster.h) */
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
  /* the letter after the backslash, for the bytes redis-cli escapes so */
  static const char escape[256] = {
      ['\\'] = '\\', ['"'] = '"',  ['\n'] = 'n', ['\r'] = 'r',
      ['\t'] = 't',  ['\a'] = 'a', ['\b'] = 'b'};
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    if (escape[s[i]] != 0)
      printf("\\%c", escape[s[i]]);
    else if (isprint(s[i]))
      putchar(s[i]);
    else
      printf("\\x%02x", s[i]);
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
    .synopsis = "[options] [COMMAND [ARG ...]]",
    .about =
        "The KV service's command-line client (weft RPC), with redis-cli's "
        "habits: sends one\ncommand and prints the reply as redis-cli does; "
        "without a command, reads commands\ninteractively on a terminal "
        "(line editing, history in ~/.weft_kv_history or\n"
        "WEFT_KV_HISTFILE, help, quit) or one per line from stdin "
        "(redis-cli's quoting).\nCommands: those of the server but HELLO "
        "and QUIT (get set del exists incr decrby\nttl expire keys scan "
        "info client shutdown ...).\nExit status 0, 1 for an error reply or "
        "a failed call, 2 for bad usage; reading\nstdin, 0 unless a call "
        "got no reply.\nThe password: -a, else [kv] password (or "
        "WEFT_KV_PASSWORD), else REDISCLI_AUTH;\n"
        "the user: --user, else [kv] client_user. --tls (or [kv] "
        "client_tls = yes):\nTLS to the server's [kv] tls_rpc_listen, the "
        "server's certificate checked\nagainst --cacert ([kv] "
        "tls_ca_cert_file) and the connect host (or --sni).",
    .flags = "  -h HOST                 the server's host, as redis-cli "
             "(default 127.0.0.1)\n"
             "  -p PORT                 its weft RPC port ([kv] rpc_listen; "
             "default 7001)\n"
             "  --connect URI           server address instead of -h/-p "
             "(default [client]\n"
             "                          connect, 127.0.0.1:7001)\n"
             "  -n DB                   the database: 0, weft-kv-server's "
             "only one\n"
             "  -r COUNT                run the command COUNT times (-1: "
             "until stopped)\n"
             "  -i SECONDS              wait this long between them (-r; "
             "fractions allowed)\n"
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
                "weft-kv -h 10.0.0.2 -p 7001 get greeting\n"
                "weft-kv            (interactive: 127.0.0.1:7001> get "
                "greeting)\n"
                "printf 'set a 1\\nincr a\\n' | weft-kv\n"
                "weft-kv --connect uring://127.0.0.1:7001 get greeting\n"
                "weft-kv --tls --cacert ca.pem --connect 127.0.0.1:7002 get "
                "greeting",
    .sections = sections,
    .unread = kv_client_unread,
    .app = other_sections,
    .help_long_only = true};

/* A whole-number option in [min, max], or a usage error (false). */
static bool option_long(const char *flag, const char *v, long min, long max,
                        long *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < min || n > max) {
    weft_cli_usage_error(&cli, "%s %s: expected an integer from %ld to %ld",
                         flag, v, min, max);
    return false;
  }
  *out = n;
  return true;
}

/* One of weft-kv's own options. Returns 1 when taken, 0 after --help or
 * --version, -1 after printing the error. */
static int own_option(cli_opts *o, weft_config *cfg, int opt, char *arg,
                      const char *text) {
  long n;
  char *end;
  switch (opt) {
  case OPT_CONNECT:
    o->connect = arg;
    return 1;
  case 'h':
    o->host = arg;
    return 1;
  case 'p':
    o->port = arg;
    return option_long("-p", arg, 1, 65535, &n) ? 1 : -1;
  case 'n':
    /* redis-cli sends SELECT n; weft-kv-server has database 0 only */
    if (strcmp(arg, "0") != 0) {
      weft_cli_usage_error(&cli, "-n %s: weft-kv-server has database 0 only",
                           arg);
      return -1;
    }
    return 1;
  case 'r':
    return option_long("-r", arg, -1, 1000000000, &o->repeat) ? 1 : -1;
  case 'i':
    o->interval = strtod(arg, &end);
    if (*arg == '\0' || *end != '\0' || !(o->interval >= 0) ||
        o->interval > 86400) {
      weft_cli_usage_error(&cli, "-i %s: expected seconds from 0 to 86400",
                           arg);
      return -1;
    }
    return 1;
  case OPT_CLUSTER:
    o->cluster = true;
    return 1;
  case OPT_RAW:
  case OPT_NO_RAW:
    o->raw = opt == OPT_RAW;
    return 1;
  case OPT_TIMEOUT:
    return option_long("--timeout", arg, 0, 86400000, &o->timeout_ms) ? 1 : -1;
  case OPT_HELP:
    return weft_cli_help(&cli, cfg, stdout) == 0 ? 0 : -1;
  case 'V':
    return weft_cli_version(&cli, stdout) == 0 ? 0 : -1;
  default:
    weft_cli_bad_option(&cli, opt, text);
    return -1;
  }
}

/* The address from -h and -p: HOST:PORT, an IPv6 host in brackets. */
static int host_port(const cli_opts *o, weft_config *cfg) {
  if (o->connect != NULL) {
    weft_cli_usage_error(&cli, "--connect and -h/-p both name the server: "
                               "give one");
    return -1;
  }
  const char *h = o->host != NULL ? o->host : KV_DEFAULT_HOST;
  bool v6 = strchr(h, ':') != NULL && h[0] != '[';
  int n =
      snprintf(cfg->connect, sizeof cfg->connect, "%s%s%s:%s", v6 ? "[" : "", h,
               v6 ? "]" : "", o->port != NULL ? o->port : KV_DEFAULT_PORT);
  if (n < 0 || (size_t)n >= sizeof cfg->connect) {
    weft_cli_usage_error(&cli, "-h %s: host name too long", h);
    return -1;
  }
  return 0;
}

/* Returns the index of the command in argv (argc when none: read
 * commands), 0 when --help or --version was answered, or -1 after
 * printing the error. */
static int parse_args(int argc, char **argv, weft_config *cfg, cli_opts *o) {
  static const struct option longs[] = {
      {"connect", required_argument, NULL, OPT_CONNECT},
      {"raw", no_argument, NULL, OPT_RAW},
      {"no-raw", no_argument, NULL, OPT_NO_RAW},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"cluster", no_argument, NULL, OPT_CLUSTER},
      KV_CLIENT_AUTH_LONGOPTS,
      KV_CLIENT_TLS_LONGOPTS,
      {"help", no_argument, NULL, OPT_HELP},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  *o = (cli_opts){.raw = -1, .timeout_ms = 10000, .repeat = 1};
  weft_config_init(cfg);
  cfg->app_keys = kv_config_keys;
  cli.app_arg = o;
  snprintf(cfg->connect, sizeof cfg->connect, "%s", KV_DEFAULT_CONNECT);
  opterr = 0;
  int opt;
  /* '+': stop at the command, so "weft-kv incrby k -1" keeps its -1. -h
   * is redis-cli's host: WEFT_CLI_OPTS_NO_H, help is --help. */
  while ((opt = getopt_long(argc, argv, "+:" WEFT_CLI_OPTS_NO_H "a:h:p:n:r:i:",
                            longs, NULL)) != -1) {
    int rc = weft_cli_option(&cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_auth_option(&o->auth, &cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_tls_option(&o->tls, &cli, opt, optarg);
    if (rc == 0)
      rc = own_option(o, cfg, opt, optarg, argv[optind - 1]);
    if (rc <= 0)
      return rc;
  }
  kv_client_auth_warn(&o->auth);
  if (weft_cli_configure(&cli, cfg) < 0)
    return -1;
  if (o->host != NULL || o->port != NULL) {
    if (host_port(o, cfg) < 0)
      return -1;
  } else if (o->connect != NULL) {
    snprintf(cfg->connect, sizeof cfg->connect, "%s", o->connect);
  }
  return optind;
}

/* ---- the session (cli_internal.h) ---- */

/* A Redis port answers weft RPC's bytes in RESP: say so, with the way
 * out. */
static void resp_peer_message(const kv_cli *s) {
  fprintf(stderr,
          "%s: %s speaks the Redis protocol (RESP), not weft RPC: use "
          "redis-cli, or weft-kv's RPC port ([kv] rpc_listen, %s by "
          "default)\n",
          prog, s->addr, KV_DEFAULT_PORT);
}

static bool resp_peer(const kv_cli *s, int rc) {
  return rc == WEFT_EPROTO && !s->tls;
}

static void connect_message(const kv_cli *s, int rc) {
  if (resp_peer(s, rc))
    resp_peer_message(s);
  else if (rc == WEFT_EACCES)
    fprintf(stderr,
            "%s: %s refused the connection: AUTH failed or protected "
            "mode (the log line above has the server's answer)\n",
            prog, s->uri);
  else
    fprintf(stderr, "%s: cannot connect to %s: %s%s\n", prog, s->uri,
            weft_strerror(rc),
            s->tls && rc != WEFT_ECONNREFUSED
                ? " (TLS: a line above may say why)"
                : "");
}

/* The first call: PING with a newline, which weft RPC answers with the
 * newline and a RESP server answers at once with an error (its inline
 * command ends there), so a Redis port is named now rather than after
 * the timeout. */
static int hello(kv_cli *s) {
  kv_arg nl = {"\n", 1};
  kv_reply *r = NULL;
  int rc = kv_sync_call(s->c, KV_CMD_PING, 1, &nl, s->timeout_ns, &r);
  if (rc == 0 && kv_reply_is_error(r)) {
    /* protected mode's DENIED, which closes: what the command would get */
    print_value(r, s->raw >= 0 ? s->raw : !isatty(STDOUT_FILENO), 0);
    rc = WEFT_EACCES;
  }
  kv_reply_free(r);
  return rc;
}

int kv_cli_connect(kv_cli *s, bool quiet) {
  if (s->c != NULL || s->cc != NULL)
    return 0;
  int rc = s->cluster
               ? kv_cluster_client_connect(&s->cc, s->group, s->uri, &s->co)
               : kv_sync_connect(&s->c, s->group, s->uri, &s->co);
  bool said = false; /* the hello's error reply is printed */
  if (rc == 0 && s->c != NULL && (rc = hello(s)) < 0) {
    kv_cli_disconnect(s);
    said = rc == WEFT_EACCES;
  }
  if (rc < 0) {
    s->c = NULL;
    s->cc = NULL;
    if (!quiet && !said)
      connect_message(s, rc);
  }
  return rc;
}

void kv_cli_disconnect(kv_cli *s) {
  if (s->cc != NULL)
    kv_cluster_client_close(s->cc);
  else if (s->c != NULL)
    kv_sync_close(s->c);
  s->c = NULL;
  s->cc = NULL;
}

/* A name weft RPC cannot carry, as an error reply would print. */
static int not_a_command(const kv_cli *s, int cmd, const kv_arg *name) {
  bool raw = s->raw >= 0 ? s->raw : !isatty(STDOUT_FILENO);
  printf("%s", raw ? "" : "(error) ");
  if (cmd == 0)
    printf("ERR unknown command '%.*s'\n", (int)name->len,
           (const char *)name->ptr);
  else
    printf("ERR %s is about RESP connections: not a command of weft RPC\n",
           kv_cmd_name(cmd));
  return 3;
}

int kv_cli_send(kv_cli *s, size_t argc, const kv_arg *argv) {
  int cmd = kv_cmd_from_name(argv[0].ptr, argv[0].len);
  if (cmd == 0 || !kv_cmd_rpc(cmd))
    return not_a_command(s, cmd, &argv[0]);
  if (kv_cli_connect(s, false) < 0)
    return 2;
  kv_reply *r = NULL;
  int rc = s->cc != NULL
               ? kv_cluster_sync_call(s->cc, cmd, argc - 1, argv + 1,
                                      s->timeout_ns, &r)
               : kv_sync_call(s->c, cmd, argc - 1, argv + 1, s->timeout_ns, &r);
  if (rc < 0) {
    kv_cli_disconnect(s); /* the next command connects again */
    /* SHUTDOWN's success may be the close, as redis-cli takes it. */
    if (cmd == KV_CMD_SHUTDOWN && rc == WEFT_ECLOSED)
      return 0;
    if (resp_peer(s, rc))
      resp_peer_message(s);
    else
      fprintf(stderr, "%s: %s to %s failed: %s\n", prog, kv_cmd_name(cmd),
              s->uri, weft_strerror(rc));
    return 2;
  }
  /* INFO's text is for reading, as redis-cli shows it; SHUTDOWN's OK is
   * not printed (redis-cli sees the close). */
  bool raw = s->raw >= 0 ? s->raw : !isatty(STDOUT_FILENO);
  int status = kv_reply_is_error(r) ? 1 : 0;
  if (!(cmd == KV_CMD_SHUTDOWN && status == 0))
    print_value(r, raw || cmd == KV_CMD_INFO, 0);
  fflush(stdout);
  kv_reply_free(r);
  return status;
}

/* ---- main ---- */

static void sleep_seconds(double s) {
  struct timespec ts = {.tv_sec = (time_t)s,
                        .tv_nsec = (long)((s - floor(s)) * 1e9)};
  nanosleep(&ts, NULL);
}

/* The command line's command, -r times, -i apart. */
static int one_shot(kv_cli *s, const cli_opts *o, int argc, char **argv) {
  kv_arg *args = calloc((size_t)argc, sizeof *args);
  if (args == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  for (int i = 0; i < argc; i++)
    args[i] = (kv_arg){argv[i], strlen(argv[i])};
  int cmd = kv_cmd_from_name(argv[0], strlen(argv[0]));
  if (cmd == 0 || !kv_cmd_rpc(cmd)) {
    weft_cli_usage_error(&cli,
                         cmd == 0 ? "unknown command '%s'"
                                  : "%s is about RESP connections: not a "
                                    "command of weft RPC",
                         argv[0]);
    free(args);
    return 2;
  }
  int status = 0;
  for (long i = 0; o->repeat < 0 || i < o->repeat; i++) {
    if (i > 0 && o->interval > 0)
      sleep_seconds(o->interval);
    int rc = kv_cli_send(s, (size_t)argc, args);
    status = rc > 0 ? 1 : 0;
    if (rc >= 2)
      break;
  }
  free(args);
  return status;
}

/* Without a command: a terminal gets the prompt, else stdin's lines. */
static int run(kv_cli *s, const cli_opts *o, int argc, char **argv) {
  if (argc > 0)
    return one_shot(s, o, argc, argv);
  if (isatty(STDIN_FILENO))
    return kv_cli_repl(s);
  return kv_cli_stdin(s);
}

/* The session's settings from the options: auth and TLS applied. */
static int session_init(kv_cli *s, cli_opts *o, const weft_config *cfg,
                        const char *uri) {
  *s = (kv_cli){.uri = uri,
                .cluster = o->cluster,
                .raw = o->raw,
                .timeout_ns = (unsigned long long)o->timeout_ms * 1000000u};
  const char *shown = strncmp(uri, "tcp://", 6) == 0 ? uri + 6 : uri;
  snprintf(s->addr, sizeof s->addr, "%s", shown);
  kv_client_options_init(&s->co);
  s->co.channel = cfg->channel;
  s->co.default_timeout_ns = s->timeout_ns; /* the AUTH on connect too */
  kv_client_auth_apply(&o->auth, &s->co);
  char err[600];
  if (kv_client_tls_apply(&o->tls, uri, &s->co, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return -1;
  }
  s->tls = s->co.tls != NULL;
  return 0;
}

static weft_loop_group *start_loop(const weft_config *cfg) {
  /* One loop that sleeps when idle: a command line tool should not spin. */
  weft_loop_options lo = cfg->loop;
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
    return NULL;
  }
  return group;
}

int main(int argc, char **argv) {
  cli_opts o;
  weft_config cfg;
  int first = parse_args(argc, argv, &cfg, &o);
  if (first <= 0)
    return first == 0 ? 0 : 2;
  char uri[WEFT_CONFIG_URI_MAX + 32];
  if (weft_config_endpoint(&cfg, cfg.connect, uri, sizeof uri) < 0) {
    fprintf(stderr, "%s: address too long: %s\n", prog, cfg.connect);
    return 2;
  }
  kv_cli s;
  int status = 1;
  if (session_init(&s, &o, &cfg, uri) == 0 &&
      (s.group = start_loop(&cfg)) != NULL) {
    status = run(&s, &o, argc - first, argv + first);
    kv_cli_disconnect(&s);
    weft_loop_group_stop(s.group);
    weft_loop_group_join(s.group);
    weft_loop_group_free(s.group);
  }
  kv_client_auth_clear(&o.auth);
  kv_client_tls_release(&o.tls);
  return status;
}
