/* SPDX-License-Identifier: Apache-2.0 */
/* Channels: creation on a loop, states, close, options, references, and the
 * per-loop book of transports and open channels. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>

#include "channel/channel_internal.h"
#include "channel/registry_internal.h"

/* ---- per-loop state: transport instances and open channels ---- */

#define MAX_LOOP_TRANSPORTS 8

typedef struct loop_book {
  weft_loop *loop;
  struct {
    const weft_transport_ops *ops;
    void *state;
  } transports[MAX_LOOP_TRANSPORTS];
  int n_transports;
  weft_channel *channels; /* open channels of this loop */
} loop_book;

static int book_key = -1;
static pthread_once_t book_key_once = PTHREAD_ONCE_INIT;

static void make_book_key(void) { book_key = weft_loop_key_create(); }

static void close_all(loop_book *b) {
  while (b->channels != NULL)
    weft__channel_close(b->channels, WEFT_PROMISE_NONE);
}

/* The second close hook: stops every transport instance, last started
 * first, once the tasks the closes queued have run (a uring channel's
 * delivery of held reads uses its loop state; freed first, it was a
 * use-after-free at shutdown, issue 28). A channel such a task opened is
 * closed first, and the teardown waits one more round for its tasks. */
static void book_fini(void *arg) {
  loop_book *b = arg;
  if (b->channels != NULL) {
    close_all(b);
    if (weft_loop_on_close(b->loop, book_fini, b) == 0)
      return;
  }
  for (int i = b->n_transports - 1; i >= 0; i--)
    if (b->transports[i].ops->loop_fini != NULL)
      b->transports[i].ops->loop_fini(b->loop, b->transports[i].state);
  weft_loop_set_local(b->loop, book_key, NULL);
  free(b);
}

/* On loop stop: close every channel, then, in the next round of close
 * hooks (weft_loop_on_close), stop the transports (book_fini). */
static void book_close(void *arg) {
  loop_book *b = arg;
  close_all(b);
  if (weft_loop_on_close(b->loop, book_fini, b) < 0)
    book_fini(b); /* no memory for a hook: at once, as before */
}

static loop_book *get_book(weft_loop *loop) {
  pthread_once(&book_key_once, make_book_key);
  if (book_key < 0)
    return NULL;
  loop_book *b = weft_loop_get_local(loop, book_key);
  if (b != NULL)
    return b;
  b = calloc(1, sizeof *b);
  if (b == NULL)
    return NULL;
  b->loop = loop;
  if (weft_loop_on_close(loop, book_close, b) < 0) {
    free(b);
    return NULL;
  }
  weft_loop_set_local(loop, book_key, b);
  return b;
}

void *weft_transport_loop_state(const weft_transport_ops *ops, weft_loop *loop,
                                int *err) {
  loop_book *b = get_book(loop);
  if (b == NULL) {
    *err = WEFT_ENOMEM;
    return NULL;
  }
  /* A transport without loop state still gets a non-NULL answer. */
  for (int i = 0; i < b->n_transports; i++)
    if (b->transports[i].ops == ops)
      return b->transports[i].state != NULL ? b->transports[i].state
                                            : (void *)ops;
  if (b->n_transports == MAX_LOOP_TRANSPORTS) {
    *err = WEFT_ENOSPC;
    return NULL;
  }
  char why[320];
  int rc = weft__transport_env_apply(ops, false, why, sizeof why);
  if (rc < 0) {
    weft_log(WEFT_LOG_ERROR, "transport %s: %s", ops->name, why);
    *err = rc;
    return NULL;
  }
  void *state = NULL;
  if (ops->loop_init != NULL) {
    rc = ops->loop_init(loop, &state);
    if (rc < 0) {
      *err = rc;
      return NULL;
    }
  }
  b->transports[b->n_transports].ops = ops;
  b->transports[b->n_transports].state = state;
  b->n_transports++;
  return state != NULL ? state : (void *)ops;
}

/* ---- creation ---- */

static _Atomic uint64_t next_channel_id = 1;

