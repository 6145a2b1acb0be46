/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server's limits on what a connection may make it hold
 * (samples/kv/conn_limits.h, README "Limits"), measured from outside: the
 * server runs as its own process (kv_process.h) and its resident memory,
 * INFO and log are read while clients misbehave.
 *
 *  - before AUTH: Redis' 10 arguments of 16 KiB, refused before anything
 *    of the claimed size is allocated (RESP, inline and RPC), a small
 *    output limit, and the authentication deadline;
 *  - partial commands: the server-wide bound and the per-connection limit,
 *    their memory given back to the system once released, the timeout of
 *    a command that does not complete, INFO's figures;
 *  - the password out of the server's command line, RESTORE's BUSYKEY. */
#include "harness.h"
#include "kv_process.h"

#include <weft/embedded.h>

#include "session.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MIB (1024L * 1024L)
#define BIG (1024 * 1024) /* the bulk length the hostile clients announce */

static const char pass_opt[] = "kv.requirepass=s3cret";

/* Reads what arrives on `fd` within `ms` (until the peer closes or `cap`
 * bytes), NUL-terminated; returns the bytes read. */
static size_t read_for(int fd, char *buf, size_t cap, int ms) {
  size_t got = 0;
  uint64_t end = th_now_ms() + (uint64_t)ms;
  while (got + 1 < cap && th_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      continue;
    ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  buf[got] = '\0';
  return got;
}

/* True once the peer has closed `fd` (within `ms`), reading and dropping
 * what comes before. */
static bool closed_within(int fd, int ms) {
  char sink[4096];
  uint64_t end = th_now_ms() + (uint64_t)ms;
  while (th_now_ms() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      continue;
    ssize_t n = recv(fd, sink, sizeof sink, 0);
    if (n <= 0)
      return true;
  }
  return false;
}

/* Sends `len` bytes, giving up (quietly) when the peer stops taking them
 * for a second or has closed: hostile clients do not care. */
static void send_some(int fd, const void *p, size_t len) {
  struct timeval tv = {.tv_sec = 1};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const char *c = p;
  while (len > 0) {
    ssize_t n = send(fd, c, len, MSG_NOSIGNAL);
    if (n <= 0)
      return;
    c += n;
    len -= (size_t)n;
  }
}

/* INFO's integer field `name`, asked on a new connection. */
static long info_field(int port, const char *name) {
  int fd = th_connect_loopback(port);
  th_write_all(fd, "INFO memory\r\n", 13);
  static char buf[8192];
  long v = -1;
  for (uint64_t end = th_now_ms() + 10000; v < 0 && th_now_ms() < end;) {
    read_for(fd, buf, sizeof buf, 200);
    const char *at = strstr(buf, name);
    if (at != NULL)
      v = atol(at + strlen(name) + 1);
  }
  close(fd);
  ck_assert_msg(v >= 0, "no %s in INFO", name);
  return v;
}

/* The highest RSS of `pid` over `ms`. */
static long rss_peak(pid_t pid, int ms) {
  long peak = 0;
  for (uint64_t end = th_now_ms() + (uint64_t)ms; th_now_ms() < end;) {
    long r = th_rss_bytes(pid);
    peak = r > peak ? r : peak;
    th_sleep_ms(20);
  }
  return peak;
}

/* `n` connections each sending `head` and then `body` bytes of filler
 * (never the end of the command); they are left open in `fds`. */
static void hold_partials(int port, int *fds, int n, const char *head,
                          size_t head_len, size_t body) {
  char *filler = malloc(body);
  ck_assert_ptr_nonnull(filler);
  memset(filler, 'v', body);
  for (int i = 0; i < n; i++) {
    fds[i] = th_connect_loopback(port);
    send_some(fds[i], head, head_len);
    send_some(fds[i], filler, body);
  }
  free(filler);
}

/* hold_partials of a SET k announcing a 1 MiB value, `body` bytes of it
 * sent. */
static void hold_partial_sets(int port, int *fds, int n, size_t body) {
  char head[64];
  int hl =
      snprintf(head, sizeof head, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", BIG);
  hold_partials(port, fds, n, head, (size_t)hl, body);
}

static void close_all(int *fds, int n) {
  for (int i = 0; i < n; i++)
    close(fds[i]);
}

/* ---- before AUTH ---- */

/* 100 unauthenticated clients each announce a 1 MiB argument and send all
 * but its last byte. Before the limits each held 1 MiB of the server's
 * memory for as long as it stayed (the cumulation sized for the announced
 * length): +100 MiB here. Now each is refused at the length, with Redis'
 * text, before anything of that size exists. */
START_TEST(kv_limits_unauthenticated_large_argument_refused_unallocated) {
  enum { CLIENTS = 100 };
  kv_process s = kv_process_start(pass_opt);
  long base = th_rss_bytes(s.pid);
  char head[64];
  int hl = snprintf(head, sizeof head, "*2\r\n$3\r\nGET\r\n$%d\r\n", BIG);
  int fds[CLIENTS];
  hold_partials(s.port, fds, CLIENTS, head, (size_t)hl, BIG - 1);
  long peak = rss_peak(s.pid, 500);
  fprintf(stderr,
          "unauthenticated 1 MiB arguments: base %ld KiB, peak %ld "
          "KiB (+%ld KiB)\n",
          base / 1024, peak / 1024, (peak - base) / 1024);
  char reply[256];
  read_for(fds[0], reply, sizeof reply, 5000);
  ck_assert_str_eq(reply, "-ERR Protocol error: unauthenticated bulk length"
                          "\r\n");
  ck_assert_msg(peak - base <= 32 * MIB,
                "RSS grew by %ld KiB with %d unauthenticated clients",
                (peak - base) / 1024, CLIENTS);
  close_all(fds, CLIENTS);
  kv_process_stop(&s);
}
END_TEST

/* The other shapes before AUTH: more than 10 arguments, an inline line
 * over 16 KiB; and an AUTH in the same read as a larger command lifts the
 * limits for it. */
START_TEST(kv_limits_unauthenticated_shapes_and_auth_lifting_them) {
  kv_process s = kv_process_start(pass_opt);
  static const struct {
    const char *wire;
    const char *reply;
  } cases[] = {
      {"*11\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
      {"GET a b c d e f g h i j k\r\n",
       "-ERR Protocol error: too many arguments in inline request (maximum "
       "10)\r\n"},
  };
  char reply[256];
  for (size_t c = 0; c < 2; c++) {
    int fd = th_connect_loopback(s.port);
    th_write_all(fd, cases[c].wire, strlen(cases[c].wire));
    read_for(fd, reply, sizeof reply, 5000);
    ck_assert_str_eq(reply, cases[c].reply);
    close(fd);
  }
  static char line[20000];
  memset(line, 'a', sizeof line);
  int fd = th_connect_loopback(s.port);
  send_some(fd, line, sizeof line);
  read_for(fd, reply, sizeof reply, 5000);
  ck_assert_str_eq(reply, "-ERR Protocol error: too big inline request "
                          "(maximum 16384 bytes)\r\n");
  close(fd);
  /* AUTH, then a 20000-byte value, in one send. */
  static char cmd[20200];
  int n = snprintf(cmd, sizeof cmd,
                   "AUTH s3cret\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n");
  memset(cmd + n, 'v', 20000);
  memcpy(cmd + n + 20000, "\r\n", 2);
  fd = th_connect_loopback(s.port);
  reply[0] = '\0';
  th_write_all(fd, cmd, (size_t)n + 20002);
  for (uint64_t end = th_now_ms() + 5000;
       strlen(reply) < 10 && th_now_ms() < end;)
    read_for(fd, reply + strlen(reply), sizeof reply - strlen(reply), 100);
  ck_assert_str_eq(reply, "+OK\r\n+OK\r\n");
  close(fd);
  kv_process_stop(&s);
}
END_TEST

/* The same over weft RPC: a header announcing a 1 MiB payload from a
 * client that has not authenticated is refused at the header. */
START_TEST(kv_limits_rpc_unauthenticated_payload_refused_unallocated) {
  enum { CLIENTS = 100 };
  kv_process s = kv_process_start("kv.requirepass=s3cret "
                                  "kv.rpc_listen=127.0.0.1:0");
  long base = th_rss_bytes(s.pid);
  uint8_t hdr[20] = {1, 1, 0, 1}; /* version 1, request, method 1 */
  uint32_t len = htonl(BIG);
  memcpy(hdr + 16, &len, 4);
  int fds[CLIENTS];
  hold_partials(s.rpc_port, fds, CLIENTS, (const char *)hdr, sizeof hdr,
                BIG - 1);
  long peak = rss_peak(s.pid, 500);
  fprintf(stderr, "RPC unauthenticated 1 MiB payloads: +%ld KiB\n",
          (peak - base) / 1024);
  ck_assert_msg(peak - base <= 32 * MIB,
                "RSS grew by %ld KiB with %d unauthenticated RPC clients",
                (peak - base) / 1024, CLIENTS);
  ck_assert(closed_within(fds[0], 10000));
  close_all(fds, CLIENTS);
  kv_process_stop(&s);
}
END_TEST

/* A client that does not authenticate in time is closed, with a line;
 * one that did stays. */
START_TEST(kv_limits_auth_deadline_closes_the_unauthenticated) {
  kv_process s = kv_process_start("kv.requirepass=s3cret "
                                  "kv.auth_timeout_ms=300");
  int idle = th_connect_loopback(s.port);
  int good = th_connect_loopback(s.port);
  th_write_all(good, "AUTH s3cret\r\n", 13);
  char reply[64];
  read_for(good, reply, sizeof reply, 2000);
  ck_assert_str_eq(reply, "+OK\r\n");
  ck_assert(closed_within(idle, 10000));
  th_sleep_ms(400);
  th_write_all(good, "PING\r\n", 6);
  read_for(good, reply, sizeof reply, 2000);
  ck_assert_str_eq(reply, "+PONG\r\n");
  ck_assert_int_eq(kv_process_log_count(&s, "did not authenticate within "
                                            "300 ms ([kv] auth_timeout_ms)"),
                   1);
  close(idle);
  close(good);
  kv_process_stop(&s);
}
END_TEST

/* Before AUTH a client that sends and never reads its NOAUTH replies is
 * closed at the small output limit (64 KiB), not [server] output_limit
 * (here 64 MiB): flow control is off, so only the limit holds it. */
START_TEST(kv_limits_unauthenticated_output_limited) {
  kv_process s = kv_process_start("kv.requirepass=s3cret "
                                  "server.flow_control=false");
  int fd = th_connect_loopback(s.port);
  int rcvbuf = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  static char pings[6 * 10000];
  for (int i = 0; i < 10000; i++)
    memcpy(pings + 6 * i, "PING\r\n", 6);
  /* 50 rounds: 500000 NOAUTH replies, 17 MB, far below 64 MiB. */
  for (int round = 0; round < 50; round++)
    send_some(fd, pings, sizeof pings);
  bool seen = false;
  for (uint64_t end = th_now_ms() + 10000; !seen && th_now_ms() < end;
       th_sleep_ms(50))
    seen = kv_process_log_count(&s, "output limit of 65536 bytes exceeded") > 0;
  ck_assert_msg(seen, "no output limit line in the log");
  close(fd);
  kv_process_stop(&s);
}
END_TEST

/* ---- partial commands ---- */

/* Connections holding all but 100 bytes of a 1 MiB SET: with [kv]
 * query_buffers_max = 48 MiB, the server's total stays under it (INFO
 * says so) and the connections past it are closed. */
START_TEST(kv_limits_partial_commands_bounded_server_wide) {
  enum { CLIENTS = 80 };
  kv_process s = kv_process_start("kv.query_buffers_max=50331648");
  long base = th_rss_bytes(s.pid);
  int fds[CLIENTS];
  hold_partial_sets(s.port, fds, CLIENTS, BIG - 100);
  long peak = rss_peak(s.pid, 500);
  long held = info_field(s.port, "weft_query_buffers");
  long closes = info_field(s.port, "weft_query_buffer_closes");
  fprintf(stderr,
          "%d partial 1 MiB SETs, bound 48 MiB: +%ld KiB, held %ld, "
          "%ld closed\n",
          CLIENTS, (peak - base) / 1024, held, closes);
  ck_assert_int_le(held, 48 * MIB);
  ck_assert_int_ge(closes, CLIENTS - 48);
  ck_assert_msg(peak - base <= 64 * MIB, "RSS grew by %ld KiB",
                (peak - base) / 1024);
  ck_assert_int_ge(kv_process_log_count(&s, "over [kv] query_buffers_max"), 1);
  close_all(fds, CLIENTS);
  kv_process_stop(&s);
}
END_TEST

/* Two waves of 60 partial 1 MiB SETs, without the server-wide bound: once
 * their clients are gone the memory is the system's again. From malloc it
 * was not (glibc keeps it: RSS stayed at about the wave's size). */
START_TEST(kv_limits_partial_command_memory_given_back) {
  enum { CLIENTS = 60 };
  kv_process s = kv_process_start("kv.query_buffers_max=0");
  long base = th_rss_bytes(s.pid);
  int fds[CLIENTS];
  for (int wave = 0; wave < 2; wave++) {
    hold_partial_sets(s.port, fds, CLIENTS, BIG - 100);
    /* The bytes may still sit in the sockets when the last send returns:
     * wait for the server to have read them, not for a time. */
    long held = 0;
    for (uint64_t end = th_now_ms() + 10000;
         (held = info_field(s.port, "weft_query_buffers")) <
             CLIENTS * (long)BIG / 2 &&
         th_now_ms() < end;)
      th_sleep_ms(50);
    ck_assert_int_ge(held, CLIENTS * (long)BIG / 2);
    close_all(fds, CLIENTS);
    for (uint64_t end = th_now_ms() + 10000;
         info_field(s.port, "weft_query_buffers") != 0 && th_now_ms() < end;)
      th_sleep_ms(50);
  }
  long after = th_rss_bytes(s.pid);
  fprintf(stderr,
          "after two waves of %d partial 1 MiB SETs: base %ld KiB, "
          "now %ld KiB\n",
          CLIENTS, base / 1024, after / 1024);
  ck_assert_msg(after - base <= 16 * MIB,
                "RSS %ld KiB above the base after the clients left",
                (after - base) / 1024);
  kv_process_stop(&s);
}
END_TEST

/* [kv] client_query_buffer_limit closes a connection whose partial input
 * passes it. */
START_TEST(kv_limits_client_query_buffer_limit) {
  kv_process s = kv_process_start("kv.client_query_buffer_limit=200000");
  int fd;
  hold_partial_sets(s.port, &fd, 1, 300000);
  ck_assert(closed_within(fd, 10000));
  ck_assert_int_eq(kv_process_log_count(&s, "over [kv] "
                                            "client_query_buffer_limit "
                                            "(200000 bytes)"),
                   1);
  close(fd);
  kv_process_stop(&s);
}
END_TEST

/* A command that does not complete within [kv] command_timeout_ms closes
 * its connection, however it trickles; complete ones are not touched. */
START_TEST(kv_limits_incomplete_command_times_out) {
  kv_process s = kv_process_start("kv.command_timeout_ms=400");
  int fd = th_connect_loopback(s.port);
  int ok = th_connect_loopback(s.port);
  static const char part[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\nabc";
  th_write_all(fd, part, sizeof part - 1);
  bool closed = false;
  for (int i = 0; i < 100 && !closed; i++) { /* a byte each 100 ms */
    send_some(fd, "x", 1);
    closed = closed_within(fd, 100);
  }
  ck_assert_msg(closed, "a trickling command was not timed out");
  th_sleep_ms(500);
  th_write_all(ok, "PING\r\n", 6);
  char reply[64];
  read_for(ok, reply, sizeof reply, 2000);
  ck_assert_str_eq(reply, "+PONG\r\n");
  ck_assert_int_eq(kv_process_log_count(&s, "(timeout 400 ms)"), 1);
  close(fd);
  close(ok);
  kv_process_stop(&s);
}
END_TEST

/* ---- passwords, RESTORE ---- */

/* -o kv.requirepass=... does not stay readable in the process's command
 * line (ps, /proc/PID/cmdline). */
START_TEST(kv_limits_password_not_in_command_line) {
  kv_process s = kv_process_start("kv.requirepass=VerySecret42 "
                                  "kv.user=alice kv.user_password=Other99");
  char path[64], cmdline[4096];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)s.pid);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(cmdline, 1, sizeof cmdline - 1, f);
  fclose(f);
  ck_assert_ptr_null(memmem(cmdline, n, "VerySecret42", 12));
  ck_assert_ptr_null(memmem(cmdline, n, "Other99", 7));
  ck_assert_ptr_nonnull(memmem(cmdline, n, "kv.user=alice", 13));
  int fd = th_connect_loopback(s.port);
  th_write_all(fd, "AUTH VerySecret42\r\n", 19);
  char reply[64];
  read_for(fd, reply, sizeof reply, 2000);
  ck_assert_str_eq(reply, "+OK\r\n");
  close(fd);
  kv_process_stop(&s);
}
END_TEST

/* RESTORE onto an existing key: Redis' BUSYKEY, before the payload is
 * looked at (here one from elsewhere, which weft cannot read: it got the
 * checksum error); with REPLACE and weft's own payload it replaces. */
START_TEST(kv_limits_restore_existing_key_busykey) {
  kv_process s = kv_process_start("");
  int fd = th_connect_loopback(s.port);
  th_write_all(fd, "SET k v1\r\nDUMP k\r\n", 18);
  static char buf[4096];
  size_t got = 0;
  const char *dump = NULL;
  for (uint64_t end = th_now_ms() + 5000; dump == NULL && th_now_ms() < end;) {
    got += read_for(fd, buf + got, sizeof buf - got, 100);
    const char *at = strstr(buf, "+OK\r\n$");
    char *nl = at != NULL ? strstr(at + 6, "\r\n") : NULL;
    if (nl != NULL && (size_t)(nl + 2 - buf) + (size_t)atol(at + 6) + 2 <= got)
      dump = at + 6;
  }
  ck_assert_ptr_nonnull(dump);
  long dlen = atol(dump);
  const char *payload = strstr(dump, "\r\n") + 2;
  static const char foreign[] =
      "*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n0\r\n$12\r\n\x00\x03"
      "abc\x09\x00"
      "12345\r\n";
  th_write_all(fd, foreign, sizeof foreign - 1);
  char reply[128];
  read_for(fd, reply, sizeof reply, 2000);
  ck_assert_str_eq(reply, "-BUSYKEY Target key name already exists.\r\n");
  static char cmd[4096];
  for (int replace = 0; replace < 2; replace++) {
    int n = snprintf(cmd, sizeof cmd,
                     "*%d\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$1\r\n0\r\n$%ld\r\n",
                     replace ? 5 : 4, dlen);
    memcpy(cmd + n, payload, (size_t)dlen);
    n += (int)dlen;
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, "\r\n%s",
                  replace ? "$7\r\nREPLACE\r\n" : "");
    th_write_all(fd, cmd, (size_t)n);
    read_for(fd, reply, sizeof reply, 2000);
    ck_assert_str_eq(reply, replace ? "+OK\r\n"
                                    : "-BUSYKEY Target key name already "
                                      "exists.\r\n");
  }
  close(fd);
  kv_process_stop(&s);
}
END_TEST

/* A reply writer that keeps the last simple string or error. */
static char last_reply[256];
static void keep_text(void *w, const char *s) {
  (void)w;
  snprintf(last_reply, sizeof last_reply, "%s", s);
}
static void ignore_int(void *w, int64_t v) { (void)w, (void)v; }
static void ignore_bulk(void *w, const void *d, size_t n, kv_blob *b) {
  (void)w, (void)d, (void)n, (void)b;
}
static void ignore_null(void *w) { (void)w; }
static void ignore_count(void *w, size_t n) { (void)w, (void)n; }
static void ignore_text(void *w, const void *d, size_t n) {
  (void)w, (void)d, (void)n;
}
static const kv_reply_ops keep_ops = {keep_text,    keep_text,   ignore_int,
                                      ignore_bulk,  ignore_null, ignore_count,
                                      ignore_count, ignore_text};

/* AUTH and HELLO AUTH wipe the password's bytes where they read them (the
 * received buffer), right or wrong, so a pool block reused later does not
 * hold it. */
START_TEST(kv_limits_auth_wipes_the_password_it_read) {
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, NULL, NULL), 0);
  kv_shared sh = {0};
  char err[128];
  ck_assert_int_eq(
      kv_auth_init(&sh.auth, "s3cret", NULL, NULL, err, sizeof err), 0);
  kv_session sess;
  kv_session_init(&sess, &sh, weft_embedded_channel(e), false);
  static const char *const words[] = {"s3cret", "wrong!"};
  for (int w = 0; w < 2; w++) {
    char pass[8];
    memcpy(pass, words[w], 6);
    kv_arg argv[] = {{(const uint8_t *)pass, 6}};
    kv_exec(&sess, KV_CMD_AUTH, 1, argv, &keep_ops, NULL);
    ck_assert_str_eq(last_reply, w == 0 ? "OK" : KV_WRONGPASS_TEXT);
    ck_assert_mem_eq(pass, "\0\0\0\0\0\0", 6);
  }
  char hello[] = "3AUTHdefaults3cret";
  kv_arg hargv[] = {{(const uint8_t *)hello, 1},
                    {(const uint8_t *)hello + 1, 4},
                    {(const uint8_t *)hello + 5, 7},
                    {(const uint8_t *)hello + 12, 6}};
  kv_exec(&sess, KV_CMD_HELLO, 4, hargv, &keep_ops, NULL);
  ck_assert_mem_eq(hello + 12, "\0\0\0\0\0\0", 6);
  ck_assert_mem_eq(hello, "3AUTHdefault", 12);
  kv_session_fini(&sess);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("kv_limits", "core", 240,
                  kv_limits_unauthenticated_large_argument_refused_unallocated,
                  kv_limits_unauthenticated_shapes_and_auth_lifting_them,
                  kv_limits_rpc_unauthenticated_payload_refused_unallocated,
                  kv_limits_auth_deadline_closes_the_unauthenticated,
                  kv_limits_unauthenticated_output_limited,
                  kv_limits_partial_commands_bounded_server_wide,
                  kv_limits_partial_command_memory_given_back,
                  kv_limits_client_query_buffer_limit,
                  kv_limits_incomplete_command_times_out,
                  kv_limits_password_not_in_command_line,
                  kv_limits_restore_existing_key_busykey,
                  kv_limits_auth_wipes_the_password_it_read, NULL);
}
