/* SPDX-License-Identifier: Apache-2.0 */
/* The busy read (loop/selector.c, "The busy read"; weft_watcher.busy_read):
 * a spinning loop reads its one active socket directly instead of asking
 * epoll first, still asks epoll every WEFT_BUSY_READ_EPOLL_EVERY-th spin,
 * pauses while the loop watches more than two fds, and stops at a batch
 * of two watchers, a change of interest or a removal.
 * Watchers here sit on socketpairs; the last test checks that the tcp
 * transport's channels take part. Loops that never sleep (busy_poll_us
 * -1) keep the counts free of the window's decisions. */
#include "harness.h"
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/clock.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/source.h>

static weft_loop_group *group;

static weft_loop *start_spinning_loop_retaining(size_t retain_bytes) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.pool_retain_bytes = retain_bytes;
  o.busy_poll_us = -1;
  o.busy_poll_adaptive = false;
  ck_assert_int_eq(weft_loop_group_new(&group, &o), 0);
  ck_assert_int_eq(weft_loop_group_start(group), 0);
  return weft_loop_group_get(group, 0);
}

static weft_loop *start_spinning_loop(void) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  return start_spinning_loop_retaining(o.pool_retain_bytes);
}

static void finish_group(void) {
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);
}

#define run_on(loop, fn, arg) ck_assert_int_eq(weft_loop_call(loop, fn, arg), 0)

/* ---- a watcher on one end of a socketpair ---- */

typedef struct bwatch {
  weft_watcher w;
  weft_loop *loop;
  int peer;                    /* the other end: the test writes here */
  bool blind;                  /* busy_read returns 0 without reading */
  _Atomic bool flood;          /* reads nothing, calls itself full */
  _Atomic long flood_calls;    /* busy_read and callback calls while so */
  _Atomic bool remove_in_busy; /* busy_read removes its own watcher */
  _Atomic bool removed;        /* ... and has */
  _Atomic int cb_calls;        /* callbacks that read something */
  _Atomic int busy_calls;      /* busy_read calls */
  _Atomic int busy_hits;       /* busy_read calls that read something */
  _Atomic long bytes;          /* read by either */
} bwatch;

/* Reads what is there; true if anything was. */
static bool drain(bwatch *b) {
  char buf[256];
  bool got = false;
  ssize_t n;
  while ((n = read(b->w.fd, buf, sizeof buf)) > 0) {
    atomic_fetch_add(&b->bytes, n);
    got = true;
  }
  return got;
}

static void bwatch_cb(weft_watcher *w, uint32_t events) {
  bwatch *b = w->data;
  if (atomic_load(&b->flood)) {
    atomic_fetch_add(&b->flood_calls, 1);
    return;
  }
  if ((events & EPOLLIN) && drain(b))
    atomic_fetch_add(&b->cb_calls, 1);
}

static int bwatch_busy_read(weft_watcher *w) {
  bwatch *b = w->data;
  atomic_fetch_add(&b->busy_calls, 1);
  if (atomic_load(&b->flood)) {
    atomic_fetch_add(&b->flood_calls, 1);
    return WEFT_BUSY_READ_MORE;
  }
  if (atomic_load(&b->remove_in_busy)) {
    ck_assert_int_eq(weft_loop_remove_watcher(b->loop, w), 0);
    atomic_store(&b->removed, true);
    return 1;
  }
  if (b->blind || !drain(b))
    return 0;
  atomic_fetch_add(&b->busy_hits, 1);
  return 1;
}

static void bwatch_init(bwatch *b, weft_loop *loop, bool busy) {
  memset(b, 0, sizeof *b);
  int sv[2];
  ck_assert_int_eq(
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
      0);
  b->loop = loop;
  b->peer = sv[1];
  weft_watcher_init(&b->w, sv[0], bwatch_cb, b);
  if (busy)
    b->w.busy_read = bwatch_busy_read;
}

static void bwatch_close(bwatch *b) {
  close(b->w.fd);
  close(b->peer);
}

static void send_byte(bwatch *b) {
  ck_assert_int_eq(write(b->peer, "x", 1), 1);
}

