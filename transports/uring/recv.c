/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/recv.c: receiving. A channel's multishot recv takes
 * buffers from the loop's provided buffer ring and each completion goes up
 * the pipeline as a weft_buf wrapping the slot; while pipelines hold every
 * slot, single recvs into pool memory take over. One read_complete per
 * channel and reap. What arrives after the channel stopped reading is held
 * until it reads again (below). Loop thread.
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- receiving ---- */

static bool ring_has_slots(const ur_loop *ul) {
  return ul->bufs_out < ul->buf_count;
}

void weft__uring_recv_arm(ur_channel *uc) {
  if (!uc->reading || uc->fd < 0 || uc->recv_state != UR_RECV_IDLE ||
      uc->ul->stopping || uc->held_n > 0 || uc->held_plain != NULL ||
      uc->yielded || uc->eof_held)
    return; /* held bytes go first (weft__uring_recv_resume, _yielded) */
  ur_loop *ul = uc->ul;
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe == NULL) {
    weft__uring_channel_failed(uc, "read", WEFT_EIO);
    return;
  }
  if (ring_has_slots(ul)) {
    io_uring_prep_recv_multishot(sqe, uc->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = UR_BGID;
    io_uring_sqe_set_data(sqe, &uc->op_recv);
    uc->recv_state = UR_RECV_ARMED;
  } else {
    /* Every slot is held by a pipeline: read into pool memory meanwhile. */
    weft_buf *b = weft_buf_alloc(weft_loop_pool(ul->loop), UR_PLAIN_RECV_SIZE);
    if (b == NULL) {
      io_uring_prep_nop(sqe); /* an SQE cannot be given back */
      request_misc(ul, sqe);
      weft__uring_channel_failed(uc, "read", WEFT_ENOMEM);
      return;
    }
    io_uring_prep_recv(sqe, uc->fd, weft_buf_wptr(b), weft_buf_writable(b), 0);
    io_uring_sqe_set_data(sqe, &uc->op_plain);
    uc->plain_buf = b;
    uc->recv_state = UR_RECV_PLAIN;
    ul->stats.plain_recvs++;
  }
  request_started(uc);
}

/* ---- Reads that arrive while reading is off ----
 *
 * A multishot recv goes on until its cancel reaches the kernel, and a
 * plain recv in flight completes: what they bring after the channel
 * stopped reading (flow control, auto-read off) is held here, not fired,
 * and delivered when reading resumes, before the next recv is armed.
 * Firing it made the decoder copy it into its cumulation and give the
 * slot back, and every resume's multishot then drained the socket into
 * user memory again: a client that sends requests and never reads the
 * replies grew the server by about 10 MiB per connection, where tcp,
 * which leaves unread bytes in the kernel, held about 0.2 (issue 14's
 * bound; test_kv_hostile's many-connections case). A held slot stays out
 * of the ring, so what a loop's channels hold together is bounded by the
 * ring (buf_count * buf_size), plus one plain buffer per channel; with
 * the ring held, other channels read through plain recvs meanwhile. Held
 * slots and a held plain buffer never mix: a plain recv is armed only
 * while reading, and only once nothing is held. */

/* Whether a completion is held rather than fired: the channel does not
 * read, or older bytes are still held (the multishot whose cancel is on
 * its way may complete again after reading resumed, before the delivery
 * task has run: its bytes queue behind the held ones). */
static bool must_hold(const ur_channel *uc) {
  return !uc->reading || uc->held_n > 0 || uc->held_plain != NULL ||
         uc->yielded;
}

static void hold(ur_channel *uc, weft_buf *b, unsigned bid) {
  ur_loop *ul = uc->ul;
  assert(uc->held_plain == NULL); /* see above: they never mix */
  ul->held_buf[bid] = b;
  if (uc->held_n++ == 0)
    uc->held_head = (uint16_t)bid;
  else
    ul->held_next[uc->held_tail] = (uint16_t)bid;
  uc->held_tail = (uint16_t)bid;
}

/* The oldest held buffer, or NULL. */
static weft_buf *take_held(ur_channel *uc) {
  if (uc->held_plain != NULL) {
    weft_buf *b = uc->held_plain;
    uc->held_plain = NULL;
    return b;
  }
  if (uc->held_n == 0)
    return NULL;
  ur_loop *ul = uc->ul;
  weft_buf *b = ul->held_buf[uc->held_head];
  ul->held_buf[uc->held_head] = NULL;
  uc->held_head = ul->held_next[uc->held_head];
  uc->held_n--;
  return b;
}

void weft__uring_recv_drop_held(ur_channel *uc) {
  weft_buf *b;
  while ((b = take_held(uc)) != NULL)
    weft_buf_release(b); /* a slot goes back to the ring */
}

