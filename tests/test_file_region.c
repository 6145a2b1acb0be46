/* SPDX-License-Identifier: Apache-2.0 */
/* File regions (weft/file_region.h) over the socket transports, one run
 * per transport (WEFT_TEST_TRANSPORT; tests/CMakeLists.txt registers this
 * file as test_file_region_tcp and test_file_region_uring): a weft server
 * writes regions of a temporary file to a plain kernel socket, which
 * checks every byte. On tcp the regions go out with sendfile(2) (the
 * process-wide counts say so); on uring, and wherever a handler that does
 * not take regions stands between, the pipeline reads them into buffers.
 *
 *   - a whole file, between two buffers, arrives byte-exact and in order,
 *     through the stats and idle handlers, which pass regions on;
 *   - a buffer before a small region leaves with it in one segment;
 *   - a region counts as pending bytes exactly as a buffer of its size;
 *   - a large file written in regions to a slow reader: the sends resume
 *     after the socket fills, writability toggles, pending bytes stay
 *     within one region plus the high watermark, every byte arrives;
 *   - a handler without .file_regions gets weft_bufs, never a region;
 *   - a file that shrinks under a queued region fails that write with
 *     WEFT_EIO and closes the channel with the reason in the log.
 */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_in */
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/transport_plugin.h>
#include <weft/weft.h>

/* The byte at offset `i` of the test files: not periodic at any power of
 * two, so a byte sent twice or skipped shows. */
static uint8_t pattern(uint64_t i) {
  return (uint8_t)((i * 7u) ^ (i >> 9) ^ (i >> 17));
}

/* A temporary file of `size` pattern bytes (unlinked: the descriptor is
 * all there is). Fails the test on error. */
static int pattern_file(size_t size) {
  char path[] = "/tmp/weft-file-region-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  uint8_t chunk[65536];
  for (size_t at = 0; at < size;) {
    size_t n = size - at < sizeof chunk ? size - at : sizeof chunk;
    for (size_t i = 0; i < n; i++)
      chunk[i] = pattern(at + i);
    th_write_all(fd, chunk, n);
    at += n;
  }
  return fd;
}

/* What the server does with its one channel. */
enum mode {
  WHOLE,   /* "head" buffer, the whole file as one region, "tail" buffer */
  PENDING, /* one region, counted before the flush */
  PUMP,    /* the file in REGION_BYTES regions as writability allows */
  BETWEEN, /* as WHOLE, through a handler that does not take regions */
  SHRINK,  /* the file shrinks under the region */
  SMALL,   /* "head" and a small file as one region, nothing after */
};

#define REGION_BYTES (256 * 1024)

typedef struct run {
  enum mode mode;
  int fd;                /* the file */
  uint64_t size;         /* its bytes */
  uint64_t off;          /* PUMP: the next region's offset */
  atomic_int status;     /* the last write's promise: 1 until it completes */
  atomic_int unwritable; /* writability_changed(false) seen */
  atomic_int writable;   /* writability_changed(true) seen */
  atomic_int regions_seen, bufs_seen; /* BETWEEN: what the handler got */
  atomic_bool direct;                 /* weft_ctx_file_region_direct */
  atomic_size_t pending_after_write;  /* PENDING: before the flush */
  atomic_bool writable_after_write;   /* PENDING: before the flush */
  atomic_size_t max_pending;          /* PUMP: the most seen */
} run;

static run R;

static void last_done(void *arg, int status) {
  weft_channel *ch = arg;
  atomic_store(&R.status, status);
  weft_channel_close(ch, WEFT_PROMISE_NONE);
}

static weft_file_region *region(uint64_t off, uint64_t count) {
  weft_file_region *r;
  ck_assert_int_eq(weft_file_region_new(&r, R.fd, off, count, 0), 0);
  return r;
}

static void write_text(weft_ctx *ctx, const char *s) {
  weft_ctx_write_bytes(ctx, s, strlen(s), WEFT_PROMISE_NONE);
}

/* PUMP: regions while the channel is writable; the last one's promise
 * closes the channel. */
