/* SPDX-License-Identifier: Apache-2.0 */
/* main() for every test program, plus log capture, suites and helpers. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <weft/endpoint.h>
#include <weft/error.h>
#include <weft/log.h>

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char cap_buf[1 << 16];
static size_t cap_len;

/* Each line as weft's default handler writes it, its level first
 * ("warn: channel 1: ..."), so a test can check the level too. */
static void capture(weft_log_level level, const char *msg, void *arg) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  (void)arg;
  pthread_mutex_lock(&cap_lock);
  const char *name = (unsigned)level < 4 ? names[level] : "?";
  int n = snprintf(cap_buf + cap_len, sizeof cap_buf - cap_len, "%s: %s\n",
                   name, msg);
  if (n < 0 || (size_t)n >= sizeof cap_buf - cap_len)
    cap_buf[cap_len] = '\0'; /* full: drop the line, keep what was there */
  else
    cap_len += (size_t)n;
  pthread_mutex_unlock(&cap_lock);
}

void th_log_capture_start(void) {
  pthread_mutex_lock(&cap_lock);
  cap_len = 0;
  cap_buf[0] = '\0';
  pthread_mutex_unlock(&cap_lock);
  weft_log_set_level(WEFT_LOG_DEBUG);
  weft_log_set_handler(capture, NULL);
}

void th_log_capture_stop(void) { weft_log_set_handler(NULL, NULL); }

int th_log_count(const char *needle) {
  pthread_mutex_lock(&cap_lock);
  int n = 0;
  for (const char *p = cap_buf; (p = strstr(p, needle)) != NULL; p++)
    n++;
  pthread_mutex_unlock(&cap_lock);
  return n;
}

const char *th_log_text(void) { return cap_buf; }

/* ---- skips ---- */

/* Checks run in forked children (Check's default): skips are appended to
 * a file the parent reads after the run. */
static char skip_path[64];
static const char *program;

static void append_line(const char *path, const char *line) {
  FILE *f = path != NULL && path[0] != '\0' ? fopen(path, "a") : NULL;
  if (f != NULL) {
    fprintf(f, "%s\n", line);
    fclose(f);
  }
}

static void skip_vformat(char *buf, size_t len, const char *check,
                         const char *fmt, va_list ap) {
  /* START_TEST(name) defines name_fn: report the name the suite uses. */
  size_t cl = strlen(check);
  int cut = cl > 3 && strcmp(check + cl - 3, "_fn") == 0 ? 3 : 0;
  int n =
      snprintf(buf, len, "SKIPPED %s %.*s: ", program, (int)(cl - cut), check);
  vsnprintf(buf + n, len - (size_t)n, fmt, ap);
  for (char *p = buf; *p != '\0'; p++)
    if (*p == '\n')
      *p = ' ';
}

void th_skip(const char *check, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  skip_vformat(line, sizeof line, check, fmt, ap);
  va_end(ap);
  append_line(skip_path, line); /* the parent reports it after the run */
}

_Noreturn void th_skip_program(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  skip_vformat(line, sizeof line, "(all)", fmt, ap);
  va_end(ap);
  printf("%s\n", line);
  append_line(getenv("WEFT_TEST_SKIP_LOG"), line);
  if (skip_path[0] != '\0')
    unlink(skip_path);
  exit(TH_SKIP_EXIT);
}

void th_require_transport(void) {
  char why[256] = "";
  if (!weft_transport_available(th_transport_name(), why, sizeof why))
    th_skip_program("transport %s cannot run here: %s", th_transport_name(),
                    why);
}

/* Prints the skips the checks recorded and counts them. */
static int skips_report(void) {
  FILE *f = fopen(skip_path, "r");
  if (f == NULL)
    return 0;
  int n = 0;
  char line[512];
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    printf("%s\n", line);
    append_line(getenv("WEFT_TEST_SKIP_LOG"), line);
    n++;
  }
  fclose(f);
  return n;
}