static int add_task(void *arg) {
  bwatch *b = arg;
  return weft_loop_add_watcher(b->loop, &b->w, EPOLLIN);
}
static int remove_task(void *arg) {
  bwatch *b = arg;
  return b->w.loop != NULL ? weft_loop_remove_watcher(b->loop, &b->w) : 0;
}
static int want_out_task(void *arg) {
  bwatch *b = arg;
  return weft_loop_modify_watcher(b->loop, &b->w, EPOLLIN | EPOLLOUT);
}
static int want_in_task(void *arg) {
  bwatch *b = arg;
  return weft_loop_modify_watcher(b->loop, &b->w, EPOLLIN);
}

/* Ends a test: removes each watcher of the NULL-terminated list that is
 * still registered, stops the loop, closes the socketpairs. */
static void finish_watchers(weft_loop *loop, bwatch **ws) {
  for (bwatch **w = ws; *w != NULL; w++)
    run_on(loop, remove_task, *w);
  finish_group();
  for (bwatch **w = ws; *w != NULL; w++)
    bwatch_close(*w);
}
#define FINISH(loop, ...)                                                      \
  finish_watchers((loop), (bwatch *[]){__VA_ARGS__, NULL})

/* Makes `b` the loop's busy-read watcher: its first message comes through
 * epoll alone, and the spins after it busy-read. */
static void make_busy(bwatch *b) {
  run_on(b->loop, add_task, b);
  send_byte(b);
  WAIT_FOR(atomic_load(&b->cb_calls) == 1);
  WAIT_FOR(atomic_load(&b->busy_calls) > 0);
}

/* Whether the loop busy-reads in its next BUSY_READ_TEST_SPINS spins. The
 * window is counted in the loop's own iterations, not in milliseconds: on a
 * loaded machine (ctest -j, TSan) a loop thread can stay off the CPU for
 * longer than a wall-clock window, which then held no spin at all and read
 * as "no busy reads" (a CI failure). A busy-reading loop busy-reads in 7
 * spins of 8 (1 of 2 while flooded), so 2000 spins (250 epoll rounds of
 * WEFT_BUSY_READ_EPOLL_EVERY) tell one from the other; a window the loop
 * does not complete in 40 s fails the test. (10000 spins in 10 s were not
 * enough under TSan beside stress-ng --cpu 2 on a loaded machine.) */
#define BUSY_READ_TEST_SPINS 2000
static bool busy_reads_go_on(weft_loop *loop) {
  weft_loop_stats before = th_loop_stats(loop);
  ck_assert_msg(WAIT_UNTIL(th_loop_stats(loop).iterations - before.iterations >=
                               BUSY_READ_TEST_SPINS,
                           40000),
                "the loop did not spin %d times in 40 s", BUSY_READ_TEST_SPINS);
  return th_loop_stats(loop).busy_reads > before.busy_reads;
}

/* ---- tests ---- */

/* After one message through epoll, the following ones are found by the
 * busy read: at most one spin in WEFT_BUSY_READ_EPOLL_EVERY asks epoll, so
 * nearly all of 40 messages arrive that way; without the busy read none
 * would. The loop's counters say the same. */
START_TEST(busy_read_finds_a_lone_socket_s_data) {
  weft_loop *loop = start_spinning_loop();
  static bwatch b;
  bwatch_init(&b, loop, true);
  make_busy(&b);
  for (int i = 0; i < 40; i++) {
    long want = atomic_load(&b.bytes) + 1;
    send_byte(&b);
    WAIT_FOR(atomic_load(&b.bytes) == want);
  }
  ck_assert_int_ge(atomic_load(&b.busy_hits), 20);
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_ge(st.busy_read_hits, (uint64_t)atomic_load(&b.busy_hits));
  ck_assert_uint_ge(st.busy_reads, st.busy_read_hits);
  FINISH(loop, &b);
}
END_TEST

/* While one socket is busy-read, another watcher's event still arrives
 * (the epoll_wait of every WEFT_BUSY_READ_EPOLL_EVERY-th spin). That
 * watcher, alone in its batch and without busy_read, ends the busy read:
 * it is the active one now, and epoll every spin serves it. The first
 * socket's next lone message picks it again. */
START_TEST(busy_read_still_asks_epoll_for_the_others) {
  weft_loop *loop = start_spinning_loop();
  static bwatch a, other;
  bwatch_init(&a, loop, true);
  bwatch_init(&other, loop, false);
  make_busy(&a);
  run_on(loop, add_task, &other);
  for (int i = 1; i <= 5; i++) {
    send_byte(&other);
    WAIT_FOR(atomic_load(&other.cb_calls) == i);
  }
  ck_assert(!busy_reads_go_on(loop));
  send_byte(&a);
  WAIT_FOR(atomic_load(&a.cb_calls) == 2);
  ck_assert(busy_reads_go_on(loop));
  FINISH(loop, &other, &a);
}
END_TEST

