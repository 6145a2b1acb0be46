/* SPDX-License-Identifier: Apache-2.0 */
/* bench_session.c: a configuration's session, started once before the
 * first measurement and stopped after the last. A raw session is a
 * listening socket and the raw server's thread (raw_server.c; a raw-tls
 * setup's: raw_tls_server.c, with OpenSSL contexts from --tls-certs), or,
 * in the client role, only the server's address (and a raw-tls client's
 * context). A weft session is a server loop
 * group (--server-loops loops, loop i on CPU 1+i) with the bench server
 * bound, and a client loop group (one loop, CPU 0); each role starts only
 * its side. A +tls session also holds a server and a client TLS context,
 * from --tls-certs. In one-process mode a ucx session's server (without
 * +tls) is another process (this program with --role server, spawned and
 * stopped here): UCX 1.13 can abort a process that opens and closes
 * connections on several workers at once (docs/transports/ucx.md, "Many
 * workers in one process"), which clients and a server in one process do.
 * Server threads are named "wb<idx>s-..." so idle.c can find their CPU
 * time. Main thread. */

#include <arpa/inet.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

static void fill_addr(struct sockaddr_in *sin, int port) {
  *sin = (struct sockaddr_in){.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, bench_opt.host, &sin->sin_addr) != 1)
    bench_fail("--host %s: not an IPv4 address", bench_opt.host);
}

static void raw_session_start(session *s) {
  fill_addr(&s->addr, bench_opt.port);
  if (s->cf->tls && bench_opt.role != ROLE_SERVER)
    s->ssl_client = bench_tls_ctx_new(false);
  if (bench_opt.role == ROLE_CLIENT)
    return;
  if (s->cf->tls)
    s->ssl_server = bench_tls_ctx_new(true);
  int one = 1;
  socklen_t sl = sizeof s->addr;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s->lfd, (struct sockaddr *)&s->addr, sizeof s->addr) < 0 ||
      listen(s->lfd, 1024) < 0 ||
      getsockname(s->lfd, (struct sockaddr *)&s->addr, &sl) < 0)
    bench_die("listen");
  s->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (s->stop_fd < 0)
    bench_die("eventfd");
  void *(*main)(void *) =
      s->cf->tls ? bench_server_raw_tls_main : bench_server_raw_main;
  if (pthread_create(&s->accept_thread, NULL, main, s) != 0)
    bench_die("pthread_create");
}

static void raw_session_stop(session *s) {
  bench_tls_ctx_free(s->ssl_client);
  if (bench_opt.role == ROLE_CLIENT)
    return;
  uint64_t one = 1;
  if (write(s->stop_fd, &one, sizeof one) != sizeof one)
    bench_die("eventfd write");
  pthread_join(s->accept_thread, NULL);
  close(s->stop_fd);
  close(s->lfd);
  bench_tls_ctx_free(s->ssl_server);
}

static void pin_task(void *arg) { bench_pin_self((int)(intptr_t)arg); }

/* A group of `n` loops, loop i pinned to CPU (cpu + i) modulo the CPUs. */
static weft_loop_group *group_new(const bench_config *cf, int cpu, int n,
                                  const char *name) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = n;
  o.pin = false; /* two groups: each loop pinned to its own CPU below */
  o.busy_poll_us = cf->busy_poll_us;
  o.busy_poll_adaptive = cf->busy_poll_adaptive;
  o.name = name;
  weft_loop_group *g;
  if (weft_loop_group_new(&g, &o) < 0 || weft_loop_group_start(g) < 0)
    bench_fail("cannot start a loop group for %s", cf->label);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 0; i < n; i++)
    weft_loop_execute(weft_loop_group_get(g, i), pin_task,
                      (void *)(intptr_t)((cpu + i) % (cpus > 0 ? cpus : 1)));
  return g;
}

/* A TLS context of the +tls setups: the server's certificate, or the
 * client's trust in the CA (and the name "localhost"). */
static weft_tls_context *tls_context(weft_tls_mode mode) {
  weft_tls_options o;
  weft_tls_options_init(&o);
  const char *d = bench_opt.tls_certs;
  o.ktls = bench_opt.tls_ktls;
  if (mode == WEFT_TLS_SERVER) {
    snprintf(o.cert_file, sizeof o.cert_file, "%s/server.pem", d);
    snprintf(o.key_file, sizeof o.key_file, "%s/server.key", d);
  } else {
    snprintf(o.ca_file, sizeof o.ca_file, "%s/ca.pem", d);
    snprintf(o.server_name, sizeof o.server_name, "localhost");
  }
  weft_tls_context *c;
  char err[300];
  if (weft_tls_context_new(&c, mode, &o, err, sizeof err) < 0)
    bench_fail("--tls-certs: %s", err);
  return c;
}

