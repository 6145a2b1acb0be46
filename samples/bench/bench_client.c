/* SPDX-License-Identifier: Apache-2.0 */
/* bench_client.c: weft-bench's weft client. A run (wrun) measures one
 * point on the configuration's client loop: it connects the point's
 * connections, sends each the 16 B hello, and hands the pattern
 * (bench_pattern: pingpong.c, echo.c, stream.c, connect.c, idle.c) what
 * happens on them: every connection active, reads, writability, closes.
 * The pattern ends the run with bench_wrun_end (or fails it); the main
 * thread waits until every connection is gone, then until the loop has
 * run every task the run queued, and takes the result. In a +tls setup
 * the TLS handler comes first and a connection is up (the hello sent,
 * counted) once its handshake completed. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "bench_util.h"

#define RUN_TIMEOUT_S 120

void bench_wrun_signal(wrun *r, int *field, int value) {
  pthread_mutex_lock(&r->mu);
  *field = value;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

bool bench_wrun_wait(wrun *r, int *field, int value) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += RUN_TIMEOUT_S;
  bool ok = true;
  pthread_mutex_lock(&r->mu);
  while (*field < value && ok)
    ok = pthread_cond_timedwait(&r->cv, &r->mu, &dl) != ETIMEDOUT;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

void bench_wrun_close_all(wrun *r) {
  for (int i = 0; i < r->n; i++)
    if (!r->c[i].gone && r->c[i].ch != NULL)
      weft_channel_close(r->c[i].ch, WEFT_PROMISE_NONE);
  /* a channel still connecting is closed when its channel_active sees
   * PH_DONE (client_active) */
}

void bench_wrun_end(wrun *r) {
  r->ph.phase = PH_DONE;
  bench_wrun_close_all(r);
}

void bench_wrun_fail(wrun *r, int err) {
  if (r->error == 0)
    r->error = err;
  bench_wrun_end(r);
}

static void barrier_task(void *arg) {
  wrun *r = arg;
  bench_wrun_signal(r, &r->barrier, 1);
}

void bench_wconn_write_msg(wconn *c) {
  static const uint8_t small[WEFT_WRITE_COALESCE_MAX];
  weft_pool *pool = c->pool;
  size_t size = c->run->pt->size;
  if (size <= sizeof small) { /* as an application writes small messages */
    weft_ctx_write_bytes(c->ctx, small, size, WEFT_PROMISE_NONE);
    return;
  }
  for (size_t off = 0; off < size;) {
    size_t k = size - off > BENCH_CHUNK ? BENCH_CHUNK : size - off;
    weft_buf *b = weft_buf_alloc(pool, k);
    if (b == NULL) {
      bench_wrun_fail(c->run, WEFT_ENOMEM);
      return;
    }
    b->writer_index += k;
    weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
    off += k;
  }
}

static void write_hello(wconn *c, uint32_t mode, uint64_t unit) {
  weft_buf *b = weft_buf_alloc(weft_loop_pool(c->run->loop), sizeof(hello));
  if (b == NULL) {
    bench_wrun_fail(c->run, WEFT_ENOMEM);
    return;
  }
  hello h = {BENCH_HELLO_MAGIC, mode, unit};
  weft_buf_write_bytes(b, &h, sizeof h);
  weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
}

/* ---- the handler ---- */

/* The connection is up (with TLS: its handshake completed): the hello,
 * then the pattern starts once all are. */
static void client_up(weft_ctx *ctx, wconn *c) {
  wrun *r = c->run;
  if (r->ph.phase == PH_DONE) { /* the run failed while this one connected */
    weft_ctx_close(ctx, WEFT_PROMISE_NONE);
    return;
  }
  if (!bench_opt.plain_echo)
    write_hello(c, r->pat->server_mode, r->unit);
  weft_ctx_flush(ctx);
  if (r->pat->active != NULL)
    r->pat->active(r, c);
  if (r->pat->start != NULL && ++r->connected == r->n) {
    bench_phases_start(&r->ph, bench_now_ns());
    r->pat->start(r);
  }
}

static void client_active(weft_ctx *ctx) {
  wconn *c = weft_ctx_state(ctx);
  c->ctx = ctx;
  c->pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  /* held until inactive: bench_wrun_close_all closes channels outside
   * their own callbacks, where only a reference keeps them alive */
  c->ch = weft_channel_retain(weft_ctx_channel(ctx));
  if (c->run->s->tls_client == NULL)
    client_up(ctx, c);
}