weft_channel *weft__channel_new(const weft_transport_ops *transport,
                                weft_loop *loop, int *err) {
  loop_book *b = get_book(loop);
  if (b == NULL) {
    *err = WEFT_ENOMEM;
    return NULL;
  }
  if (weft_transport_loop_state(transport, loop, err) == NULL)
    return NULL;
  weft_channel *ch = calloc(1, sizeof *ch + transport->channel_priv_size);
  if (ch == NULL) {
    *err = WEFT_ENOMEM;
    return NULL;
  }
  ch->transport = transport;
  ch->loop = loop;
  atomic_init(&ch->refcnt, 1); /* the channel's own, dropped once CLOSED */
  ch->state = WEFT_CHANNEL_REGISTERED;
  ch->id = atomic_fetch_add(&next_channel_id, 1);
  ch->auto_read = true;
  ch->read_budget = (weft_read_budget){WEFT_MAX_MESSAGES_PER_READ_DEFAULT,
                                       WEFT_MAX_BYTES_PER_READ_DEFAULT};
  ch->connect_timeout_ms = 10000;
  weft__pipeline_init(&ch->pipeline, ch);
  weft__outbound_init(&ch->out);
  weft_timer_init(loop, &ch->connect_timer);
  weft_timer_init(loop, &ch->limits.idle_timer);
  ch->loop_next = b->channels;
  if (b->channels != NULL)
    b->channels->loop_prev = ch;
  b->channels = ch;
  return ch;
}

void weft__channel_activate(weft_channel *ch) {
  if (ch->state != WEFT_CHANNEL_REGISTERED)
    return;
  ch->state = WEFT_CHANNEL_ACTIVE;
  weft__limits_activate(ch);
  weft_pipeline_fire_channel_active(&ch->pipeline);
}

/* ---- references ---- */

void weft__channel_free(weft_channel *ch) {
  weft__outbound_destroy(&ch->out);
  free(ch);
}

static void channel_free_task(void *arg) { weft__channel_free(arg); }

weft_channel *weft_channel_retain(weft_channel *ch) {
  atomic_fetch_add_explicit(&ch->refcnt, 1, memory_order_relaxed);
  return ch;
}

void weft_channel_release(weft_channel *ch) {
  if (ch == NULL ||
      atomic_fetch_sub_explicit(&ch->refcnt, 1, memory_order_acq_rel) != 1)
    return;
  /* The memory is the loop's: free it there. If the loop has finished,
   * nothing else can touch the channel, so free it here. */
  if (weft_loop_in_loop(ch->loop)) {
    /* An event of its pipeline is still on the stack (a handler closed the
     * channel from inside it): the pipeline frees it on the way out. */
    if (ch->pipeline.depth > 0)
      ch->free_pending = true;
    else
      weft__channel_free(ch);
  } else if (weft_loop_execute(ch->loop, channel_free_task, ch) < 0) {
    weft__channel_free(ch);
  }
}

/* ---- close ---- */

static void unlink_from_loop(weft_channel *ch) {
  loop_book *b = weft_loop_get_local(ch->loop, book_key);
  if (ch->loop_prev != NULL)
    ch->loop_prev->loop_next = ch->loop_next;
  else if (b != NULL && b->channels == ch)
    b->channels = ch->loop_next;
  if (ch->loop_next != NULL)
    ch->loop_next->loop_prev = ch->loop_prev;
  ch->loop_prev = ch->loop_next = NULL;
}

static void complete_close_waiters(weft_channel *ch) {
  while (ch->close_waiters != NULL) {
    weft__close_waiter *w = ch->close_waiters;
    ch->close_waiters = w->next;
    weft_promise_complete(w->promise, 0);
    free(w);
  }
}

/* A close requested while the channel is already closing completes when
 * the first close finishes. */
static void wait_for_close(weft_channel *ch, weft_promise promise) {
  weft__close_waiter *w = malloc(sizeof *w);
  if (w == NULL) {
    weft_promise_complete(promise, WEFT_ENOMEM);
    return;
  }
  *w = (weft__close_waiter){.promise = promise, .next = ch->close_waiters};
  ch->close_waiters = w;
}