static void weft_server_start(session *s) {
  char name[16];
  /* the loop's thread is "wb<idx>s-0", which the prefix matches */
  snprintf(name, sizeof name, "wb%ds", s->idx);
  s->sg = group_new(s->cf, 1, bench_opt.server_loops, name);
  if (s->cf->tls)
    s->tls_server = tls_context(WEFT_TLS_SERVER);
  weft_server_bootstrap sb = {.group = s->sg,
                              .listen = s->uri,
                              .child_init = bench_server_weft_init,
                              .child_init_arg = s};
  weft_channel_config_init(&sb.child_options);
  if (weft_server_bind(&s->srv, &sb) < 0 ||
      weft_server_address(s->srv, s->uri, sizeof s->uri) < 0)
    bench_fail("cannot listen on %s", s->uri);
}

extern char **environ;

/* Starts s's server as another process: this program with --role server
 * and s's setup, at a port of its choosing, which it prints on its stdout
 * ("weft-bench: <label> serving on <uri>"); its URI goes to s->uri. */
static void weft_server_spawn(session *s) {
  char spec[48], port[16], loops[16];
  snprintf(spec, sizeof spec, "%s:%d", s->cf->transport, s->cf->busy_poll_us);
  snprintf(port, sizeof port, "%d", bench_opt.port);
  snprintf(loops, sizeof loops, "%d", bench_opt.server_loops);
  char *argv[] = {
      "weft-bench", "--role",        "server", "-S", spec,
      "--host",     bench_opt.host,  "--port", port, "--server-loops",
      loops,        "--no-progress", NULL,     NULL};
  if (bench_opt.no_pin)
    argv[12] = "--no-pin"; /* the server's threads as the client's */
  int fds[2];
  if (pipe(fds) < 0)
    bench_die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  int rc =
      posix_spawn(&s->server_pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0)
    bench_fail("cannot start the %s server process", s->cf->label);
  FILE *f = fdopen(fds[0], "r");
  char line[400];
  const char *at = NULL;
  while (f != NULL && at == NULL && fgets(line, sizeof line, f) != NULL)
    at = strstr(line, " serving on ");
  if (f != NULL)
    fclose(f);
  else
    close(fds[0]);
  if (at == NULL)
    bench_fail("the %s server process did not start", s->cf->label);
  snprintf(s->uri, sizeof s->uri, "%s", at + strlen(" serving on "));
  s->uri[strcspn(s->uri, "\n")] = '\0';
}

/* Whether s's server runs in a process of its own (ucx without +tls, both
 * roles; a +tls server would need the certificates passed on too). */
static bool server_apart(const session *s) {
  return bench_opt.role == ROLE_BOTH && !s->cf->tls &&
         strcmp(s->cf->transport, "ucx") == 0;
}

static void weft_session_start(session *s) {
  snprintf(s->uri, sizeof s->uri, "%s://%s:%d", s->cf->transport,
           bench_opt.host, bench_opt.port);
  if (server_apart(s))
    weft_server_spawn(s);
  else if (bench_opt.role != ROLE_CLIENT)
    weft_server_start(s);
  if (bench_opt.role != ROLE_SERVER) {
    char name[16];
    snprintf(name, sizeof name, "wb%dc", s->idx);
    s->cg = group_new(s->cf, 0, 1, name);
    if (s->cf->tls)
      s->tls_client = tls_context(WEFT_TLS_CLIENT);
  }
}

static void group_end(weft_loop_group *g) {
  if (g == NULL)
    return;
  weft_loop_group_stop(g);
  weft_loop_group_join(g);
  weft_loop_group_free(g);
}

static void weft_session_stop(session *s) {
  group_end(s->cg);
  if (s->srv != NULL)
    weft_server_close(s->srv);
  group_end(s->sg);
  if (s->server_pid > 0) {
    kill(s->server_pid, SIGTERM);
    int st;
    waitpid(s->server_pid, &st, 0);
  }
  weft_tls_context_release(s->tls_server);
  weft_tls_context_release(s->tls_client);
}

void bench_session_start(bench_config *cf, int idx) {
  session *s = calloc(1, sizeof *s);
  if (s == NULL)
    bench_die("calloc");
  s->cf = cf;
  s->idx = idx;
  s->lfd = -1;
  s->stop_fd = -1;
  /* weft names its loop threads "<name>-<i>": "wb3s-0" */
  snprintf(s->prefix, sizeof s->prefix, "wb%ds-", idx);
  cf->s = s;
  if (cf->raw)
    raw_session_start(s);
  else
    weft_session_start(s);
}

void bench_session_stop(bench_config *cf) {
  if (cf->raw)
    raw_session_stop(cf->s);
  else
    weft_session_stop(cf->s);
  free(cf->s);
  cf->s = NULL;
}