static void pump(weft_ctx *ctx) {
  weft_channel *ch = weft_ctx_channel(ctx);
  while (R.off < R.size && weft_channel_is_writable(ch)) {
    uint64_t n = R.size - R.off < REGION_BYTES ? R.size - R.off : REGION_BYTES;
    bool last = R.off + n == R.size;
    R.off += n;
    weft_ctx_write(ctx, region(R.off - n, n),
                   last ? (weft_promise){last_done, ch} : WEFT_PROMISE_NONE);
    size_t p = weft_channel_pending_bytes(ch);
    if (p > atomic_load(&R.max_pending))
      atomic_store(&R.max_pending, p);
    weft_ctx_flush(ctx);
  }
}

static void srv_active(weft_ctx *ctx) {
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_promise done = {last_done, ch};
  atomic_store(&R.direct, weft_ctx_file_region_direct(ctx));
  switch (R.mode) {
  case WHOLE:
  case BETWEEN:
    write_text(ctx, "head");
    weft_ctx_write(ctx, region(0, R.size), WEFT_PROMISE_NONE);
    weft_ctx_write_bytes(ctx, "tail", 4, done);
    weft_ctx_flush(ctx);
    break;
  case SMALL:
    write_text(ctx, "head");
    weft_ctx_write(ctx, region(0, R.size), done);
    weft_ctx_flush(ctx);
    break;
  case PENDING:
    weft_ctx_write(ctx, region(0, R.size), done);
    atomic_store(&R.pending_after_write, weft_channel_pending_bytes(ch));
    atomic_store(&R.writable_after_write, weft_channel_is_writable(ch));
    weft_ctx_flush(ctx);
    break;
  case PUMP:
    pump(ctx);
    break;
  case SHRINK: {
    /* Where the region is queued as it is, it is sent at the flush: the
     * file shrinks after the write. Elsewhere it is read at the write:
     * before it. */
    bool direct = atomic_load(&R.direct);
    if (!direct)
      ck_assert_int_eq(ftruncate(R.fd, (off_t)(R.size / 2)), 0);
    weft_ctx_write(ctx, region(0, R.size), done);
    if (direct)
      ck_assert_int_eq(ftruncate(R.fd, (off_t)(R.size / 2)), 0);
    weft_ctx_flush(ctx);
    break;
  }
  }
  weft_ctx_fire_channel_active(ctx);
}

static void srv_writability(weft_ctx *ctx, bool writable) {
  atomic_fetch_add(writable ? &R.writable : &R.unwritable, 1);
  if (writable && R.mode == PUMP)
    pump(ctx);
  weft_ctx_fire_writability_changed(ctx, writable);
}

/* No exception_caught: the tail logs the reason and closes. */
static const weft_handler srv_handler = {.name = "regions",
                                         .channel_active = srv_active,
                                         .writability_changed =
                                             srv_writability};

/* BETWEEN: an outbound handler that does not take regions (no
 * .file_regions), counting what reaches it. */
static void between_write(weft_ctx *ctx, void *msg, weft_promise pr) {
  atomic_fetch_add(weft_msg_is(msg, &weft_file_region_type) ? &R.regions_seen
                                                            : &R.bufs_seen,
                   1);
  weft_ctx_write(ctx, msg, pr);
}

static const weft_handler between_handler = {.name = "between",
                                             .write = between_write};

static weft_stats whole_stats;

static void srv_init(weft_channel *ch, void *arg) {
  (void)arg;
  if (R.mode == BETWEEN)
    th_add_last(ch, "between", &between_handler, NULL);
  if (R.mode == WHOLE) { /* handlers that pass regions on */
    weft_pipeline *p = weft_channel_pipeline(ch);
    weft_idle_options idle = {.all_idle_ns = 60000000000ull};
    ck_assert_int_eq(weft_stats_add_last(p, "stats", &whole_stats), 0);
    ck_assert_int_eq(weft_idle_add_last(p, "idle", &idle), 0);
  }
  th_add_last(ch, "regions", &srv_handler, NULL);
}

/* Reads from `fd` until EOF (or an error or a 20 s stall), checking the
 * bytes against `want` (a prefix), then R.size bytes of the pattern, then
 * "tail" (WHOLE and BETWEEN write it after the file); a slow reader
 * sleeps 1 ms per 4 KiB read for its first `slow` bytes. Returns the
 * bytes read; `*bad` gets the offset of the first wrong byte, or -1. */