/* A connect that had not completed fails when the channel closes. */
static void fail_pending_connect(weft_channel *ch, int err) {
  weft_connect_cb cb = ch->on_connect;
  ch->on_connect = NULL;
  if (cb != NULL)
    cb(ch, err, ch->connect_arg);
}

static void close_with(weft_channel *ch, weft_promise promise, int why) {
  if (ch->state == WEFT_CHANNEL_CLOSED) {
    weft_promise_complete(promise, 0);
    return;
  }
  if (ch->state == WEFT_CHANNEL_INACTIVE) {
    wait_for_close(ch, promise);
    return;
  }
  bool was_active = ch->state == WEFT_CHANNEL_ACTIVE;
  ch->state = WEFT_CHANNEL_INACTIVE;
  wait_for_close(ch, promise);
  weft_timer_stop(&ch->connect_timer);
  weft__limits_close(ch);
  weft_channel_retain(ch); /* callbacks below may drop other references */
  if (ch->transport->close != NULL)
    ch->transport->close(ch);
  unlink_from_loop(ch);
  weft__outbound_fail_all(ch, WEFT_ECLOSED);
  fail_pending_connect(ch, why);
  if (was_active)
    weft_pipeline_fire_channel_inactive(&ch->pipeline);
  ch->state = WEFT_CHANNEL_CLOSED;
  complete_close_waiters(ch);
  weft__pipeline_destroy(&ch->pipeline);
  weft_channel_release(ch); /* the channel's own reference */
  weft_channel_release(ch); /* the one taken above */
}

void weft__channel_close(weft_channel *ch, weft_promise promise) {
  close_with(ch, promise, WEFT_ECLOSED);
}

void weft_channel_transport_closed(weft_channel *ch, int err,
                                   const char *reason) {
  if (ch->state >= WEFT_CHANNEL_INACTIVE)
    return;
  if (err != 0)
    weft_pipeline_fire_exception_caught(&ch->pipeline, err, reason);
  /* The tail may have closed it already on the exception. */
  close_with(ch, WEFT_PROMISE_NONE, err != 0 ? err : WEFT_ECONNRESET);
}

/* ---- connect outcome ---- */

static void connect_timeout(void *arg) {
  weft_channel *ch = arg;
  weft_channel_log(ch, WEFT_LOG_INFO, "connect timed out after %lld ms",
                   (long long)ch->connect_timeout_ms);
  weft_channel_connected(ch, WEFT_ETIMEDOUT);
}

int weft__channel_start_connect_timer(weft_channel *ch) {
  if (ch->connect_timeout_ms <= 0)
    return 0;
  return weft_timer_start(&ch->connect_timer,
                          (uint64_t)ch->connect_timeout_ms * 1000000u, 0,
                          connect_timeout, ch);
}

void weft_channel_connected(weft_channel *ch, int status) {
  if (ch->state != WEFT_CHANNEL_REGISTERED)
    return; /* closed meanwhile: the close already reported the failure */
  weft_timer_stop(&ch->connect_timer);
  if (status < 0) {
    close_with(ch, WEFT_PROMISE_NONE, status);
    return;
  }
  weft_connect_cb cb = ch->on_connect;
  ch->on_connect = NULL;
  ch->state = WEFT_CHANNEL_ACTIVE;
  weft__limits_activate(ch);
  if (cb != NULL)
    cb(ch, 0, ch->connect_arg);
  if (ch->state == WEFT_CHANNEL_ACTIVE) /* the callback may have closed it */
    weft_pipeline_fire_channel_active(&ch->pipeline);
}

/* ---- options ---- */

static int set_watermarks(weft_channel *ch, int64_t low, int64_t high) {
  if (low < 0 || high < 0 || low > high)
    return WEFT_EINVAL;
  ch->out.low = (size_t)low;
  ch->out.high = (size_t)high;
  return 0;
}

