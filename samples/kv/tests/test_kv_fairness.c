/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server under one client's pipeline of costly commands (issue
 * 27): the server runs as its own process (WEFT_KV_SERVER) with one loop
 * over WEFT_TEST_TRANSPORT (tcp or uring: the clients are plain sockets),
 * so both clients share that loop. One client sends many `KEYS nomatch*`
 * (each copies every key of the store under its locks, then matches
 * none), each followed by an ECHO of its number, in one write; the other
 * then sends a PING. Before the work budget per turn
 * (samples/kv/README.md, "Fairness") the PING waited for the whole
 * pipeline; now it is answered while the flood's replies are still being
 * made. The assertion is on order, not on time: when the PONG arrives,
 * the flood's client has not got all its replies yet. The flood is sized
 * from the time one KEYS takes here, so a sanitizer build runs it too.
 *
 * MULTI: a transaction may queue at most 2 KEYS or SCAN (EXEC runs them
 * with every stripe locked); a third is refused and EXEC aborts. */
#include "harness.h"
#include "kv_process.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEYS_IN_STORE 20000 /* below KV_KEYS_MAX: KEYS copies them all */
#define MSET_PAIRS 500      /* keys per MSET (the decoder takes 1024 words) */
#define FLOOD_MS 3000       /* the flood's estimated length */
#define FLOOD_MIN 30        /* commands in the flood, at least */
#define FLOOD_MAX 5000      /* and at most */

/* A connection whose reads give up after 120 s: a stuck server fails the
 * test, not hangs it. */
static int connect_to(int port) {
  int fd = th_connect_loopback(port);
  struct timeval tv = {.tv_sec = 120};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/* Reads exactly `n` bytes; asserts. */
static void read_exact(int fd, char *buf, size_t n) {
  ck_assert_int_eq(recv(fd, buf, n, MSG_WAITALL), (ssize_t)n);
}

/* Reads one line up to and with its CRLF into `buf` (NUL-terminated,
 * without the CRLF); asserts. */
static void read_line(int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (;;) {
    char c;
    ck_assert_int_eq(recv(fd, &c, 1, 0), 1);
    if (c == '\n' && n > 0 && buf[n - 1] == '\r') {
      buf[n - 1] = '\0';
      return;
    }
    ck_assert_uint_lt(n, cap - 1);
    buf[n++] = c;
  }
}

/* Fills the store with KEYS_IN_STORE keys, MSET_PAIRS per MSET. */
static void fill(int fd) {
  static char cmd[MSET_PAIRS * 40 + 32];
  for (int base = 0; base < KEYS_IN_STORE; base += MSET_PAIRS) {
    int n =
        snprintf(cmd, sizeof cmd, "*%d\r\n$4\r\nMSET\r\n", 1 + 2 * MSET_PAIRS);
    for (int i = base; i < base + MSET_PAIRS; i++) {
      char key[16];
      int kl = snprintf(key, sizeof key, "k%d", i);
      n += snprintf(cmd + n, sizeof cmd - (size_t)n, "$%d\r\n%s\r\n$1\r\nv\r\n",
                    kl, key);
    }
    th_write_all(fd, cmd, (size_t)n);
    char ok[256];
    read_line(fd, ok, sizeof ok);
    ck_assert_str_eq(ok, "+OK");
  }
}

static const char keys_cmd[] = "*2\r\n$4\r\nKEYS\r\n$8\r\nnomatch*\r\n";

/* The time one KEYS over the store takes here, round trip, ms (at least
 * 1). */
static uint64_t keys_ms(int fd) {
  uint64_t t0 = th_now_ms();
  for (int i = 0; i < 5; i++) {
    th_write_all(fd, keys_cmd, sizeof keys_cmd - 1);
    char line[16];
    read_line(fd, line, sizeof line);
    ck_assert_str_eq(line, "*0");
  }
  uint64_t ms = (th_now_ms() - t0) / 5;
  return ms > 0 ? ms : 1;
}

/* `n` times KEYS nomatch* then ECHO <i>, in one buffer. */
static char *flood_cmds(int n, size_t *len) {
  size_t cap = (size_t)n * (sizeof keys_cmd + 48);
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    memcpy(buf + off, keys_cmd, sizeof keys_cmd - 1);
    off += sizeof keys_cmd - 1;
    char num[16];
    int nl = snprintf(num, sizeof num, "%d", i);
    off += (size_t)snprintf(buf + off, cap - off,
                            "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", nl, num);
  }
  *len = off;
  return buf;
}