/* A loop watching more than WEFT_BUSY_READ_MAX_WATCHERS fds asks epoll
 * every spin: the busy read pauses while a third watcher is there and
 * resumes when it leaves. */
START_TEST(busy_read_pauses_beyond_two_watchers) {
  weft_loop *loop = start_spinning_loop();
  static bwatch a, second, third;
  bwatch_init(&a, loop, true);
  bwatch_init(&second, loop, false);
  bwatch_init(&third, loop, false);
  make_busy(&a);
  run_on(loop, add_task, &second);
  ck_assert(busy_reads_go_on(loop));
  run_on(loop, add_task, &third);
  ck_assert(!busy_reads_go_on(loop));
  run_on(loop, remove_task, &third);
  ck_assert(busy_reads_go_on(loop));
  FINISH(loop, &second, &a, &third);
}
END_TEST

/* Both ends written by a task on the loop, so that the next epoll_wait
 * finds both (`a` reads blind: its busy reads leave the byte to epoll). */
static int kick_both_task(void *arg) {
  bwatch **pair = arg;
  send_byte(pair[0]);
  send_byte(pair[1]);
  return 0;
}

/* A batch of two watchers ends the busy read: with several sockets ready,
 * epoll finds them more cheaply than a read of each. */
START_TEST(busy_read_ends_at_a_batch_of_two) {
  weft_loop *loop = start_spinning_loop();
  static bwatch a, other;
  bwatch_init(&a, loop, true);
  bwatch_init(&other, loop, false);
  a.blind = true;
  make_busy(&a);
  run_on(loop, add_task, &other);
  ck_assert(busy_reads_go_on(loop));
  run_on(loop, kick_both_task, ((bwatch *[]){&a, &other}));
  WAIT_FOR(atomic_load(&a.cb_calls) == 2 && atomic_load(&other.cb_calls) == 1);
  ck_assert(!busy_reads_go_on(loop));
  FINISH(loop, &other, &a);
}
END_TEST

/* An interest beyond reading (EPOLLOUT: only epoll reports writability)
 * pauses the busy read, reading alone again resumes it, and a watcher that
 * removes itself inside its busy read is not called again (ASan would see
 * the loop touch it). */
START_TEST(busy_read_follows_interest_and_removal) {
  weft_loop *loop = start_spinning_loop();
  static bwatch b;
  bwatch_init(&b, loop, true);
  make_busy(&b);
  run_on(loop, want_out_task, &b);
  ck_assert(!busy_reads_go_on(loop));
  run_on(loop, want_in_task, &b);
  ck_assert(busy_reads_go_on(loop));
  atomic_store(&b.remove_in_busy, true);
  WAIT_FOR(atomic_load(&b.removed));
  ck_assert(!busy_reads_go_on(loop));
  FINISH(loop, &b);
}
END_TEST

/* The other watcher of the flood test: records how many calls the flooded
 * one got between the byte written to it (by flood_kick_task, on the loop)
 * and its callback. */
typedef struct flood_pair {
  bwatch *flooded, *other;
  long at_kick;
  _Atomic long worst;
  _Atomic int served;
} flood_pair;

static flood_pair *the_pair;

static void flood_other_cb(weft_watcher *w, uint32_t events) {
  (void)w;
  flood_pair *p = the_pair;
  if (!(events & EPOLLIN) || !drain(p->other))
    return;
  long waited = atomic_load(&p->flooded->flood_calls) - p->at_kick;
  if (waited > atomic_load(&p->worst))
    atomic_store(&p->worst, waited);
  atomic_fetch_add(&p->served, 1);
}

static int flood_kick_task(void *arg) {
  flood_pair *p = arg;
  p->at_kick = atomic_load(&p->flooded->flood_calls);
  send_byte(p->other);
  return 0;
}