int main(int argc, char **argv) {
  (void)argc;
  program = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  snprintf(skip_path, sizeof skip_path, "/tmp/weft-skips-XXXXXX");
  int fd = mkstemp(skip_path);
  if (fd < 0)
    skip_path[0] = '\0';
  else
    close(fd);
  SRunner *sr = srunner_create(weft_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  int run = srunner_ntests_run(sr);
  srunner_free(sr);
  int skipped = skip_path[0] ? skips_report() : 0;
  if (skip_path[0])
    unlink(skip_path);
  if (failed > 0)
    return EXIT_FAILURE;
  if (skipped > 0)
    printf("%s: %d of %d checks skipped\n", program, skipped, run);
  return run > 0 && skipped >= run ? TH_SKIP_EXIT : EXIT_SUCCESS;
}

uint64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

weft_loop_stats th_loop_stats(weft_loop *loop) {
  weft_loop_stats st;
  weft_loop_stats_get(loop, &st);
  return st;
}

void th_sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char *th_transport_name(void) {
  const char *t = getenv("WEFT_TEST_TRANSPORT");
  return t != NULL && t[0] != '\0' ? t : "tcp";
}

const char *th_test_host(void) {
  const char *h = getenv("WEFT_TEST_HOST");
  return h != NULL && h[0] != '\0' ? h : "127.0.0.1";
}

double th_test_scale(void) {
  const char *s = getenv("WEFT_TEST_SCALE");
  double v = s != NULL ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

int th_suite_loops(void) {
  return strcmp(th_transport_name(), "ucx") == 0 ? 1 : 2;
}

weft_loop_group *th_group_start(const char *name, int loops) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = loops;
  if (name != NULL)
    o.name = name;
  weft_loop_group *g = NULL;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), 0);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  return g;
}

weft_server *th_server_bind(weft_loop_group *group, const char *listen,
                            weft_channel_init_cb init, void *arg, char *uri,
                            size_t len) {
  weft_server_bootstrap sb = {.group = group,
                              .listen = listen,
                              .child_init = init,
                              .child_init_arg = arg};
  weft_channel_config_init(&sb.child_options);
  weft_server *srv;
  ck_assert_int_eq(weft_server_bind(&srv, &sb), 0);
  ck_assert_int_eq(weft_server_address(srv, uri, len), 0);
  return srv;
}

static void add_tests(TCase *tc, va_list ap) {
  const TTest *t;
  while ((t = va_arg(ap, const TTest *)) != NULL)
    tcase_add_test(tc, t);
}

/* Adds to `s` the case `name`, its timeout (0 = Check's default) and the
 * tests of `ap`; returns the case. */
static TCase *add_case(Suite *s, const char *name, int timeout, va_list ap) {
  TCase *tc = tcase_create(name);
  if (timeout > 0)
    tcase_set_timeout(tc, timeout);
  add_tests(tc, ap);
  suite_add_tcase(s, tc);
  return tc;
}

Suite *th_suite(const char *name, const char *tcase, int timeout, ...) {
  Suite *s = suite_create(name);
  va_list ap;
  va_start(ap, timeout);
  add_case(s, tcase, timeout, ap);
  va_end(ap);
  return s;
}

TCase *th_add_case(Suite *s, const char *name, int timeout, ...) {
  va_list ap;
  va_start(ap, timeout);
  TCase *tc = add_case(s, name, timeout, ap);
  va_end(ap);
  return tc;
}

Suite *th_suite_fixture(const char *name, const char *tcase,
                        void (*setup)(void), void (*teardown)(void), ...) {
  Suite *s = suite_create(name);
  va_list ap;
  va_start(ap, teardown);
  TCase *tc = add_case(s, tcase, 0, ap);
  va_end(ap);
  tcase_add_checked_fixture(tc, setup, teardown);
  return s;
}

void th_add_tests(TCase *tc, ...) {
  va_list ap;
  va_start(ap, tc);
  add_tests(tc, ap);
  va_end(ap);
}

