/* SPDX-License-Identifier: Apache-2.0 */
#include "server_proc.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
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

sp_server sp_start(const char *const *argv, const char *marker) {
  int out[2];
  ck_assert_int_eq(pipe(out), 0);
  sp_server s = {.pid = fork()};
  ck_assert_int_ge(s.pid, 0);
  if (s.pid == 0) {
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    asan_frees_at_once();
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  s.log = fdopen(out[0], "r");
  setvbuf(s.log, NULL, _IONBF, 0); /* no line waits in a buffer past poll */
  char line[512];
  while (s.port == 0 && fgets(line, sizeof line, s.log) != NULL) {
    const char *at = strstr(line, marker);
    const char *colon = at != NULL ? strrchr(at, ':') : NULL;
    if (colon != NULL)
      s.port = atoi(colon + 1);
  }
  ck_assert_msg(s.port > 0, "%s printed no \"%s\" address", argv[0], marker);
  return s; /* the pipe stays open: the server may go on logging */
}

void sp_stop(sp_server *s) {
  kill(s->pid, SIGTERM);
  int status = 0;
  ck_assert_int_eq(waitpid(s->pid, &status, 0), s->pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the server ended with status 0x%x", status);
  fclose(s->log);
}

bool sp_log_wait(sp_server *s, const char *needle, int ms) {
  uint64_t end = th_now_ms() + (uint64_t)ms;
  char line[1024];
  for (;;) {
    uint64_t now = th_now_ms();
    struct pollfd p = {.fd = fileno(s->log), .events = POLLIN};
    int rc = poll(&p, 1, now < end ? (int)(end - now) : 0);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0 || fgets(line, sizeof line, s->log) == NULL)
      return false; /* no line in time, or the log ended */
    fprintf(stderr, "server: %s", line);
    if (strstr(line, needle) != NULL)
      return true;
  }
}