static uint64_t read_all(int fd, const char *want, uint64_t slow,
                         int64_t *bad) {
  uint8_t buf[65536];
  uint64_t got = 0, plen = strlen(want);
  *bad = -1;
  for (;;) {
    size_t ask = got < slow ? 4096 : sizeof buf;
    ssize_t n = recv(fd, buf, ask, 0);
    if (n <= 0)
      return got;
    for (ssize_t i = 0; i < n && *bad < 0; i++) {
      uint64_t at = got + (uint64_t)i;
      uint8_t expect = at < plen ? (uint8_t)want[at]
                       : at - plen < R.size
                           ? pattern(at - plen)
                           : (uint8_t) "tail"[(at - plen - R.size) % 4];
      if (buf[i] != expect)
        *bad = (int64_t)at;
    }
    got += (uint64_t)n;
    if (got < slow)
      usleep(1000);
  }
}

typedef struct served {
  uint64_t got;       /* bytes the client read */
  int64_t bad;        /* the first wrong byte's offset, or -1 */
  uint32_t data_segs; /* segments with data the client's socket took */
  weft_file_region_stats before, after;
} served;

/* Serves one connection in `mode` from a file of `size` bytes to a plain
 * socket (receive buffer `rcvbuf` bytes, 0 = the kernel's) that reads
 * `slow` bytes slowly; returns what the client saw once the server closed
 * and its loop group joined. */
static served serve(enum mode mode, uint64_t size, int rcvbuf, uint64_t slow,
                    const char *prefix) {
  memset(&R, 0, sizeof R);
  R.mode = mode;
  R.size = size;
  R.fd = pattern_file(size);
  atomic_store(&R.status, 1);
  served s;
  weft_file_region_stats_get(&s.before);
  weft_loop_group *g = th_group_start("region", 1);
  char uri[128], listen[96];
  snprintf(listen, sizeof listen, "%s://%s:0", th_transport_name(),
           th_test_host());
  weft_server *srv = th_server_bind(g, listen, srv_init, NULL, uri, sizeof uri);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  if (rcvbuf > 0) /* before connect: the window is agreed at the handshake */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct timeval tv = {.tv_sec = 20};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons(th_uri_port(uri)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
  s.got = read_all(fd, prefix, slow, &s.bad);
  struct tcp_info ti = {0};
  socklen_t tl = sizeof ti;
  ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl), 0);
  s.data_segs = ti.tcpi_data_segs_in;
  close(fd);
  ASSERT_EVENTUALLY(atomic_load(&R.status) != 1, 20000);
  weft_server_close(srv);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  close(R.fd);
  weft_file_region_stats_get(&s.after);
  return s;
}

/* On tcp the region's bytes went out with sendfile; elsewhere they were
 * read into buffers. `bytes` of regions in all. */
static void check_path(const served *s, uint64_t bytes, bool direct) {
  uint64_t sent = s->after.sent_bytes - s->before.sent_bytes;
  uint64_t read = s->after.read_bytes - s->before.read_bytes;
  if (direct) {
    ck_assert_uint_eq(sent, bytes);
    ck_assert_uint_eq(read, 0);
  } else {
    ck_assert_uint_eq(sent, 0);
    ck_assert_uint_eq(read, bytes);
  }
}

/* The write succeeded and the client read `bytes`, every one right. */
static void expect_served(const served *s, uint64_t bytes) {
  ck_assert_int_eq(atomic_load(&R.status), 0);
  ck_assert_int_eq(s->bad, -1);
  ck_assert_uint_eq(s->got, bytes);
}

/* Whether this transport sends regions from the file (tcp). */
static bool transport_sends_files(void) {
  const weft_transport_ops *ops =
      weft_transport_find(th_transport_name(), NULL, 0);
  return ops != NULL && (ops->caps & WEFT_TRANSPORT_CAP_FILE_REGION);
}

