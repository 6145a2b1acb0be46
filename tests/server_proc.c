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

sp_server sp_start(const char *const *argv, const char *marker) {
  int out[2];
  ck_assert_int_eq(pipe(out), 0);
  sp_server s = {.pid = fork()};
  ck_assert_int_ge(s.pid, 0);
  if (s.pid == 0) {
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    th_asan_frees_at_once();
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
  th_stop_child(s->pid, "the server");
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