/* A socket that always has more (its busy read stops at its bound every
 * time: WEFT_BUSY_READ_MORE) keeps the other watcher waiting no longer
 * than epoll would: the spin after such a read asks epoll, so each of the
 * other's events waits behind at most two of the flood's reads, not the
 * WEFT_BUSY_READ_EPOLL_EVERY that a cycle of busy reads would make it (a
 * peer that floods its connection, each read a full bound of bytes and
 * handler work, would otherwise multiply the other connection's or the
 * listener's wait by up to 8). */
START_TEST(busy_read_of_a_flood_asks_epoll_next) {
  weft_loop *loop = start_spinning_loop();
  static bwatch a, other;
  static flood_pair pair;
  bwatch_init(&a, loop, true);
  bwatch_init(&other, loop, false);
  other.w.cb = flood_other_cb;
  pair = (flood_pair){.flooded = &a, .other = &other};
  the_pair = &pair;
  make_busy(&a);
  atomic_store(&a.flood, true);
  /* A busy read already past its flood check when the flag is set would
   * still drain: the byte is sent only once a call has seen the flag, so
   * that it stays unread and epoll reports `a` every time (drained, `a`
   * would never be alone in a batch again, and the kicks below would end
   * the busy read for good). */
  WAIT_FOR(atomic_load(&a.flood_calls) > 0);
  send_byte(&a);
  run_on(loop, add_task, &other);
  ck_assert(busy_reads_go_on(loop));
  for (int i = 1; i <= 16; i++) {
    run_on(loop, flood_kick_task, &pair);
    WAIT_FOR(atomic_load(&pair.served) == i);
    th_sleep_ms(1); /* another phase of the spins */
  }
  ck_assert_int_le(atomic_load(&pair.worst), 2);
  ck_assert(busy_reads_go_on(loop)); /* still busy-reading */
  FINISH(loop, &other, &a);
}
END_TEST

/* ---- the tcp transport ---- */

static const weft_handler echo_handler = {.name = "echo",
                                          .channel_read = th_echo_read};

static void echo_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &echo_handler,
                         NULL);
}

/* A blocking socket connected to the server at `uri` (tcp://127.0.0.1:N). */
/* A tcp echo server on a spinning loop, driven in ping-pong by a plain
 * socket: its channel's reads come from busy reads, and every byte comes
 * back in order. */
START_TEST(busy_read_serves_tcp_channels) {
  weft_loop *loop = start_spinning_loop();
  char uri[128];
  weft_server *srv = th_server_bind(group, "tcp://127.0.0.1:0", echo_init, NULL,
                                    uri, sizeof uri);
  int fd = th_connect_loopback(th_uri_port(uri));
  uint64_t hits = th_loop_stats(loop).busy_read_hits;
  for (uint32_t i = 0; i < 200; i++) {
    uint32_t back = ~i;
    th_write_all(fd, &i, sizeof i);
    ck_assert_int_eq(recv(fd, &back, sizeof back, MSG_WAITALL),
                     (ssize_t)sizeof back);
    ck_assert_uint_eq(back, i);
  }
  ck_assert_uint_ge(th_loop_stats(loop).busy_read_hits - hits, 100);
  close(fd);
  weft_server_close(srv);
  finish_group();
}
END_TEST

/* A slab hook on the loop's pool that fails every new slab while `fail`:
 * the pool's allocations that need a slab then fail (ENOMEM). */
static _Atomic bool slabs_fail;

static int failing_reg(void *arg, void *base, size_t len, uint64_t *key) {
  (void)arg;
  (void)base;
  (void)len;
  *key = 0;
  return atomic_load(&slabs_fail) ? WEFT_ENOMEM : 0;
}

static int add_failing_hook_task(void *arg) {
  weft_loop *loop = arg;
  int id =
      weft_pool_add_slab_hook(weft_loop_pool(loop), failing_reg, NULL, NULL);
  return id < 0 ? id : 0;
}

static void ping(int fd, uint32_t i) {
  uint32_t back = ~i;
  th_write_all(fd, &i, sizeof i);
  ck_assert_int_eq(recv(fd, &back, sizeof back, MSG_WAITALL),
                   (ssize_t)sizeof back);
  ck_assert_uint_eq(back, i);
}

/* A busy read that cannot get a buffer has read nothing: an idle channel
 * must not be closed for it (a read that epoll announced, with bytes
 * waiting, meets the same shortage and closes the channel as before).
 * The pool keeps no empty slab (retain 0), so once the echo's buffers are
 * back every busy read needs a new slab, which the hook refuses. */
