/* SPDX-License-Identifier: Apache-2.0 */
/* Rings of two threads mapped at one address, one after the other, as when
 * one loop ends its ring and another loop then creates its own: liburing
 * maps and unmaps rings with raw system calls, which ThreadSanitizer does
 * not see, so without weft__uring_ring_exit's and weft__uring_ring_create's
 * annotations (transports/uring/probe.c) the new ring's first read of the
 * CQ head is reported as a race with the old ring's last write (the TSan
 * stage of scripts/test.sh, test_channel_uring on a loaded machine: reap
 * against io_uring_cq_advance). The two threads share nothing TSan would
 * take as an order: the second waits on a relaxed atomic. Runs in every
 * build; only TSan builds can fail it. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <liburing.h>

#include "transports/uring/uring_internal.h"

/* Shared through relaxed atomics only, which give TSan no order. */
typedef struct rings {
  atomic_int first_done;
  atomic_int err;              /* the first ring's */
  atomic_uintptr_t first_head; /* the address of the first ring's CQ head */
  uintptr_t second_head;       /* read after the join */
} rings;

#define SET(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)
#define GET(field) atomic_load_explicit(&(field), memory_order_relaxed)

/* One NOP through `ring` and its CQE reaped: reads the CQ head (a plain
 * load in liburing's peek) and advances it (a store). */
static int nop_round_trip(struct io_uring *ring) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  if (sqe == NULL)
    return -1;
  io_uring_prep_nop(sqe);
  if (io_uring_submit(ring) != 1)
    return -1;
  struct io_uring_cqe *cqe;
  if (io_uring_wait_cqe(ring, &cqe) < 0)
    return -1;
  io_uring_cqe_seen(ring, cqe);
  return 0;
}

static void *first(void *arg) {
  rings *r = arg;
  struct io_uring ring;
  unsigned flags;
  int err = weft__uring_ring_create(&ring, 8, 0, &flags);
  if (err == 0) {
    err = nop_round_trip(&ring);
    SET(r->first_head, (uintptr_t)ring.cq.khead);
    weft__uring_ring_exit(&ring);
  }
  SET(r->err, err);
  SET(r->first_done, 1);
  return NULL;
}

static void *second(void *arg) {
  rings *r = arg;
  while (GET(r->first_done) == 0)
    th_sleep_ms(1);
  if (GET(r->err) != 0)
    return NULL;
  struct io_uring ring;
  unsigned flags;
  if (weft__uring_ring_create(&ring, 8, 0, &flags) != 0)
    return NULL;
  r->second_head = (uintptr_t)ring.cq.khead;
  nop_round_trip(&ring); /* TSan halts here without the annotations */
  weft__uring_ring_exit(&ring);
  return NULL;
}

START_TEST(uring_rings_reuse_one_address_without_a_race) {
  char why[256];
  if (weft__uring_probe(why, sizeof why) < 0) {
    th_skip(__func__, "io_uring cannot run here: %s", why);
    return;
  }
  /* The kernel usually maps the second ring where the first one was;
   * tries make it likely (a sanitizer's own mappings can take the place). */
  int same = 0;
  for (int i = 0; i < 100 && same == 0; i++) {
    rings r = {.second_head = 0};
    pthread_t a, b;
    ck_assert_int_eq(pthread_create(&b, NULL, second, &r), 0);
    ck_assert_int_eq(pthread_create(&a, NULL, first, &r), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    ck_assert_int_eq(GET(r.err), 0);
    same = GET(r.first_head) == r.second_head;
  }
  if (!same)
    th_skip(__func__, "the second ring never landed where the first was");
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("uring_rings", "core", 60,
                  uring_rings_reuse_one_address_without_a_race, NULL);
}
