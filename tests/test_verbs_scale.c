/* SPDX-License-Identifier: Apache-2.0 */
/* Many connections on one verbs loop, inside the Soft-RoCE VM
 * (scripts/test-verbs-vm.sh); on a host without an RDMA device the program
 * skips (th_require_transport).
 *
 * A thousand connections: a server in a child process with one loop, and
 * as many clients on one loop of this process, all echo a message, stay
 * idle, then echo again; the server's RSS per connection (and where it
 * is), the kernel's memory per connection and the idle CPU of both
 * processes are printed, and the idle server must use under 10% of a
 * core. 1000 connections, times WEFT_TEST_SCALE (the VM script passes 0.25
 * for a sanitizer build, so 250 there). The server exits 0 only if its
 * loop stopped without a leak.
 *
 * One slow consumer: a client that stops reading (auto-read off) while it
 * sends, so its server channel's echoes pile up until flow control pauses
 * that channel, and a server channel with auto-read off holding its
 * credits, share the server's loop with 20 clients echoing at full speed:
 * the 20 must not stall. Afterwards both slow channels get everything,
 * in order.
 */
#include "harness_scale.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

/* A started group of one loop. */
static weft_loop_group *one_loop(const char *name) {
  return th_loops_start(name, 1, false);
}

/* ---- what /proc says (the rest: harness.h) ---- */

/* Where `pid`'s resident memory is, from /proc/<pid>/smaps, in KiB: the
 * device's queue rings mapped from /dev/infiniband (`rings`), anonymous
 * memory (`anon`; its largest mapping in `largest`: the receive slab) and
 * the rest (`files`: code and data of the program and its libraries). */
typedef struct rss_parts {
  long rings, anon, largest, files;
} rss_parts;

static rss_parts rss_breakdown(pid_t pid) {
  char path[64], line[512], name[256] = "";
  snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
  FILE *f = fopen(path, "r");
  rss_parts r = {0};
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    long kib;
    if (sscanf(line, "Rss: %ld kB", &kib) == 1) {
      if (strstr(name, "/dev/infiniband") != NULL)
        r.rings += kib;
      else if (name[0] == '\0' || name[0] == '[')
        r.anon += kib, r.largest = kib > r.largest ? kib : r.largest;
      else
        r.files += kib;
    } else if (strchr(line, '-') != NULL && line[0] != ' ' &&
               strchr(line, ':') != NULL && strchr(line, ':') > line + 20) {
      /* "start-end perms offset dev inode [path]" */
      name[0] = '\0';
      sscanf(line, "%*s %*s %*s %*s %*s %255[^\n]", name);
    }
  }
  if (f != NULL)
    fclose(f);
  return r;
}

/* ---- clients: harness_scale.h ---- */

/* ---- a thousand connections ---- */

/* The server, in a child process: echoes every message; writes its address
 * to `out`, then serves until `in` reaches EOF; exits 0 if it stopped with
 * no leak. No Check asserts here (a child of a check). */
static _Noreturn void scale_server(int in, int out) {
  char listen[300];
  snprintf(listen, sizeof listen, "verbs://%s:0", th_test_host());
  th_child_echo_server("wv-big-srv", 1, listen, th_echo_init, 1024, in, out);
}

/* What one connection leaves: the device, its first group and chunk; the
 * connections after it are the cost per connection. */
typedef struct first_conn {
  pid_t pid;
  long rss, vmalloc, slab;
} first_conn;

static void measure_first(void *arg) {
  first_conn *f = arg;
  f->rss = th_status_kib(f->pid, "VmRSS:");
  f->vmalloc = th_meminfo_kib("VmallocUsed:");
  f->slab = th_meminfo_kib("Slab:");
}