START_TEST(file_region_whole_file_arrives_in_order) {
  const uint64_t size = 3 * 1000 * 1000 + 7;
  served s = serve(WHOLE, size, 0, 0, "head");
  ck_assert_int_eq(atomic_load(&R.status), 0);
  ck_assert_int_eq(s.bad, -1);
  /* "head", the file, "tail": the tail's bytes are checked here. */
  ck_assert_uint_eq(s.got, 4 + size + 4);
  ck_assert(atomic_load(&R.direct) == transport_sends_files());
  check_path(&s, size, transport_sends_files());
  /* The stats handler saw the region's bytes (and the two buffers). */
  weft_stats_snapshot st;
  weft_stats_get(&whole_stats, &st);
  ck_assert_uint_eq(st.bytes_out, 4 + size + 4);
  ck_assert_uint_eq(st.msgs_out, 3);
}
END_TEST

/* A head before a small file leaves with it in one segment: tcp sends
 * the head with MSG_MORE since a region follows (without it, head and
 * body are two segments, and with Nagle on the body waits for the head's
 * ACK); uring gathers the two buffers it gets into one sendmsg. */
START_TEST(file_region_follows_its_head_in_one_segment) {
  const uint64_t size = 1000;
  served s = serve(SMALL, size, 0, 0, "head");
  expect_served(&s, 4 + size);
  ck_assert_uint_eq(s.data_segs, 1);
  check_path(&s, size, transport_sends_files());
}
END_TEST

START_TEST(file_region_counts_as_pending_bytes) {
  const uint64_t size = 100000; /* above the 64 KiB high watermark */
  served s = serve(PENDING, size, 0, 0, "");
  expect_served(&s, size);
  ck_assert_uint_eq(atomic_load(&R.pending_after_write), size);
  ck_assert(!atomic_load(&R.writable_after_write));
  ck_assert_int_ge(atomic_load(&R.unwritable), 1);
}
END_TEST

START_TEST(file_region_slow_reader_resumes) {
  /* A 4 KiB receive buffer read 4 KiB a millisecond for the first 2 MiB:
   * the server's socket fills and its sends wait for EPOLLOUT (tcp) or
   * the ring's completions (uring) many times. */
  const uint64_t size = 12 * 1024 * 1024 + 5;
  served s = serve(PUMP, size, 4096, 2 * 1024 * 1024, "");
  expect_served(&s, size);
  ck_assert_int_ge(atomic_load(&R.unwritable), 2);
  ck_assert_int_ge(atomic_load(&R.writable), 2);
  /* Flow control held: one region above the high watermark at most. */
  ck_assert_uint_le(atomic_load(&R.max_pending),
                    REGION_BYTES + WEFT_WRITE_HIGH_WATERMARK_DEFAULT);
  check_path(&s, size, transport_sends_files());
}
END_TEST

START_TEST(file_region_handler_between_gets_buffers) {
  const uint64_t size = 300000;
  served s = serve(BETWEEN, size, 0, 0, "head");
  expect_served(&s, 4 + size + 4);
  ck_assert(!atomic_load(&R.direct));
  ck_assert_int_eq(atomic_load(&R.regions_seen), 0);
  /* "head", five 64 KiB reads of the region, "tail" */
  ck_assert_int_eq(atomic_load(&R.bufs_seen), 1 + 5 + 1);
  check_path(&s, size, false);
}
END_TEST

START_TEST(file_region_shrinking_file_closes_channel) {
  const uint64_t size = 1000000;
  th_log_capture_start();
  served s = serve(SHRINK, size, 0, 0, "");
  th_log_capture_stop();
  ck_assert_int_eq(atomic_load(&R.status), WEFT_EIO);
  ck_assert_int_eq(s.bad, -1);
  ck_assert_uint_le(s.got, size / 2); /* what the file still held, or less */
  ck_assert_msg(th_log_count("the file ended early") == 1 &&
                    th_log_count("closing the channel") >= 1,
                "log: %s", th_log_text());
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  const weft_transport_ops *ops =
      weft_transport_find(th_transport_name(), NULL, 0);
  if (ops == NULL || !(ops->caps & WEFT_TRANSPORT_CAP_TCP))
    th_skip_program("file regions are tested against plain sockets: "
                    "transport %s is not TCP on the wire",
                    th_transport_name());
  return th_suite(
      "file_region", "socket", 120, file_region_whole_file_arrives_in_order,
      file_region_follows_its_head_in_one_segment,
      file_region_counts_as_pending_bytes, file_region_slow_reader_resumes,
      file_region_handler_between_gets_buffers,
      file_region_shrinking_file_closes_channel, NULL);
}