START_TEST(busy_read_without_a_buffer_keeps_an_idle_channel) {
  weft_loop *loop = start_spinning_loop_retaining(0);
  char uri[128];
  weft_server *srv = th_server_bind(group, "tcp://127.0.0.1:0", echo_init, NULL,
                                    uri, sizeof uri);
  int fd = th_connect_loopback(th_uri_port(uri));
  for (uint32_t i = 0; i < 20; i++)
    ping(fd, i);
  ck_assert_uint_gt(th_loop_stats(loop).busy_read_hits, 0);
  run_on(loop, add_failing_hook_task, loop);
  atomic_store(&slabs_fail, true);
  ck_assert(busy_reads_go_on(loop));
  char c;
  ck_assert_int_eq(recv(fd, &c, 1, MSG_DONTWAIT), -1); /* 0: closed */
  ck_assert_int_eq(errno, EAGAIN);
  atomic_store(&slabs_fail, false);
  ping(fd, 1000);
  close(fd);
  weft_server_close(srv);
  finish_group();
}
END_TEST

/* A server handler that takes its time over each read (100 µs), so that a
 * client writing as fast as it can keeps the socket from running dry. */
static void slow_discard_read(weft_ctx *ctx, void *msg) {
  (void)ctx;
  uint64_t until = weft_now_ns() + 100000;
  while (weft_now_ns() < until)
    ;
  weft_msg_release(msg);
}

static const weft_handler slow_discard_handler = {
    .name = "slow-discard", .channel_read = slow_discard_read};

static void slow_discard_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "slow-discard",
                         &slow_discard_handler, NULL);
}

typedef struct flooder {
  pthread_t th;
  int fd;
  _Atomic bool stop;
} flooder;

static void *flood_main(void *arg) {
  flooder *f = arg;
  static char chunk[65536];
  while (!atomic_load(&f->stop))
    if (send(f->fd, chunk, sizeof chunk, MSG_NOSIGNAL) < 0 && errno != EAGAIN &&
        errno != EINTR)
      break;
  return NULL;
}

/* A tcp channel whose socket never runs dry: its busy reads find 64 KiB
 * and more at a time (WEFT_BUSY_READ_MORE), so the loop asks epoll after
 * each of them (about one epoll_wait per busy read that found bytes), not
 * once per WEFT_BUSY_READ_EPOLL_EVERY spins. */
START_TEST(busy_read_of_a_flooded_tcp_channel_asks_epoll_next) {
  weft_loop *loop = start_spinning_loop();
  char uri[128];
  weft_server *srv = th_server_bind(group, "tcp://127.0.0.1:0",
                                    slow_discard_init, NULL, uri, sizeof uri);
  static flooder f;
  f.fd = th_connect_loopback(th_uri_port(uri));
  struct timeval tv = {.tv_usec = 10000}; /* so that `stop` is seen */
  ck_assert_int_eq(setsockopt(f.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv),
                   0);
  ck_assert_int_eq(pthread_create(&f.th, NULL, flood_main, &f), 0);
  th_sleep_ms(50);
  weft_loop_stats a = th_loop_stats(loop);
  /* 20 hits, however long the machine's load makes them take (200 ms
   * held none under TSan beside stress-ng --cpu 2). */
  WAIT_FOR(th_loop_stats(loop).busy_read_hits - a.busy_read_hits >= 20);
  weft_loop_stats b = th_loop_stats(loop);
  atomic_store(&f.stop, true);
  pthread_join(f.th, NULL);
  uint64_t hits = b.busy_read_hits - a.busy_read_hits;
  uint64_t polls = b.watcher_polls - a.watcher_polls;
  ck_assert_uint_ge(hits, 20);
  ck_assert_uint_ge(polls * 2, hits);
  close(f.fd);
  weft_server_close(srv);
  finish_group();
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "busy_read", "core", 60, busy_read_finds_a_lone_socket_s_data,
      busy_read_still_asks_epoll_for_the_others,
      busy_read_pauses_beyond_two_watchers, busy_read_ends_at_a_batch_of_two,
      busy_read_follows_interest_and_removal,
      busy_read_of_a_flood_asks_epoll_next, busy_read_serves_tcp_channels,
      busy_read_without_a_buffer_keeps_an_idle_channel,
      busy_read_of_a_flooded_tcp_channel_asks_epoll_next, NULL);
}