int weft_channel_set_option(weft_channel *ch, weft_channel_option opt,
                            int64_t value) {
  switch (opt) {
  case WEFT_OPT_WRITE_LOW_WATERMARK:
    return set_watermarks(ch, value, (int64_t)ch->out.high);
  case WEFT_OPT_WRITE_HIGH_WATERMARK:
    return set_watermarks(ch, (int64_t)ch->out.low, value);
  case WEFT_OPT_CONNECT_TIMEOUT_MS:
    if (value < 0)
      return WEFT_EINVAL;
    ch->connect_timeout_ms = value;
    return 0;
  case WEFT_OPT_AUTO_READ: {
    if (value != 0 && value != 1)
      return WEFT_EINVAL;
    if (ch->transport->set_read == NULL)
      return WEFT_ENOTSUP;
    bool was_reading = weft_channel_is_reading(ch);
    ch->auto_read = value;
    return was_reading != weft_channel_is_reading(ch)
               ? weft__channel_apply_read(ch, value != 0)
               : 0;
  }
  case WEFT_OPT_MAX_MESSAGES_PER_READ:
    if (value < 1 || value > WEFT_MAX_MESSAGES_PER_READ_MAX)
      return WEFT_EINVAL;
    ch->read_budget.max_messages = (uint32_t)value;
    return 0;
  case WEFT_OPT_MAX_BYTES_PER_READ:
    if (value < 1 || value > WEFT_MAX_BYTES_PER_READ_MAX)
      return WEFT_EINVAL;
    ch->read_budget.max_bytes = (size_t)value;
    return 0;
  case WEFT_OPT_FLOW_CONTROL:
  case WEFT_OPT_OUTPUT_LIMIT:
  case WEFT_OPT_IDLE_TIMEOUT_MS:
    return weft__limits_set(ch, opt, value);
  default:
    if (ch->transport->set_option == NULL)
      return WEFT_ENOTSUP;
    return ch->transport->set_option(ch, opt, value);
  }
}

int weft_channel_get_option(const weft_channel *ch, weft_channel_option opt,
                            int64_t *value) {
  switch (opt) {
  case WEFT_OPT_WRITE_LOW_WATERMARK:
    *value = (int64_t)ch->out.low;
    return 0;
  case WEFT_OPT_WRITE_HIGH_WATERMARK:
    *value = (int64_t)ch->out.high;
    return 0;
  case WEFT_OPT_CONNECT_TIMEOUT_MS:
    *value = ch->connect_timeout_ms;
    return 0;
  case WEFT_OPT_AUTO_READ:
    *value = ch->auto_read;
    return 0;
  case WEFT_OPT_MAX_MESSAGES_PER_READ:
    *value = ch->read_budget.max_messages;
    return 0;
  case WEFT_OPT_MAX_BYTES_PER_READ:
    *value = (int64_t)ch->read_budget.max_bytes;
    return 0;
  case WEFT_OPT_FLOW_CONTROL:
  case WEFT_OPT_OUTPUT_LIMIT:
  case WEFT_OPT_IDLE_TIMEOUT_MS:
    return weft__limits_get(ch, opt, value);
  default:
    if (ch->transport->get_option == NULL)
      return WEFT_ENOTSUP;
    return ch->transport->get_option(ch, opt, value);
  }
}

/* ---- accessors and outbound entry points ---- */

weft_pipeline *weft_channel_pipeline(weft_channel *ch) { return &ch->pipeline; }
weft_read_budget weft_channel_read_budget(const weft_channel *ch) {
  return ch->read_budget;
}
bool weft_channel_auto_read(const weft_channel *ch) { return ch->auto_read; }
weft_loop *weft_channel_loop(weft_channel *ch) { return ch->loop; }
weft_channel_state weft_channel_state_of(const weft_channel *ch) {
  return ch->state;
}
bool weft_channel_is_active(const weft_channel *ch) {
  return ch->state == WEFT_CHANNEL_ACTIVE;
}
bool weft_channel_is_writable(const weft_channel *ch) {
  return ch->out.writable;
}
size_t weft_channel_pending_bytes(const weft_channel *ch) {
  return ch->out.pending_bytes;
}
uint64_t weft_channel_id(const weft_channel *ch) { return ch->id; }
const char *weft_channel_transport_name(const weft_channel *ch) {
  return ch->transport->name;
}
void *weft_channel_user_data(const weft_channel *ch) { return ch->user_data; }
void weft_channel_set_user_data(weft_channel *ch, void *data) {
  ch->user_data = data;
}
void *weft_channel_priv(const weft_channel *ch) { return (void *)ch->priv; }
const weft_transport_ops *weft_channel_transport(const weft_channel *ch) {
  return ch->transport;
}

