/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server under one client's pipeline of costly commands (issue
 * 27): the server runs as its own process (WEFT_KV_SERVER) with one loop
 * over WEFT_TEST_TRANSPORT (tcp or uring: the clients are plain sockets),
 * so both clients share that loop. One client sends many `KEYS nomatch*`
 * (each copies every key of the store, a stripe locked at a time, then
 * matches none), each followed by an ECHO of its number, in one write; the
 * other then sends a PING. Before the work budget per turn
 * (samples/kv/README.md, "Fairness") the PING waited for the whole
 * pipeline; now it is answered while the flood's replies are still being
 * made. The assertion is on order, not on time: when the PONG arrives,
 * the flood's client has not got all its replies yet. The flood is sized
 * from the time one KEYS takes here, so a sanitizer build runs it too.
 *
 * Within a KEYS: a KEYS over a large store walks it in steps, yielding its
 * loop between them, so PINGs sent one at a time during the flood are
 * mostly answered before the KEYS being run is.
 *
 * weft RPC: the same budget per turn; a PING on another connection is
 * answered while a pipeline of KEYS requests is still being run.
 *
 * MULTI: a transaction may queue at most 2 KEYS or SCAN (EXEC runs them
 * with every stripe locked); a third is refused and EXEC aborts. */
#include "harness.h"
#include "kv_process.h"
#include "proto.h" /* the RPC methods: KV_CMD_* */

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
#define KEYS_IN_STEPS 80000 /* 20 of KV_KEYS_STEP (cmd_keyspace.c) */
#define MSET_PAIRS 500      /* keys per MSET (the decoder takes 1024 words) */
#define FLOOD_MS 3000       /* the flood's estimated length */
#define FLOOD_MIN 30        /* commands in the flood, at least */
#define FLOOD_MAX 5000      /* and at most */
#define PINGS 20            /* sent one at a time during the flood */

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