/* After held reads were delivered: the end of the stream that came behind
 * them, once none is left, or the next recv. */
static void recv_continue(ur_channel *uc) {
  if (uc->eof_held && uc->held_n == 0 && uc->held_plain == NULL) {
    uc->eof_held = false;
    if (channel_open(uc))
      weft_channel_transport_closed(uc->ch, 0, "peer closed");
    return;
  }
  weft__uring_recv_arm(uc); /* not while anything is still held */
}

static void fire_read(ur_channel *uc, weft_buf *b);

/* The task weft__uring_recv_resume queues: delivers the held buffers while
 * the channel reads, within its read budget (what the budget leaves, the
 * next poll delivers: "The read budget" below), then arms the next recv
 * once nothing is held. */
static void deliver_held_task(void *arg) {
  ur_channel *uc = arg;
  uc->deliver_queued = false;
  weft_buf *b;
  while (uc->reading && !uc->yielded && channel_open(uc) &&
         (b = take_held(uc)) != NULL)
    fire_read(uc, b);
  weft__uring_fire_read_completes(uc->ul);
  recv_continue(uc);
  weft_channel_release(uc->ch);
}

void weft__uring_recv_resume(ur_channel *uc) {
  if (uc->held_n == 0 && uc->held_plain == NULL) {
    weft__uring_recv_arm(uc);
    return;
  }
  if (uc->deliver_queued)
    return;
  weft_channel_retain(uc->ch);
  uc->deliver_queued = true;
  if (weft_loop_execute(uc->ul->loop, deliver_held_task, uc) < 0) {
    uc->deliver_queued = false; /* the loop is finishing: it closes it */
    weft_channel_release(uc->ch);
  }
}

/* ---- The read budget (docs/architecture.md, "Read budget") ----
 *
 * A channel fires at most its budget of reads (weft_channel_read_budget:
 * buffers and bytes) per loop iteration; the loop polls the ring once per
 * iteration, so a poll is an epoch. The read that spends the budget puts
 * the channel on the loop's yield list; its completions from then on are
 * held, as while it does not read (above), behind what is held already,
 * so the byte order stays. The next poll, before it reaps, delivers each
 * listed channel's held reads up to its new budget and arms its recv
 * again once nothing is held: the channel goes on without a new
 * completion, and every other channel of the loop got its completions of
 * the reap in between. While the list is not empty the ring refuses to
 * arm, so the loop does not sleep on held bytes. The multishot recv stays
 * in the kernel while the channel waits (no SQE for a yield) until it
 * holds a whole budget of slots: then it is cancelled, so a flood holds at
 * most about two budgets of the ring, not all of it, and the bytes wait
 * in the socket. Counting costs two compares per read; the budget itself
 * is read once per channel and epoch. */

/* Counts `bytes` read against the channel's budget of this epoch; true
 * when the read spent it. */
static bool budget_spend(ur_channel *uc, size_t bytes) {
  return weft_read_meter_spend(&uc->rb, uc->ch, uc->ul->epoch, bytes);
}

/* The channel spent its budget: it waits on the yield list (with a
 * reference) for the next poll. */
static void yield(ur_channel *uc) {
  ur_loop *ul = uc->ul;
  uc->yielded = true;
  uc->yield_next = NULL;
  weft_channel_retain(uc->ch);
  if (ul->yield_tail != NULL)
    ul->yield_tail->yield_next = uc;
  else
    ul->yield_head = uc;
  ul->yield_tail = uc;
}

static void fire_read(ur_channel *uc, weft_buf *b) {
  weft_pipeline *p = weft_channel_pipeline(uc->ch);
  bool spent = budget_spend(uc, weft_buf_readable(b));
  weft_pipeline_fire_channel_read(p, b);
  if (spent && !uc->yielded && channel_open(uc))
    yield(uc);
  if (uc->rc_pending)
    return;
  ur_loop *ul = uc->ul;
  uc->rc_pending = true;
  uc->rc_next = NULL;
  weft_channel_retain(uc->ch);
  if (ul->rc_tail != NULL)
    ul->rc_tail->rc_next = uc;
  else
    ul->rc_head = uc;
  ul->rc_tail = uc;
}

/* One listed channel's turn: its held reads up to the new budget; the
 * recv goes on once none is held. */
static int deliver_yielded(ur_channel *uc) {
  int fired = 0;
  uc->yielded = false;
  weft_buf *b;
  while (uc->reading && !uc->yielded && channel_open(uc) &&
         (b = take_held(uc)) != NULL) {
    fire_read(uc, b);
    fired++;
  }
  if (channel_open(uc))
    recv_continue(uc);
  return fired;
}

