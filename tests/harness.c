/* main() for every test program, plus log capture, suites and helpers. */
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <weft/log.h>

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char cap_buf[1 << 16];
static size_t cap_len;

static void capture(weft_log_level level, const char *msg, void *arg) {
  (void)level;
  (void)arg;
  pthread_mutex_lock(&cap_lock);
  size_t n = strlen(msg);
  if (cap_len + n + 2 < sizeof cap_buf) {
    memcpy(cap_buf + cap_len, msg, n);
    cap_len += n;
    cap_buf[cap_len++] = '\n';
    cap_buf[cap_len] = '\0';
  }
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

int main(void) {
  SRunner *sr = srunner_create(weft_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

uint64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

Suite *th_suite(const char *name, const char *tcase, int timeout, ...) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create(tcase);
  if (timeout > 0)
    tcase_set_timeout(tc, timeout);
  va_list ap;
  va_start(ap, timeout);
  add_tests(tc, ap);
  va_end(ap);
  suite_add_tcase(s, tc);
  return s;
}

void th_add_tests(TCase *tc, ...) {
  va_list ap;
  va_start(ap, tc);
  add_tests(tc, ap);
  va_end(ap);
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
