/* transports/uring/recv.c: receiving. A channel's multishot recv takes
 * buffers from the loop's provided buffer ring and each completion goes up
 * the pipeline as a weft_buf wrapping the slot; while pipelines hold every
 * slot, single recvs into pool memory take over. One read_complete per
 * channel and reap. Loop thread.
 */
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
      uc->ul->stopping)
    return;
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

static void fire_read(ur_channel *uc, weft_buf *b) {
  weft_pipeline *p = weft_channel_pipeline(uc->ch);
  weft_pipeline_fire_channel_read(p, b);
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
      fire_read(uc, b);
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
    fire_read(uc, b);
  } else {
    weft_buf_release(b);
  }
  recv_ended(uc, res > 0 ? 1 : res);
  request_ended(ul, ch);
}