int weft__uring_recv_yielded(ur_loop *ul) {
  ul->epoch++;
  if (ul->yield_head == NULL)
    return 0;
  ur_channel *uc = ul->yield_head;
  ul->yield_head = ul->yield_tail = NULL; /* a turn may list it again */
  int work = 0;
  while (uc != NULL) {
    ur_channel *next = uc->yield_next;
    weft_channel *ch = uc->ch;
    work += 1 + deliver_yielded(uc);
    weft_channel_release(ch);
    uc = next;
  }
  weft__uring_fire_read_completes(ul);
  return work;
}

void weft__uring_recv_fini(ur_loop *ul) {
  while (ul->yield_head != NULL) {
    ur_channel *uc = ul->yield_head;
    ul->yield_head = uc->yield_next;
    uc->yielded = false;
    weft_channel_release(uc->ch);
  }
  ul->yield_tail = NULL;
}

int weft__uring_recv_cancel(ur_channel *uc) {
  if (uc->recv_state != UR_RECV_ARMED)
    return 0;
  /* Completions already on their way are held (above). */
  struct io_uring_sqe *sqe = weft__uring_get_sqe(uc->ul);
  if (sqe == NULL)
    return WEFT_EIO;
  io_uring_prep_cancel(sqe, &uc->op_recv, 0);
  request_misc(uc->ul, sqe);
  uc->recv_state = UR_RECV_CANCELLING;
  return 0;
}

void weft__uring_fire_read_completes(ur_loop *ul) {
  while (ul->rc_head != NULL) {
    ur_channel *uc = ul->rc_head;
    ul->rc_head = uc->rc_next;
    if (ul->rc_head == NULL)
      ul->rc_tail = NULL;
    uc->rc_pending = false;
    weft_channel *ch = uc->ch;
    if (channel_open(uc))
      weft_pipeline_fire_channel_read_complete(weft_channel_pipeline(ch));
    weft_channel_release(ch);
  }
}

/* The end of a recv (multishot or plain): EOF, error, or re-arm. */
static void recv_ended(ur_channel *uc, int32_t res) {
  uc->recv_state = UR_RECV_IDLE;
  if (res == 0 && (uc->held_n > 0 || uc->held_plain != NULL)) {
    uc->eof_held = true; /* after what is held (recv_continue) */
    return;
  }
  if (res == 0) {
    if (channel_open(uc))
      weft_channel_transport_closed(uc->ch, 0, "peer closed");
    return;
  }
  if (res == -ENOBUFS)
    uc->ul->stats.enobufs++;
  else if (res < 0 && res != -ECANCELED) {
    weft__uring_channel_failed(uc, "read", res);
    return;
  }
  if (channel_open(uc))
    weft__uring_recv_arm(
        uc); /* the multishot ended: ENOBUFS, set_read, CQ overflow */
}

void weft__uring_recv_done(ur_channel *uc, int32_t res, uint32_t flags) {
  ur_loop *ul = uc->ul;
  weft_channel *ch = uc->ch;
  if (flags & IORING_CQE_F_BUFFER) {
    unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
    uint8_t *base = ul->bufs + (size_t)bid * ul->buf_size;
    weft_buf *b = NULL;
    if (res > 0 && channel_open(uc))
      b = weft_buf_wrap(weft_loop_pool(ul->loop), base, ul->buf_size,
                        (size_t)res, weft__uring_slot_returned, ul);
    if (b != NULL) {
      ul->bufs_out++;
      ul->stats.recv_bufs++;
      if (!must_hold(uc)) {
        fire_read(uc, b);
      } else {
        hold(uc, b, bid);
        /* A flood holds no more of the ring ("The read budget"); without
         * an SQE the recv goes on and ENOBUFS ends it. */
        if (uc->yielded && uc->held_n >= uc->rb.budget.max_messages)
          (void)weft__uring_recv_cancel(uc);
      }
    } else {
      if (res > 0 && channel_open(uc))
        weft__uring_channel_failed(uc, "read", WEFT_ENOMEM);
      weft__uring_buf_ring_put(ul, bid);
    }
  }
  if (flags & IORING_CQE_F_MORE)
    return;
  recv_ended(uc, res > 0 ? 1 : res);
  request_ended(ul, ch);
}

void weft__uring_plain_recv_done(ur_channel *uc, int32_t res) {
  ur_loop *ul = uc->ul;
  weft_channel *ch = uc->ch;
  weft_buf *b = uc->plain_buf;
  uc->plain_buf = NULL;
  if (res > 0 && channel_open(uc)) {
    b->writer_index += (size_t)res;
    if (must_hold(uc)) {
      assert(uc->held_n == 0 && uc->held_plain == NULL); /* armed: none */
      uc->held_plain = b;
    } else {
      fire_read(uc, b);
    }
  } else {
    weft_buf_release(b);
  }
  recv_ended(uc, res > 0 ? 1 : res);
  request_ended(ul, ch);
}