/* Fills the store with `keys` keys, MSET_PAIRS per MSET. */
static void fill_n(int fd, int keys) {
  static char cmd[MSET_PAIRS * 40 + 32];
  for (int base = 0; base < keys; base += MSET_PAIRS) {
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

/* Fills the store with KEYS_IN_STORE keys. */
static void fill(int fd) { fill_n(fd, KEYS_IN_STORE); }

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

/* The flood's KEYS answered so far: reads what `fd` has ready into `got`
 * (`*have` bytes of it, up to `cap`). */
static int keys_answered(int fd, char *got, size_t *have, size_t cap) {
  *have = read_ready(fd, got, *have, cap);
  return keys_replies(got, *have);
}

/* PINGs one at a time on the flood's loop: each is answered within the
 * KEYS being run, at the end of its current step, for most of them (a
 * step is KV_KEYS_STEP keys, a twentieth of this store). When a KEYS was one
 * unit of work, a PING that came during one waited for its end: each
 * PONG came after another KEYS reply, unless the PING fell in the gap
 * between two. The assertion counts replies, not time. */
START_TEST(kv_fairness_ping_answered_within_a_keys) {
  kv_process s = kv_process_start("");
  int ping = connect_to(s.port);
  int flood = connect_to(s.port);
  fill_n(flood, KEYS_IN_STEPS);
  uint64_t one = keys_ms(flood);
  int n = (int)(FLOOD_MS / one);
  n = n < FLOOD_MIN ? FLOOD_MIN : n > FLOOD_MAX ? FLOOD_MAX : n;
  size_t len;
  char *cmds = flood_cmds(n, &len);
  th_write_all(flood, cmds, len);
  free(cmds);
  size_t want_len, have = 0;
  char *want = flood_replies(n, &want_len);
  char *got = malloc(want_len);
  ck_assert_ptr_nonnull(got);
  uint64_t t0 = th_now_ms(); /* the flood runs: its first KEYS answered */
  while (keys_answered(flood, got, &have, want_len) == 0 &&
         th_now_ms() - t0 < 120000)
    th_sleep_ms(1);
  int within = 0, sent = 0;
  for (; sent < PINGS && have < want_len; sent++) {
    int before = keys_answered(flood, got, &have, want_len);
    th_write_all(ping, "*1\r\n$4\r\nPING\r\n", 14);
    char pong[8];
    read_line(ping, pong, sizeof pong);
    ck_assert_str_eq(pong, "+PONG");
    within += keys_answered(flood, got, &have, want_len) == before;
  }
  fprintf(stderr,
          "%s: KEYS over %d keys: %llu ms; %d of %d PINGs answered before "
          "another KEYS (flood of %d)\n",
          th_transport_name(), KEYS_IN_STEPS, (unsigned long long)one, within,
          sent, n);
  if (have < want_len)
    read_exact(flood, got + have, want_len - have);
  ck_assert_int_eq(memcmp(got, want, want_len), 0); /* all, in order */
  free(got);
  free(want);
  ck_assert_int_eq(sent, PINGS);
  ck_assert_int_ge(within, PINGS / 2);
  close(ping);
  close(flood);
  kv_process_stop(&s);
}
END_TEST

/* One weft RPC request (docs/protocol.md: a 20-byte header, then the
 * arguments as varint count and varint-length strings) for command `cmd`
 * with `arg` (NULL: none; under 128 bytes) at `buf`; returns its bytes. */
static size_t rpc_request(uint8_t *buf, uint16_t cmd, uint64_t id,
                          const char *arg) {
  size_t alen = arg != NULL ? strlen(arg) : 0;
  size_t plen = arg != NULL ? 2 + alen : 1;
  memset(buf, 0, 20);
  buf[0] = 1; /* version */
  buf[1] = 1; /* request */
  buf[2] = (uint8_t)(cmd >> 8);
  buf[3] = (uint8_t)cmd;
  for (int i = 0; i < 8; i++)
    buf[8 + i] = (uint8_t)(id >> (56 - 8 * i));
  for (int i = 0; i < 4; i++)
    buf[16 + i] = (uint8_t)(plen >> (24 - 8 * i));
  buf[20] = arg != NULL ? 1 : 0;
  if (arg != NULL) {
    buf[21] = (uint8_t)alen;
    memcpy(buf + 22, arg, alen);
  }
  return 20 + plen;
}

/* The whole RPC frames among the first `len` bytes of `buf`. */
static int rpc_frames(const uint8_t *buf, size_t len) {
  int k = 0;
  for (size_t off = 0; off + 20 <= len; k++) {
    size_t plen = (size_t)buf[off + 16] << 24 | (size_t)buf[off + 17] << 16 |
                  (size_t)buf[off + 18] << 8 | buf[off + 19];
    if (off + 20 + plen > len)
      break;
    off += 20 + plen;
  }
  return k;
}

/* Reads until `fd` has brought `n` whole RPC frames into `buf` (`*have`
 * bytes of it, up to `cap`). */
static void rpc_read_frames(int fd, uint8_t *buf, size_t *have, size_t cap,
                            int n) {
  while (rpc_frames(buf, *have) < n) {
    ck_assert_uint_lt(*have, cap);
    ssize_t r = recv(fd, buf + *have, cap - *have, 0);
    ck_assert_int_gt(r, 0);
    *have += (size_t)r;
  }
}

/* The RPC port has RESP's budget per turn: a client pipelines KEYS
 * requests over the store in one write, another sends a PING; before,
 * the PING waited for every request of the read (they ran in one go), now
 * it is answered while the KEYS are still being answered. On order, not
 * time, as the RESP test. */
START_TEST(kv_fairness_rpc_ping_answered_during_pipelined_keys) {
  kv_process s = kv_process_start("kv.rpc_listen=127.0.0.1:0");
  int resp = connect_to(s.port);
  fill(resp);
  uint64_t one = keys_ms(resp);
  int n = (int)(FLOOD_MS / one);
  n = n < FLOOD_MIN ? FLOOD_MIN : n > FLOOD_MAX ? FLOOD_MAX : n;
  int ping = connect_to(s.rpc_port); /* the server's one loop */
  int flood = connect_to(s.rpc_port);
  size_t cap = (size_t)n * 32, len = 0;
  uint8_t *cmds = malloc(cap);
  ck_assert_ptr_nonnull(cmds);
  for (int i = 0; i < n; i++)
    len += rpc_request(cmds + len, KV_CMD_KEYS, (uint64_t)i + 1, "nomatch*");
  th_write_all(flood, cmds, len);
  th_sleep_ms((unsigned)(10 * one < 200 ? 10 * one : 200));
  uint8_t req[32], pong[64];
  size_t pong_len = 0;
  th_write_all(ping, req, rpc_request(req, KV_CMD_PING, 1, NULL));
  rpc_read_frames(ping, pong, &pong_len, sizeof pong, 1);
  size_t have = read_ready(flood, (char *)cmds, 0, cap);
  int before = rpc_frames(cmds, have);
  fprintf(stderr,
          "%s: RPC: PONG with %d of the flood's %d KEYS answered (one KEYS "
          "%llu ms)\n",
          th_transport_name(), before, n, (unsigned long long)one);
  rpc_read_frames(flood, cmds, &have, cap, n);
  ck_assert_int_eq(rpc_frames(cmds, have), n);
  ck_assert_uint_eq(pong[1], 2); /* a response, not an error */
  ck_assert_int_lt(before, n);
  free(cmds);
  close(ping);
  close(flood);
  close(resp);
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
                  kv_fairness_ping_answered_within_a_keys,
                  kv_fairness_rpc_ping_answered_during_pipelined_keys,
                  kv_fairness_multi_refuses_a_third_keys, NULL);
}