START_TEST(verbs_thousand_connections_on_one_loop) {
  double scale = th_test_scale();
  int n = (int)(1000 * scale + 0.5);
  if (n < 1)
    n = 1;
  /* Fork before this process touches verbs, so the child starts clean. */
  th_child srv;
  th_child_start(&srv, scale_server);
  th_sleep_ms(200);
  long rss0 = th_status_kib(srv.pid, "VmRSS:");

  th_fleet fl = {.g = one_loop("wv-big-cli")};
  ck_assert_ptr_nonnull(fl.g);
  th_client *cs = calloc((size_t)n, sizeof *cs);
  ck_assert_ptr_nonnull(cs);
  uint64_t t0 = th_now_ms();
  /* At most 64 handshakes at a time: the backlog and TCG are finite. */
  first_conn first = {.pid = srv.pid};
  th_fleet_connect(&fl, cs, n, srv.uri, 64, measure_first, &first);
  long rss1 = first.rss, vmalloc1 = first.vmalloc, slab1 = first.slab;
  uint64_t t_conn = th_now_ms() - t0;

  th_fleet_echo_round(&fl, cs, n, TH_MSG, 180000);
  th_sleep_ms(1000); /* settle: the last credits and completions */
  long rss_n = th_status_kib(srv.pid, "VmRSS:");
  rss_parts parts = rss_breakdown(srv.pid);
  long my_rss = th_status_kib(getpid(), "VmRSS:");
  long vmalloc_n = th_meminfo_kib("VmallocUsed:");
  long slab_n = th_meminfo_kib("Slab:");
  double srv_cpu = th_idle_cpu(srv.pid, 5000);
  double cli_cpu = th_idle_cpu(getpid(), 5000);
  th_fleet_echo_round(&fl, cs, n, 2 * TH_MSG, 180000);

  int more = n > 1 ? n - 1 : 1;
  printf("verbs scale: %d connections (1000 x WEFT_TEST_SCALE %.2f) on one "
         "loop each side, connected in %.1f s\n",
         n, scale, t_conn / 1000.0);
  printf("verbs scale: server RSS %ld KiB at start, %ld KiB with one "
         "connection, %ld KiB with %d idle ones: %.1f KiB per connection "
         "(client process: %ld KiB)\n",
         rss0, rss1, rss_n, n, (double)(rss_n - rss1) / more, my_rss);
  printf("verbs scale: server RSS with %d: receive slab %ld KiB, other "
         "anonymous %ld KiB, queue rings %ld KiB, files %ld KiB\n",
         n, parts.largest, parts.anon - parts.largest, parts.rings,
         parts.files);
  printf("verbs scale: kernel, both ends, past the first connection: "
         "vmalloc +%ld KiB, slab +%ld KiB: %.1f KiB per connection (two "
         "QPs)\n",
         vmalloc_n - vmalloc1, slab_n - slab1,
         (double)(vmalloc_n - vmalloc1 + slab_n - slab1) / more);
  printf("verbs scale: idle CPU over 5 s: server %.1f%%, client %.1f%%\n",
         srv_cpu, cli_cpu);
  fflush(stdout);
  th_fleet_assert_clean(cs, n);
  /* An idle loop sleeps in epoll: a busy-polling one would show ~100%. */
  ck_assert_msg(srv_cpu < 10.0, "the idle server used %.1f%% CPU", srv_cpu);

  th_fleet_stop(&fl);
  free(cs);
  th_child_finish(&srv);
}
END_TEST

/* ---- one slow consumer among busy channels ---- */

#define FAST 20
/* The slow reader's messages: tiny, so that each receive slot carries few
 * bytes (a sender gathers up to 4 writes into one message) and the echoes
 * queued up to the 64 KiB flow-control mark fill thousands of slots; more
 * of them than that mark lets out. */
#define SLOW_MSGS 12000
#define SLOW_SIZE 8
#define HOLD_MSGS 40 /* the holder's: more than its credits */

/* The server's channels, in accept order: 0 the holder (auto-read off),
 * 1 the slow reader's, then the fast ones. All echo. */
typedef struct srv_chan {
  atomic_int exceptions;
  atomic_int paused; /* writability went false: flow control paused it */
  atomic_llong read;
  weft_channel *ch; /* the server's loop only */
} srv_chan;

typedef struct slow_srv {
  srv_chan ch[FAST + 2];
  int n; /* accepted: the server's loop only */
} slow_srv;

static void sc_read(weft_ctx *ctx, void *msg) {
  srv_chan *c = weft_ctx_state(ctx);
  atomic_fetch_add(&c->read, (long long)weft_buf_readable(msg));
  weft_ctx_write_and_flush(ctx, msg, WEFT_PROMISE_NONE); /* zero-copy echo */
}

static void sc_writability(weft_ctx *ctx, bool writable) {
  if (!writable)
    atomic_fetch_add(&((srv_chan *)weft_ctx_state(ctx))->paused, 1);
  weft_ctx_fire_writability_changed(ctx, writable);
}

static void sc_exception(weft_ctx *ctx, int err, const char *reason) {
  fprintf(stderr, "server channel: %s: %s\n", weft_err_name(err), reason);
  atomic_fetch_add(&((srv_chan *)weft_ctx_state(ctx))->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler sc_handler = {.name = "sc",
                                        .channel_read = sc_read,
                                        .writability_changed = sc_writability,
                                        .exception_caught = sc_exception};

static void sc_init(weft_channel *ch, void *arg) {
  slow_srv *s = arg;
  ck_assert_int_lt(s->n, FAST + 2);
  if (s->n == 0)
    weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0);
  s->ch[s->n].ch = ch; /* used while the test runs: it stays open */
  th_add_last(ch, "sc", &sc_handler, &s->ch[s->n++]);
}

/* The slow reader: auto-read off from the start. */
static void slow_reader_init(weft_channel *ch, void *arg) {
  weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0);
  th_client_init(ch, arg);
}

static void read_on_task(void *arg) {
  th_client *c = arg;
  if (c->ch != NULL)
    weft_channel_set_option(c->ch, WEFT_OPT_AUTO_READ, 1);
}

static void srv_read_on_task(void *arg) {
  weft_channel_set_option(((srv_chan *)arg)->ch, WEFT_OPT_AUTO_READ, 1);
}

