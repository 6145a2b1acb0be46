/* SPDX-License-Identifier: Apache-2.0 */
/* The embedded channel: a real pipeline and outbound queue driven by the
 * calling thread, with a transport that hands flushed buffers to the test
 * instead of a socket (Netty's EmbeddedChannel). */
#include <stdint.h>
#include <stdlib.h>

#include <weft/embedded.h>
#include <weft/error.h>

#include "channel/channel_internal.h"
#include "loop/loop_internal.h"

#define MAX_EXCEPTIONS 16

/* A FIFO of messages. */
typedef struct msg_node {
  void *msg;
  struct msg_node *next;
} msg_node;

typedef struct msg_fifo {
  msg_node *head, *tail;
} msg_fifo;

struct weft_embedded {
  weft_loop *loop;
  weft_channel *ch;
  msg_fifo outbound; /* what reached the head, flushed */
  msg_fifo inbound;  /* what reached the tail */
  int exceptions[MAX_EXCEPTIONS];
  size_t n_exceptions;
  size_t write_limit; /* bytes one flush may send */
};

static int fifo_push(msg_fifo *f, void *msg) {
  msg_node *n = malloc(sizeof *n);
  if (n == NULL)
    return WEFT_ENOMEM;
  *n = (msg_node){.msg = msg};
  if (f->tail != NULL)
    f->tail->next = n;
  else
    f->head = n;
  f->tail = n;
  return 0;
}

static void *fifo_pop(msg_fifo *f) {
  msg_node *n = f->head;
  if (n == NULL)
    return NULL;
  f->head = n->next;
  if (f->head == NULL)
    f->tail = NULL;
  void *msg = n->msg;
  free(n);
  return msg;
}

static void fifo_release_all(msg_fifo *f) {
  void *msg;
  while ((msg = fifo_pop(f)) != NULL)
    weft_msg_release(msg);
}

/* ---- the embedded "transport" ---- */

static weft_embedded *embedded_of(const weft_channel *ch) {
  return *(weft_embedded **)weft_channel_priv(ch);
}

/* Sends up to write_limit bytes: whole buffers are handed over with a new
 * reference, a buffer cut by the limit as a slice of the part sent. */
static int embedded_flush(weft_channel *ch) {
  weft_embedded *e = embedded_of(ch);
  size_t budget = e->write_limit;
  while (!weft_outbound_is_empty(ch)) {
    weft_buf *b = weft_outbound_buf(ch, 0);
    size_t len = weft_buf_readable(b);
    size_t n = len < budget ? len : budget;
    if (n == 0 && len > 0)
      break;
    weft_buf *out =
        n == len ? weft_buf_retain(b) : weft_buf_slice(b, b->reader_index, n);
    if (out == NULL)
      return WEFT_ENOMEM;
    if (fifo_push(&e->outbound, out) < 0) {
      weft_buf_release(out);
      return WEFT_ENOMEM;
    }
    budget -= n;
    weft_outbound_consumed(ch, n);
  }
  return 0;
}

/* Reading is the test's to drive (weft_embedded_write_inbound delivers
 * regardless); accepting the call lets auto-read and flow control be
 * tested on an embedded channel. */
static int embedded_set_read(weft_channel *ch, bool on) {
  (void)ch, (void)on;
  return 0;
}

static const weft_transport_ops embedded_transport = {
    .name = "embedded",
    .channel_priv_size = sizeof(weft_embedded *),
    .flush = embedded_flush,
    .set_read = embedded_set_read,
};

/* The same, as a byte stream: writes may be merged (small ones are). */
static const weft_transport_ops embedded_stream_transport = {
    .name = "embedded",
    .caps = WEFT_TRANSPORT_CAP_STREAM,
    .channel_priv_size = sizeof(weft_embedded *),
    .flush = embedded_flush,
    .set_read = embedded_set_read,
};

void weft_embedded_set_stream(weft_embedded *e, bool on) {
  e->ch->transport = on ? &embedded_stream_transport : &embedded_transport;
  /* A message channel merges nothing: no more copies into the tail. */
  weft__outbound_close_window(&e->ch->out);
}