/* Prints the first TLS session's protocol and cipher of a setup. */
static void tell_cipher(wrun *r, weft_channel *ch) {
  weft_tls_info info;
  if (atomic_exchange(&r->s->tls_told, true) ||
      weft_tls_info_get(ch, &info) < 0)
    return;
  fprintf(stderr, "weft-bench: %s: TLS %s, cipher %s, %s\n", r->s->cf->label,
          info.protocol != NULL ? info.protocol : "?",
          info.cipher != NULL ? info.cipher : "?",
          info.ktls_tx ? "kTLS TX" : "user-space records");
}

/* TLS: the handshake's outcome. A failure's reason is printed and the run
 * fails with it; the TLS handler closes the channel. */
static void client_event(weft_ctx *ctx, void *event) {
  wconn *c = weft_ctx_state(ctx);
  if (weft_msg_is(event, &weft_tls_event_type)) {
    const weft_tls_event *ev = event;
    if (ev->kind == WEFT_TLS_HANDSHAKE_DONE) {
      tell_cipher(c->run, weft_ctx_channel(ctx));
      client_up(ctx, c);
    } else if (ev->kind == WEFT_TLS_HANDSHAKE_FAILED &&
               c->run->ph.phase != PH_DONE) {
      /* the first failure of a run says why (the certificate, the CA) */
      fprintf(stderr, "weft-bench: %s: %s\n", c->run->s->cf->label,
              ev->reason != NULL ? ev->reason : "TLS handshake failed");
      bench_wrun_fail(c->run, ev->status < 0 ? ev->status : WEFT_EPROTO);
    }
  }
  weft_ctx_fire_user_event(ctx, event);
}

static void client_read(weft_ctx *ctx, void *msg) {
  wconn *c = weft_ctx_state(ctx);
  wrun *r = c->run;
  size_t n = weft_buf_readable(msg);
  weft_buf_release(msg);
  if (r->ph.phase != PH_DONE && r->pat->read != NULL)
    r->pat->read(r, c, n);
}

static void client_writability(weft_ctx *ctx, bool writable) {
  wconn *c = weft_ctx_state(ctx);
  if (writable && c->run->pat->writable != NULL)
    c->run->pat->writable(c);
}

static void release_task(void *arg) { weft_channel_release(arg); }