/* Waits until `v` stops growing for `quiet_ms` (at most `max_ms`). */
static void wait_quiet(atomic_int *v, unsigned quiet_ms, unsigned max_ms) {
  uint64_t end = th_now_ms() + max_ms, since = th_now_ms();
  int last = atomic_load(v);
  while (th_now_ms() < end && th_now_ms() - since < quiet_ms) {
    th_sleep_ms(50);
    int now = atomic_load(v);
    if (now != last)
      last = now, since = th_now_ms();
  }
}

static void connect_one(th_client *c, const char *uri,
                        weft_channel_init_cb init) {
  th_client_connect(c, uri, init);
  ASSERT_EVENTUALLY(atomic_load(&c->status) != 1, 60000);
  ck_assert_int_eq(atomic_load(&c->status), 0);
}

START_TEST(verbs_slow_consumer_stalls_only_itself) {
  slow_srv *s = calloc(1, sizeof *s);
  ck_assert_ptr_nonnull(s);
  weft_loop_group *sg = one_loop("wv-sc-srv");
  ck_assert_ptr_nonnull(sg);
  char listen[300], uri[300];
  snprintf(listen, sizeof listen, "verbs://%s:0", th_test_host());
  weft_server *srv = th_server_bind(sg, listen, sc_init, s, uri, sizeof uri);
  th_fleet fl = {.g = one_loop("wv-sc-cli")};
  ck_assert_ptr_nonnull(fl.g);
  atomic_init(&fl.run, 1);

  /* The holder: its server channel does not read. */
  th_client hold = {.fl = &fl, .tag = 0xa1, .count = HOLD_MSGS, .size = TH_MSG};
  connect_one(&hold, uri, th_client_init);
  /* The slow reader: sends and does not read its echoes. */
  th_client slow = {.fl = &fl,
                    .tag = 0xb2,
                    .patterned = true,
                    .count = SLOW_MSGS,
                    .size = SLOW_SIZE};
  connect_one(&slow, uri, slow_reader_init);
  th_client fast[FAST];
  memset(fast, 0, sizeof fast);
  for (int i = 0; i < FAST; i++) {
    fast[i] = (th_client){.fl = &fl, .tag = (uint8_t)(i + 1), .pingpong = true};
    connect_one(&fast[i], uri, th_client_init);
  }
  /* The slow reader is as far as it gets once its sends stop. */
  wait_quiet(&slow.posted, 3000, 120000);
  printf("slow consumer: the slow reader got %d of %d messages out; the "
         "holder %d of %d\n",
         atomic_load(&slow.posted), SLOW_MSGS, atomic_load(&hold.posted),
         HOLD_MSGS);

  /* The fast ones keep echoing. */
  long long base[FAST];
  for (int i = 0; i < FAST; i++)
    base[i] = atomic_load(&fast[i].rounds);
  uint64_t deadline = th_now_ms() + 60000;
  long long least = 0;
  int slowest = 0;
  while (th_now_ms() < deadline) {
    least = -1;
    for (int i = 0; i < FAST; i++) {
      long long d = atomic_load(&fast[i].rounds) - base[i];
      if (least < 0 || d < least)
        least = d, slowest = i;
    }
    if (least >= 100)
      break;
    th_sleep_ms(50);
  }
  ck_assert_msg(least >= 100,
                "fast channel %d stalled behind the slow consumer: %lld "
                "echoes in 60 s",
                slowest, least);
  ck_assert_int_eq(atomic_load(&s->ch[0].read), 0);   /* the holder held */
  ck_assert_int_gt(atomic_load(&s->ch[1].paused), 0); /* flow control */
  for (int i = 0; i < FAST + 2; i++)
    ck_assert_int_eq(atomic_load(&s->ch[i].exceptions), 0);

  /* Both read again: everything arrives, in order. */
  atomic_store(&fl.run, 0);
  weft_loop *cl = weft_loop_group_get(fl.g, 0);
  ck_assert_int_eq(weft_loop_execute(cl, read_on_task, &slow), 0);
  ck_assert_int_eq(weft_loop_execute(weft_loop_group_get(sg, 0),
                                     srv_read_on_task, &s->ch[0]),
                   0);
  ASSERT_EVENTUALLY(atomic_load(&hold.echoed) == (long long)HOLD_MSGS * TH_MSG,
                    120000);
  ASSERT_EVENTUALLY(
      atomic_load(&slow.echoed) == (long long)SLOW_MSGS * SLOW_SIZE, 120000);
  ck_assert_int_eq(atomic_load(&slow.bad), 0);
  ck_assert_int_eq(atomic_load(&slow.exceptions), 0);
  ck_assert_int_eq(atomic_load(&hold.exceptions), 0);
  for (int i = 0; i < FAST; i++) {
    ck_assert_int_eq(atomic_load(&fast[i].bad), 0);
    ck_assert_int_eq(atomic_load(&fast[i].exceptions), 0);
  }

  th_fleet_stop(&fl);
  weft_server_close(srv);
  weft_loop_group_stop(sg);
  ck_assert_int_eq(weft_loop_group_join(sg), 0);
  weft_loop_group_free(sg);
  free(s);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  return th_suite("verbs_scale", "verbs_scale", 600,
                  verbs_thousand_connections_on_one_loop,
                  verbs_slow_consumer_stalls_only_itself, NULL);
}