/* The bytes of the flood's `n` replies: "*0", then ECHO's bulk string. */
static char *flood_replies(int n, size_t *len) {
  size_t cap = (size_t)n * 32;
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    char num[16];
    int nl = snprintf(num, sizeof num, "%d", i);
    off +=
        (size_t)snprintf(buf + off, cap - off, "*0\r\n$%d\r\n%s\r\n", nl, num);
  }
  *len = off;
  return buf;
}

/* Reads what `fd` has ready now, without waiting, into `buf` from `off`
 * (up to `cap`); returns the new length. */
static size_t read_ready(int fd, char *buf, size_t off, size_t cap) {
  while (off < cap) {
    ssize_t r = recv(fd, buf + off, cap - off, MSG_DONTWAIT);
    if (r <= 0)
      break;
    off += (size_t)r;
  }
  return off;
}

/* The KEYS replies ("*0") among the first `len` bytes of the flood's. */
static int keys_replies(const char *buf, size_t len) {
  int k = 0;
  for (size_t i = 0; i + 4 <= len; i++)
    if (memcmp(buf + i, "*0\r\n", 4) == 0)
      k++;
  return k;
}

START_TEST(kv_fairness_ping_answered_during_pipelined_keys) {
  kv_process s = kv_process_start("");
  int ping = connect_to(s.port); /* both on the server's one loop */
  int flood = connect_to(s.port);
  fill(flood);
  uint64_t one = keys_ms(flood);
  int n = (int)(FLOOD_MS / one);
  n = n < FLOOD_MIN ? FLOOD_MIN : n > FLOOD_MAX ? FLOOD_MAX : n;
  size_t len;
  char *cmds = flood_cmds(n, &len);
  th_write_all(flood, cmds, len); /* a few dozen KiB: the kernel takes it */
  free(cmds);
  /* Let the server start on the flood before the PING comes; before the
   * budget the PING then waited for all of it. */
  th_sleep_ms((unsigned)(10 * one < 200 ? 10 * one : 200));
  uint64_t t0 = th_now_ms();
  th_write_all(ping, "*1\r\n$4\r\nPING\r\n", 14);
  char pong[8];
  read_line(ping, pong, sizeof pong);
  ck_assert_str_eq(pong, "+PONG");
  uint64_t ping_ms = th_now_ms() - t0;
  size_t want_len;
  char *want = flood_replies(n, &want_len);
  char *got = malloc(want_len);
  ck_assert_ptr_nonnull(got);
  size_t have = read_ready(flood, got, 0, want_len);
  int before = keys_replies(got, have);
  fprintf(stderr,
          "%s: KEYS over %d keys: %llu ms; PONG in %llu ms, with %d of the "
          "flood's %d KEYS answered\n",
          th_transport_name(), KEYS_IN_STORE, (unsigned long long)one,
          (unsigned long long)ping_ms, before, n);
  if (have < want_len)
    read_exact(flood, got + have, want_len - have);
  /* Every reply, in order. */
  ck_assert_int_eq(memcmp(got, want, want_len), 0);
  free(got);
  free(want);
  ck_assert_int_lt(before, n);
  /* The loop is free again. */
  th_write_all(ping, "*1\r\n$4\r\nPING\r\n", 14);
  read_line(ping, pong, sizeof pong);
  ck_assert_str_eq(pong, "+PONG");
  close(ping);
  close(flood);
  kv_process_stop(&s);
}
END_TEST

START_TEST(kv_fairness_multi_refuses_a_third_keys) {
  kv_process s = kv_process_start("");
  int fd = connect_to(s.port);
  static const char multi[] = "*1\r\n$5\r\nMULTI\r\n";
  static const char exec[] = "*1\r\n$4\r\nEXEC\r\n";
  char line[256];
  th_write_all(fd, multi, sizeof multi - 1);
  read_line(fd, line, sizeof line);
  ck_assert_str_eq(line, "+OK");
  for (int i = 0; i < 2; i++) {
    th_write_all(fd, keys_cmd, sizeof keys_cmd - 1);
    read_line(fd, line, sizeof line);
    ck_assert_str_eq(line, "+QUEUED");
  }
  th_write_all(fd, keys_cmd, sizeof keys_cmd - 1);
  read_line(fd, line, sizeof line);
  ck_assert_msg(
      strncmp(line, "-ERR MULTI may queue at most 2 KEYS or SCAN", 43) == 0,
      "third KEYS in MULTI: %s", line);
  th_write_all(fd, exec, sizeof exec - 1);
  read_line(fd, line, sizeof line);
  ck_assert_msg(strncmp(line, "-EXECABORT", 10) == 0, "EXEC: %s", line);
  close(fd);
  kv_process_stop(&s);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  return th_suite("kv_fairness", "core", 300,
                  kv_fairness_ping_answered_during_pipelined_keys,
                  kv_fairness_multi_refuses_a_third_keys, NULL);
}