void th_add_last(weft_channel *ch, const char *name,
                 const weft_handler *handler, void *state) {
  ck_assert_int_eq(
      weft_pipeline_add_last(weft_channel_pipeline(ch), name, handler, state),
      0);
}

void th_store_connect_status(weft_channel *ch, int status, void *arg) {
  (void)ch;
  atomic_store((atomic_int *)arg, status);
}

weft_bootstrap th_bootstrap(weft_loop_group *group, weft_loop *loop,
                            const char *uri, weft_channel_init_cb init,
                            void *arg) {
  weft_bootstrap b = {.group = group,
                      .loop = loop,
                      .connect = uri,
                      .init = init,
                      .init_arg = arg};
  weft_channel_config_init(&b.options);
  return b;
}

void th_connect(weft_loop_group *group, weft_loop *loop, const char *uri,
                weft_channel_init_cb init, void *arg, atomic_int *status) {
  weft_bootstrap b = th_bootstrap(group, loop, uri, init, arg);
  b.on_connect = th_store_connect_status;
  b.connect_arg = status;
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

void th_write_all(int fd, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    ck_assert_msg(w > 0, "write: %s", strerror(errno));
    p += w;
    n -= (size_t)w;
  }
}

int th_bind_loopback(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sin;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
  *port = ntohs(sin.sin_port);
  return fd;
}

int th_connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_msg(connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0,
                "connect to 127.0.0.1:%d: %s", port, strerror(errno));
  return fd;
}

/* ---- what /proc says ---- */

long th_proc_kib(const char *path, const char *key) {
  char line[256];
  FILE *f = fopen(path, "r");
  long v = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, strlen(key)) == 0)
      v = strtol(line + strlen(key), NULL, 10);
  if (f != NULL)
    fclose(f);
  return v;
}

long th_status_kib(pid_t pid, const char *key) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  return th_proc_kib(path, key);
}

long th_meminfo_kib(const char *key) {
  return th_proc_kib("/proc/meminfo", key);
}

long long th_cpu_ticks(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces */
  unsigned long long utime, stime;
  if (p == NULL || sscanf(p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu "
                          "%llu",
                          &utime, &stime) != 2)
    return -1;
  return (long long)(utime + stime);
}

long long th_run_ns(pid_t pid) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  long long sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "/proc/%d/task/%s/schedstat", (int)pid,
             e->d_name);
    FILE *f = fopen(path, "r");
    long long ns = 0;
    if (f != NULL && fscanf(f, "%lld", &ns) == 1)
      sum += ns;
    if (f != NULL)
      fclose(f);
  }
  closedir(d);
  return sum;
}

double th_idle_cpu(pid_t pid, unsigned ms) {
  long long t0 = th_cpu_ticks(pid);
  th_sleep_ms(ms);
  long long t1 = th_cpu_ticks(pid);
  ck_assert(t0 >= 0 && t1 >= t0);
  return 100.0 * (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK) /
         (ms / 1000.0);
}

/* ---- echo servers ---- */

void th_echo_read(weft_ctx *ctx, void *msg) {
  weft_ctx_write_and_flush(ctx, msg, WEFT_PROMISE_NONE);
}

void th_echo_exception(weft_ctx *ctx, int err, const char *reason) {
  fprintf(stderr, "server: %s: %s\n", weft_err_name(err), reason);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler echo_handler = {.name = "echo",
                                          .channel_read = th_echo_read,
                                          .exception_caught =
                                              th_echo_exception};

void th_echo_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &echo_handler,
                         NULL);
}

long th_rss_bytes(pid_t pid) { return th_status_kib(pid, "VmRSS:") * 1024; }

void th_asan_frees_at_once(void) {
  const char *was = getenv("ASAN_OPTIONS");
  char opts[512];
  snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0",
           was != NULL ? was : "", was != NULL && was[0] ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
}

void th_stop_child(pid_t pid, const char *name) {
  kill(pid, SIGTERM);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "%s ended with status 0x%x", name, status);
}