static bool tail_keep(weft_channel *ch, void *msg) {
  return fifo_push(&embedded_of(ch)->inbound, msg) == 0;
}

static void tail_exception(weft_channel *ch, int err) {
  weft_embedded *e = embedded_of(ch);
  if (e->n_exceptions < MAX_EXCEPTIONS)
    e->exceptions[e->n_exceptions++] = err;
}

static const weft__tail_hooks embedded_tail = {.read = tail_keep,
                                               .exception = tail_exception};

/* ---- public ---- */

int weft_embedded_new(weft_embedded **out, weft_channel_init_cb init,
                      void *arg) {
  weft_embedded *e = calloc(1, sizeof *e);
  if (e == NULL)
    return WEFT_ENOMEM;
  e->write_limit = SIZE_MAX;
  int rc =
      weft__loop_new(&e->loop, NULL, 0, 0, false, WEFT__DEFAULT_POLL_BUDGET);
  if (rc < 0)
    goto failed_loop_new;
  rc = weft__loop_attach(e->loop);
  if (rc < 0)
    goto failed_attach;
  e->ch = weft__channel_new(&embedded_transport, e->loop, &rc);
  if (e->ch == NULL)
    goto failed_channel;
  *(weft_embedded **)weft_channel_priv(e->ch) = e;
  e->ch->tail_hooks = &embedded_tail;
  weft_channel_retain(e->ch); /* the test's: valid until finish */
  if (init != NULL)
    init(e->ch, arg);
  weft__channel_activate(e->ch);
  *out = e;
  return 0;
failed_channel:
  weft__loop_detach(e->loop);
failed_attach:
  weft__loop_free(e->loop);
failed_loop_new:
  free(e);
  return rc;
}

weft_channel *weft_embedded_channel(weft_embedded *e) { return e->ch; }

weft_pool *weft_embedded_pool(weft_embedded *e) {
  return weft_loop_pool(e->loop);
}

int weft_embedded_write_inbound(weft_embedded *e, void *msg) {
  if (e->ch->state != WEFT_CHANNEL_ACTIVE) {
    weft_msg_release(msg);
    return WEFT_ECLOSED;
  }
  weft_pipeline_fire_channel_read(&e->ch->pipeline, msg);
  if (e->ch->state == WEFT_CHANNEL_ACTIVE)
    weft_pipeline_fire_channel_read_complete(&e->ch->pipeline);
  weft_embedded_run_pending(e);
  return 0;
}

int weft_embedded_write_inbound_bytes(weft_embedded *e, const void *data,
                                      size_t len) {
  weft_buf *b = weft_buf_alloc(weft_embedded_pool(e), len);
  if (b == NULL)
    return WEFT_ENOMEM;
  weft_buf_write_bytes(b, data, len);
  return weft_embedded_write_inbound(e, b);
}

void *weft_embedded_read_outbound(weft_embedded *e) {
  return fifo_pop(&e->outbound);
}

void *weft_embedded_read_inbound(weft_embedded *e) {
  return fifo_pop(&e->inbound);
}

int weft_embedded_exception(const weft_embedded *e, size_t i) {
  return i < e->n_exceptions ? e->exceptions[i] : 0;
}

void weft_embedded_set_write_limit(weft_embedded *e, size_t bytes) {
  e->write_limit = bytes;
  if (e->ch->state == WEFT_CHANNEL_ACTIVE && !weft_outbound_is_empty(e->ch) &&
      embedded_flush(e->ch) < 0)
    weft_channel_transport_closed(e->ch, WEFT_ENOMEM, "embedded flush");
}

int weft_embedded_run_pending(weft_embedded *e) {
  return weft__loop_run_pending(e->loop);
}

size_t weft_embedded_free(weft_embedded *e) {
  weft__channel_close(e->ch, WEFT_PROMISE_NONE);
  weft_embedded_run_pending(e);
  fifo_release_all(&e->outbound);
  fifo_release_all(&e->inbound);
  weft_channel_release(e->ch); /* the test's reference: frees it */
  size_t leaks = weft__loop_detach(e->loop);
  weft__loop_free(e->loop);
  free(e);
  return leaks;
}
