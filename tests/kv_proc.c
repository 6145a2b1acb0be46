/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server as a child process (kv_proc.h). */
#include "kv_proc.h"

#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Under ASan the server's freed blocks would sit in ASan's quarantine
 * (256 MiB by default) instead of going back to the allocator, and RSS would
 * measure the quarantine, not weft. A quarantine of 0 keeps ASan's checks
 * of everything but use-after-free of long-freed memory; the variable is
 * ignored by builds without ASan. */
static void asan_frees_at_once(void) {
  const char *was = getenv("ASAN_OPTIONS");
  char opts[512];
  snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0",
           was != NULL ? was : "", was != NULL && was[0] ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
}

kv_proc kv_proc_start(const char *extra, bool no_quarantine) {
  const char *path = getenv("WEFT_KV_SERVER");
  ck_assert_msg(path != NULL, "WEFT_KV_SERVER is not set");
  int out[2];
  ck_assert_int_eq(pipe(out), 0);
  kv_proc s = {.pid = fork()};
  ck_assert_int_ge(s.pid, 0);
  if (s.pid == 0) {
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    if (no_quarantine)
      asan_frees_at_once();
    char transport[64];
    snprintf(transport, sizeof transport, "transport.name=%s",
             th_transport_name());
    const char *argv[16] = {path,
                            "-o",
                            "loop.loops=1",
                            "-o",
                            transport,
                            "-o",
                            "kv.rpc_listen=",
                            "-o",
                            "kv.resp_listen=127.0.0.1:0"};
    int n = 9;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", extra);
    for (char *tok = strtok(copy, " "); tok != NULL && n < 14;
         tok = strtok(NULL, " ")) {
      argv[n++] = "-o";
      argv[n++] = tok;
    }
    argv[n] = NULL;
    execv(path, (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  FILE *f = fdopen(out[0], "r");
  char line[512];
  while (s.port == 0 && fgets(line, sizeof line, f) != NULL) {
    const char *at = strstr(line, "resp on ");
    const char *colon = at != NULL ? strrchr(at, ':') : NULL;
    if (colon != NULL)
      s.port = atoi(colon + 1);
  }
  ck_assert_msg(s.port > 0, "weft-kv-server printed no RESP address");
  return s; /* the pipe stays open: the server may go on logging */
}

void kv_proc_stop(kv_proc *s) {
  kill(s->pid, SIGTERM);
  int status = 0;
  ck_assert_int_eq(waitpid(s->pid, &status, 0), s->pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "weft-kv-server ended with status 0x%x", status);
}

int kv_proc_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
  return fd;
}
