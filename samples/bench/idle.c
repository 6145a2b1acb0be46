/* SPDX-License-Identifier: Apache-2.0 */
/* idle.c: weft-bench's idle pattern, what idle connections cost the
 * server. --idle-conns connections to an echoing server (SRV_ECHO) do
 * nothing for --idle-seconds; the row is the server's CPU time in that
 * time, % of one core: the server process (--server-pid, client role) or
 * this process's server threads, found by their names (bench_session.c).
 * Not measured for raw-busy (bench_run.c): that many spinning threads are
 * no floor of anything. */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench_util.h"

/* Linux's clock id for a thread's CPU time (CPUCLOCK_SCHED, per thread):
 * works for any thread of this process, without its pthread_t. */
static clockid_t thread_clock(pid_t tid) {
  return (clockid_t)(((unsigned)~tid) << 3) | 6;
}

static uint64_t clock_ns(clockid_t clk) {
  struct timespec ts;
  if (clock_gettime(clk, &ts) < 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of this process's thread `tid` (a name in /proc/self/task)
 * if its name starts with `prefix`, else 0. */
static uint64_t task_cpu_ns(const char *tid, const char *prefix) {
  char path[300], comm[32] = "";
  snprintf(path, sizeof path, "/proc/self/task/%s/comm", tid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  uint64_t ns = 0;
  if (fgets(comm, sizeof comm, f) != NULL &&
      strncmp(comm, prefix, strlen(prefix)) == 0)
    ns = clock_ns(thread_clock((pid_t)atoi(tid)));
  fclose(f);
  return ns;
}

/* CPU time of s's server: the other process (--server-pid, or the one the
 * session spawned), or the sum over this process's threads whose name
 * starts with s's prefix. */
static uint64_t server_cpu_ns(const session *s) {
  pid_t pid = s->server_pid > 0 ? s->server_pid : bench_opt.server_pid;
  const char *prefix = s->prefix;
  if (pid > 0) {
    clockid_t clk;
    return clock_getcpuclockid(pid, &clk) == 0 ? clock_ns(clk) : 0;
  }
  DIR *d = opendir("/proc/self/task");
  if (d == NULL)
    return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      sum += task_cpu_ns(e->d_name, prefix);
  closedir(d);
  return sum;
}

static void measure_idle_cpu(session *s, result *res) {
  uint64_t c0 = server_cpu_ns(s), w0 = bench_now_ns();
  double secs = bench_opt.idle_seconds;
  struct timespec ts = {(time_t)secs,
                        (long)((secs - (double)(time_t)secs) * 1e9)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
  uint64_t c1 = server_cpu_ns(s), w1 = bench_now_ns();
  res->cpu_pct = 100.0 * (double)(c1 - c0) / (double)(w1 - w0);
}

static void idle_raw(session *s, const point *pt, result *res) {
  int *fd = malloc(sizeof *fd * (size_t)pt->conns);
  if (fd == NULL)
    bench_die("malloc");
  for (int i = 0; i < pt->conns; i++)
    fd[i] = bench_raw_connect(s, SRV_ECHO, 0);
  /* the server threads have read the hello once a byte echoes back */
  for (int i = 0; i < pt->conns; i++)
    if (bench_raw_exchange(fd[i], 1, false) < 0)
      bench_die("idle echo");
  measure_idle_cpu(s, res);
  for (int i = 0; i < pt->conns; i++)
    bench_raw_close(fd[i], false);
  free(fd);
}

/* ---- weft: measured from the main thread once all are connected ---- */

static void idle_start(wrun *r) { bench_wrun_signal(r, &r->ready, 1); }

static void close_all_task(void *arg) { bench_wrun_close_all(arg); }

static void idle_await(session *s, wrun *r, result *res) {
  if (!bench_wrun_wait(r, &r->ready, 1))
    bench_fail("%s: idle connections did not all connect", r->uri);
  measure_idle_cpu(s, res);
  weft_loop_execute(r->loop, close_all_task, r);
}

/* Closing the connections is how the run ends, never a failure. */
static bool idle_inactive(wrun *r, wconn *c) {
  (void)r;
  (void)c;
  return false;
}

const bench_pattern bench_idle = {.name = "idle",
                                  .server_mode = SRV_ECHO,
                                  .raw_run = idle_raw,
                                  .start = idle_start,
                                  .await = idle_await,
                                  .inactive = idle_inactive};
