/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server: the KV service as a program.
 *
 *   weft-kv-server [-c FILE] [-o section.key=value ...]
 *
 * Listens on [kv] rpc_listen (weft RPC) and [kv] resp_listen (Redis
 * protocol), and over TLS on [kv] tls_listen (Redis protocol) and [kv]
 * tls_rpc_listen (weft RPC) when set, with the loops of [loop] and the
 * transport of [transport]. Each listener's address goes to stderr as
 * "weft-kv-server: <rpc|resp|tls|tls-rpc> on URI".
 * SIGINT or SIGTERM stop it gracefully: the loops answer what they already
 * received, then close every connection. So does an accepted SHUTDOWN
 * ([kv] shutdown_command), which sends the process SIGTERM.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

#include "kv_config.h"
#include "server.h"

static const char *const sections[] = {"loop", "transport", "server",
                                       "kv",   "cluster",   NULL};

static weft_cli cli = {
    .prog = "weft-kv-server",
    .synopsis = "[-c FILE] [-o section.key=value ...]",
    .about = "Serves the KV store over weft RPC ([kv] rpc_listen) and the "
             "Redis protocol\n([kv] resp_listen: redis-cli and "
             "redis-benchmark work against it), and both\nover TLS ([kv] "
             "tls_listen, tls_rpc_listen, with tls_cert_file and "
             "tls_key_file),\nuntil SIGINT or SIGTERM. Passwords ([kv] "
             "requirepass, user_password): give them\nin the environment "
             "(WEFT_KV_REQUIREPASS, WEFT_KV_USER_PASSWORD) or a -c file; "
             "with -o\nthey are overwritten in the command line once read, "
             "but ps may see them before.",
    .examples = "weft-kv-server -o kv.resp_listen=127.0.0.1:6380\n"
                "weft-kv-server -c kv.ini -o loop.loops=1 -o "
                "transport.name=uring\n"
                "weft-kv-server -o kv.tls_listen=127.0.0.1:6390 -o "
                "kv.tls_cert_file=server.pem -o kv.tls_key_file=server.key "
                "-o kv.tls_auth_clients=no",
    .sections = sections,
    .unread = kv_server_unread,
    .app = kv_server_config_section};

/* Options, then file, environment and -o. Returns 0 to run, 1 when --help
 * or --version was answered, or -1 after printing the error. */
static int configure(int argc, char **argv, weft_config *cfg,
                     kv_server_options *o) {
  weft_config_init(cfg);
  kv_server_config_defaults(cfg);
  cfg->app_keys = kv_config_keys;
  kv_server_options_init(o);
  cli.app_arg = o;
  int first = weft_cli_parse(&cli, cfg, argc, argv);
  /* Read: the passwords of -o go out of the command line (ps). */
  static const char *const secrets[] = {"kv.requirepass", "kv.user_password",
                                        NULL};
  kv_config_scrub_argv(argc, argv, secrets);
  if (first <= 0)
    return first == 0 ? 1 : -1;
  if (first < argc) {
    weft_cli_usage_error(&cli, "unexpected argument '%s'", argv[first]);
    return -1;
  }
  /* [cluster] config_file defaults to a file beside the -c file. */
  if (o->cluster.enabled &&
      kv_cluster_default_config_file(&o->cluster, cli.file) < 0) {
    fprintf(stderr,
            "weft-kv-server: [cluster] config_file: the default beside %s "
            "would be longer than %d bytes; set config_file\n",
            cli.file, KV_CLUSTER_PATH_MAX - 1);
    return -1;
  }
  return 0;
}

/* An accepted SHUTDOWN (cmd_shutdown.c), on a loop thread: the stop
 * signal to the process, which main's sigwait takes as it takes SIGTERM
 * from kill, so the stop is the same graceful one. */
static void shutdown_requested(void *arg) {
  (void)arg;
  kill(getpid(), SIGTERM);
}

int main(int argc, char **argv) {
  weft_config cfg;
  kv_server_options opts;
  int c = configure(argc, argv, &cfg, &opts);
  if (c != 0)
    return c > 0 ? 0 : 2;
  opts.shutdown = shutdown_requested;
  /* SIGINT and SIGTERM, blocked in every thread and taken by
   * weft_cli_wait_stop: a handler with pause() would miss the signal
   * whenever the kernel hands it to a loop thread (strace makes that
   * common), and the server would never stop. */
  sigset_t stop_signals;
  weft_loop_group *group;
  int rc = weft_cli_loops_start(&cli, &cfg.loop, &stop_signals, &group);
  if (rc < 0)
    return 1;
  kv_server *srv;
  rc = kv_server_bind(&srv, group, &cfg, &opts);
  /* The server keeps digests only: the passwords go from here too. */
  explicit_bzero(opts.requirepass, sizeof opts.requirepass);
  explicit_bzero(opts.user_password, sizeof opts.user_password);
  if (rc == 0) {
    static const char *const names[KV_LISTENER_COUNT_] = {
        [KV_LISTENER_RPC] = "rpc",
        [KV_LISTENER_RESP] = "resp",
        [KV_LISTENER_TLS] = "tls",
        [KV_LISTENER_TLS_RPC] = "tls-rpc"};
    char a[WEFT_CONFIG_URI_MAX + 32];
    for (int which = 0; which < KV_LISTENER_COUNT_; which++)
      if (kv_server_address(srv, which, a, sizeof a) == 0)
        fprintf(stderr, "weft-kv-server: %s on %s\n", names[which], a);
    weft_cli_wait_stop(&stop_signals);
    fprintf(stderr, "weft-kv-server: stopping\n");
    weft_cli_log_loop_stats(&cli, group);
  }
  /* Loops first: they answer what they hold and close the channels; then
   * the store can go. */
  weft_loop_group_stop(group);
  int join = weft_loop_group_join(group);
  if (rc == 0)
    kv_server_close(srv);
  weft_loop_group_free(group);
  /* A listener or TLS setting the server could not use is a configuration
   * error: status 2, as for a bad key. */
  return rc < 0 ? 2 : join < 0 ? 1 : 0;
}