int weft_channel_remote_address(const weft_channel *ch, char *buf, size_t len) {
  if (ch->transport->remote_address == NULL)
    return WEFT_ENOTSUP;
  return ch->transport->remote_address(ch, buf, len);
}

void weft_channel_log(const weft_channel *ch, weft_log_level level,
                      const char *fmt, ...) {
  if ((int)level > (int)weft_log_get_level())
    return;
  char msg[900], peer[80];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (weft_channel_remote_address(ch, peer, sizeof peer) == 0)
    weft_log(level, "channel %llu (peer %s): %s", (unsigned long long)ch->id,
             peer, msg);
  else
    weft_log(level, "channel %llu: %s", (unsigned long long)ch->id, msg);
}

int weft_channel_local_address(const weft_channel *ch, char *buf, size_t len) {
  if (ch->transport->local_address == NULL)
    return WEFT_ENOTSUP;
  return ch->transport->local_address(ch, buf, len);
}

/* The outbound entry points hold a reference for the whole call: the
 * operation may close the channel (a failed flush, a handler closing it on
 * writability_changed) and drop the channel's own reference while the
 * pipeline is still unwinding. */
void weft_channel_write(weft_channel *ch, void *msg, weft_promise promise) {
  weft_channel_retain(ch);
  weft_ctx_write(&ch->pipeline.tail, msg, promise);
  weft_channel_release(ch);
}

void weft_channel_write_bytes(weft_channel *ch, const void *data, size_t len,
                              weft_promise promise) {
  /* No retain for the fast path: the writability handlers it may run can
   * drop the channel's last reference, but nothing touches the channel
   * after them, here or in weft__pipeline_write_bytes_fast. Keep it so:
   * return at once after a true return. */
  if (weft__pipeline_write_bytes_fast(&ch->pipeline.tail, data, len, promise))
    return;
  weft_channel_retain(ch);
  weft__pipeline_write_bytes_slow(&ch->pipeline.tail, data, len, promise);
  weft_channel_release(ch);
}

void weft_channel_flush(weft_channel *ch) {
  weft_channel_retain(ch);
  weft_ctx_flush(&ch->pipeline.tail);
  weft_channel_release(ch);
}

void weft_channel_write_and_flush(weft_channel *ch, void *msg,
                                  weft_promise promise) {
  weft_channel_retain(ch);
  weft_ctx_write(&ch->pipeline.tail, msg, promise);
  weft_ctx_flush(&ch->pipeline.tail);
  weft_channel_release(ch);
}

void weft_channel_close(weft_channel *ch, weft_promise promise) {
  weft_channel_retain(ch);
  weft_ctx_close(&ch->pipeline.tail, promise);
  weft_channel_release(ch);
}

void weft_channel_shutdown_output(weft_channel *ch, weft_promise promise) {
  if (ch->state != WEFT_CHANNEL_ACTIVE) {
    weft_promise_complete(promise, WEFT_ENOTCONN);
    return;
  }
  if (ch->transport->shutdown_output == NULL) {
    weft_promise_complete(promise, WEFT_ENOTSUP);
    return;
  }
  weft_channel_retain(ch);
  weft_channel_flush(ch);
  /* The flush may have failed and closed the channel. */
  int rc = ch->state == WEFT_CHANNEL_ACTIVE ? ch->transport->shutdown_output(ch)
                                            : WEFT_ECLOSED;
  weft_promise_complete(promise, rc);
  weft_channel_release(ch);
}
