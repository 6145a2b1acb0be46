/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server as a process of its own (kv_process.h). */
#include "kv_process.h"

#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_EXTRA 24 /* -o settings of `extra` */

static void exec_server(const char *path, int log_fd, const char *extra) {
  dup2(log_fd, STDERR_FILENO);
  th_asan_frees_at_once();
  char transport[64];
  snprintf(transport, sizeof transport, "transport.name=%s",
           th_transport_name());
  const char *argv[10 + 2 * MAX_EXTRA] = {path,
                                          "-o",
                                          "loop.loops=1",
                                          "-o",
                                          transport,
                                          "-o",
                                          "kv.rpc_listen=",
                                          "-o",
                                          "kv.resp_listen=127.0.0.1:0"};
  int n = 9;
  static char copy[2048];
  snprintf(copy, sizeof copy, "%s", extra);
  for (char *tok = strtok(copy, " "); tok != NULL && n < 9 + 2 * MAX_EXTRA;
       tok = strtok(NULL, " ")) {
    argv[n++] = "-o";
    argv[n++] = tok;
  }
  argv[n] = NULL;
  execv(path, (char *const *)argv);
  _exit(127);
}

/* The port of the "weft-kv-server: <name> on URI" line in the log, or 0. */
static int port_in_log(const kv_process *p, const char *name) {
  FILE *f = fopen(p->log, "r");
  if (f == NULL)
    return 0;
  char want[32], line[512];
  snprintf(want, sizeof want, ": %s on ", name);
  int port = 0;
  while (port == 0 && fgets(line, sizeof line, f) != NULL) {
    const char *at = strstr(line, want);
    const char *colon = at != NULL ? strrchr(at, ':') : NULL;
    if (colon != NULL)
      port = atoi(colon + 1);
  }
  fclose(f);
  return port;
}

kv_process kv_process_start(const char *extra) {
  const char *path = getenv("WEFT_KV_SERVER");
  ck_assert_msg(path != NULL, "WEFT_KV_SERVER is not set");
  kv_process p = {0};
  snprintf(p.log, sizeof p.log, "/tmp/weft-kv-process-XXXXXX");
  int fd = mkstemp(p.log);
  ck_assert_int_ge(fd, 0);
  p.pid = fork();
  ck_assert_int_ge(p.pid, 0);
  if (p.pid == 0)
    exec_server(path, fd, extra);
  close(fd);
  bool rpc = strstr(extra, "kv.rpc_listen=") != NULL;
  for (uint64_t end = th_now_ms() + 60000;
       (p.port == 0 || (rpc && p.rpc_port == 0)) && th_now_ms() < end;) {
    p.port = port_in_log(&p, "resp");
    p.rpc_port = rpc ? port_in_log(&p, "rpc") : 0;
    int status;
    ck_assert_msg(waitpid(p.pid, &status, WNOHANG) == 0,
                  "weft-kv-server ended at start (log %s)", p.log);
    th_sleep_ms(10);
  }
  ck_assert_msg(p.port > 0, "weft-kv-server printed no RESP address");
  return p;
}

void kv_process_stop(kv_process *p) {
  th_stop_child(p->pid, "weft-kv-server");
  unlink(p->log);
}

int kv_process_log_count(const kv_process *p, const char *text) {
  FILE *f = fopen(p->log, "r");
  ck_assert_ptr_nonnull(f);
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL)
    n += strstr(line, text) != NULL;
  fclose(f);
  return n;
}