void bench_wconn_gone(wrun *r, wconn *c) {
  c->gone = true;
  pthread_mutex_lock(&r->mu);
  r->closed++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void client_inactive(weft_ctx *ctx) {
  wconn *c = weft_ctx_state(ctx);
  wrun *r = c->run;
  if (c->gone)
    return;
  if (c->ch != NULL) {
    /* Released from a task, not here: inactive runs inside
     * weft_channel_close, which still touches the pipeline after the
     * handlers return, so the last reference must outlive that call. */
    weft_loop_execute(r->loop, release_task, c->ch);
    c->ch = NULL;
  }
  if (r->pat->inactive != NULL) {
    if (r->pat->inactive(r, c))
      return;
  } else if (r->ph.phase != PH_DONE) {
    bench_wrun_fail(r, WEFT_ECONNRESET); /* the server went away mid-run */
  }
  bench_wconn_gone(r, c);
}

static void client_exception(weft_ctx *ctx, int err, const char *reason) {
  fprintf(stderr, "weft-bench: channel error: %s (%s)\n", reason,
          weft_strerror(err));
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler client_handler = {
    .name = "bench-client",
    .channel_active = client_active,
    .channel_inactive = client_inactive,
    .channel_read = client_read,
    .writability_changed = client_writability,
    .user_event = client_event,
    .exception_caught = client_exception};

static void client_init(weft_channel *ch, void *arg) {
  wconn *c = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (c->run->s->tls_client != NULL &&
      weft_tls_add_first(p, c->run->s->tls_client, NULL) < 0) {
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  weft_pipeline_add_last(p, "bench-client", &client_handler, arg);
}

static void on_connect(weft_channel *ch, int status, void *arg) {
  (void)ch;
  wconn *c = arg;
  if (status >= 0)
    return;
  fprintf(stderr, "weft-bench: connect to %s: %s\n", c->run->uri,
          weft_strerror(status));
  bench_wrun_fail(c->run, status);
  if (!c->gone)
    bench_wconn_gone(c->run, c);
}

int bench_wconn_connect(wrun *r, wconn *c) {
  c->t_connect = bench_now_ns();
  weft_bootstrap b = {.loop = r->loop,
                      .init = client_init,
                      .init_arg = c,
                      .on_connect = on_connect,
                      .connect_arg = c};
  weft_channel_config_init(&b.options);
  return weft_bootstrap_connect_endpoint(&b, &r->ep);
}

/* ---- the run, from the main thread ---- */

static void run_init(wrun *r, session *s, const point *pt) {
  *r = (wrun){.pt = pt,
              .pat = bench_patterns[pt->pattern],
              .loop = weft_loop_group_get(s->cg, 0),
              .uri = s->uri,
              .s = s,
              .n = pt->conns, /* 1 for connect: one at a time */
              .ph.phase = PH_WARM};
  char why[400];
  if (weft_endpoint_parse(r->uri, &r->ep, why, sizeof why) < 0)
    bench_fail("%s", why);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->c = calloc((size_t)r->n, sizeof *r->c);
  if (r->c == NULL)
    bench_die("calloc");
  for (int i = 0; i < r->n; i++)
    r->c[i].run = r;
}

static void run_free(wrun *r) {
  free(r->rtt);
  free(r->c);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

static void run_connect(wrun *r) {
  if (r->pat->begin != NULL) {
    r->pat->begin(r);
    return;
  }
  for (int i = 0; i < r->n; i++)
    if (bench_wconn_connect(r, &r->c[i]) < 0)
      bench_fail("cannot connect to %s", r->uri);
}

/* Waits until every connection is gone and the loop has run the tasks
 * the run queued; exits on a timeout or a failed run. */
static void run_wait_end(wrun *r, session *s) {
  if (!bench_wrun_wait(r, &r->closed, r->n))
    bench_fail("%s: timed out", r->uri);
  /* Tasks run in order: once this one ran, no queued task of the pattern
   * (stream_pump_task) can touch r any more. */
  weft_loop_execute(r->loop, barrier_task, r);
  if (!bench_wrun_wait(r, &r->barrier, 1))
    bench_fail("%s: the client loop does not run tasks", r->uri);
  if (r->error != 0) {
    fprintf(stderr, "weft-bench: %s %s: %s\n", s->cf->label, r->pat->name,
            weft_strerror(r->error));
    exit(1);
  }
}

/* WEFT_BENCH_LOOP_STATS=1: one line per weft repetition on stderr, what
 * the client loop and the server's first loop did in it (sleeps, window
 * shrinks and grows, preemptions seen, the window at the end): what a
 * repetition that ran at the blocking round trip was doing. */
typedef struct loop_trace {
  weft_loop_stats cl, sv;
} loop_trace;

static bool loop_trace_on(void) {
  const char *v = getenv("WEFT_BENCH_LOOP_STATS");
  return v != NULL && *v != '\0' && *v != '0';
}

static void loop_trace_take(const session *s, loop_trace *t) {
  weft_loop_stats_get(weft_loop_group_get(s->cg, 0), &t->cl);
  if (s->sg != NULL)
    weft_loop_stats_get(weft_loop_group_get(s->sg, 0), &t->sv);
}

static void loop_trace_side(const char *side, const weft_loop_stats *a,
                            const weft_loop_stats *b) {
  fprintf(stderr,
          " %s: sleeps %llu shrinks %llu (contended %llu) grows %llu preempt "
          "%llu window %llu ns busy reads %llu (%llu found) watcher polls "
          "%llu;",
          side, (unsigned long long)(b->sleeps - a->sleeps),
          (unsigned long long)(b->window_shrinks - a->window_shrinks),
          (unsigned long long)(b->window_contended - a->window_contended),
          (unsigned long long)(b->window_grows - a->window_grows),
          (unsigned long long)(b->preemptions - a->preemptions),
          (unsigned long long)b->busy_poll_window_ns,
          (unsigned long long)(b->busy_reads - a->busy_reads),
          (unsigned long long)(b->busy_read_hits - a->busy_read_hits),
          (unsigned long long)(b->watcher_polls - a->watcher_polls));
}

static void loop_trace_print(const session *s, const point *pt,
                             const loop_trace *before, const result *res) {
  loop_trace after;
  loop_trace_take(s, &after);
  fprintf(stderr, "loop-stats %s %s %zu B:", s->cf->label,
          bench_patterns[pt->pattern]->name, pt->size);
  loop_trace_side("client", &before->cl, &after.cl);
  if (s->sg != NULL)
    loop_trace_side("server", &before->sv, &after.sv);
  if (res->has_lat)
    fprintf(stderr, " p50 %.2f us", res->lat.p50);
  fputc('\n', stderr);
}

void bench_weft_measure(session *s, const point *pt, result *res) {
  loop_trace trace;
  bool tracing = loop_trace_on();
  if (tracing)
    loop_trace_take(s, &trace);
  wrun r;
  run_init(&r, s, pt);
  if (r.pat->prepare != NULL)
    r.pat->prepare(&r);
  run_connect(&r);
  if (r.pat->await != NULL)
    r.pat->await(s, &r, res);
  run_wait_end(&r, s);
  if (r.pat->finish != NULL)
    r.pat->finish(&r, res);
  run_free(&r);
  if (tracing)
    loop_trace_print(s, pt, &trace, res);
}
