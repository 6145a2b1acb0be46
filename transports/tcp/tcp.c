/* SPDX-License-Identifier: Apache-2.0 */
/* The epoll TCP transport ("tcp"): the portable baseline.
 *
 * Every socket of this transport (listeners and channels) is an fd watcher
 * of its loop (weft_watcher, weft/source.h): the socket sits in the loop's
 * own epoll set, which the hybrid selector polls without blocking while
 * it spins (one epoll_wait for all watchers) and sleeps on when idle, so a
 * readiness costs one epoll call whether the loop spins or sleeps. The
 * interest follows what the socket needs: EPOLLIN while reading, EPOLLOUT
 * only while a send is blocked, nothing (out of the set) when neither.
 * A channel's socket is edge-triggered, so the loop serves connections in
 * the order their bytes came (nginx's order): a level-triggered socket
 * just reported goes back on epoll's ready list ahead of the sockets that
 * became ready after it, and over 64 keep-alive connections that put
 * weft-http's p99 above nginx's (samples/http/docs/benchmarks.md). A read
 * stops at EAGAIN or a short read (the socket is empty; more bytes are a
 * new edge); a spent read budget re-arms the socket (read_ready). A
 * listener stays level-triggered: its accepts have a budget of their own.
 *
 * Sockets are non-blocking and sends use MSG_NOSIGNAL, so a peer that went
 * away gives EPIPE instead of a SIGPIPE.
 *
 * kTLS: ktls_tx hands record encryption to the kernel (the "tls" upper
 * layer protocol, TLS_TX) for the TLS handler; writes stay plain writes of
 * plaintext, and ktls_send_record sends a control record (close_notify).
 *
 * This plugin uses the public headers only, as an out-of-tree plugin would.
 */
#include <errno.h>
#include <limits.h>
#include <linux/tls.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/pipeline.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/tcp/tcp.h"

/* ---- tuning ---- */

#define TCP_MAX_IOV 64              /* iovecs per sendmsg */
#define TCP_MAX_WRITES_PER_FLUSH 16 /* sendmsg calls before yielding */
/* Bytes per sendfile(2) of a file region: as a sendmsg of the queue's
 * iovecs, one call moves what the socket takes; 1 MiB keeps one call of a
 * flush's TCP_MAX_WRITES_PER_FLUSH from holding the loop on a socket with
 * a huge send buffer. */
#define TCP_SENDFILE_MAX (1u << 20)
#define TCP_MAX_ACCEPTS_PER_EVENT 64 /* accepts per readiness */
/* Bytes from which a busy read reports a lot (WEFT_BUSY_READ_MORE): the
 * largest receive size, a bulk flow's read. Small batches (64 messages of
 * 16 B in flight) stay below it and keep being busy-read. */
#define TCP_BUSY_READ_MORE_BYTES 65536

/* Adaptive receive sizes (Netty's AdaptiveRecvByteBufAllocator): the next
 * read's buffer size is a guess from this table, raised two steps when a
 * read filled its buffer and lowered one step after two reads in a row that
 * would have fit the next smaller size. */
static const size_t recv_sizes[] = {512,  1024,  2048,  4096,
                                    8192, 16384, 32768, 65536};
#define RECV_SIZES (sizeof recv_sizes / sizeof recv_sizes[0])
#define RECV_INITIAL 3 /* 4 KiB: fits most requests, no waste for small */
#define RECV_GROW 2
#define RECV_SHRINK 1

/* ---- conversions at the edge ---- */

static int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- the per-loop instance ---- */

/* A socket and its watcher: w.fd is the socket, -1 once closed; w.loop is
 * set while the watcher is registered (from when the fd is ours until it
 * is closed). */
typedef struct tcp_io {
  weft_watcher w;
} tcp_io;

typedef struct tcp_listener tcp_listener;

typedef struct tcp_loop {
  weft_loop *loop;
  tcp_listener *listeners; /* closed by loop_fini if still open */
} tcp_loop;

struct tcp_listener {
  tcp_io io;
  weft_listener *l;
  tcp_loop *tl;
  weft_accept_guard guard; /* closes new connections at the fd limit */
  weft_timer backoff;      /* accepting pauses when nothing else helps */
  bool paused;
  tcp_listener *prev, *next;
};

/* Socket options set before the socket exists wait here. */

/* Per-channel state (channel_priv_size bytes, zeroed by the core). */
typedef struct tcp_channel {
  tcp_io io;
  weft_channel *ch;
  tcp_loop *tl;
  bool has_fd;           /* io.w.fd is ours (adopt / connect got that far) */
  bool connecting;       /* non-blocking connect in progress */
  bool reading;          /* auto-read: EPOLLIN wanted */
  bool want_out;         /* EPOLLOUT wanted: flushed bytes wait */
  bool in_flush;         /* flush is on the stack (re-entry guard) */
  bool shutdown_pending; /* shut down output once the queue drained */
  bool output_shut;
  bool ulp_tls;          /* the "tls" ULP is on the socket (kTLS) */
  uint8_t recv_index;    /* into recv_sizes */
  bool recv_shrink_next; /* the last read was small too */
  weft_sockopts opts;    /* set before the socket existed, applied after */
} tcp_channel;

static tcp_channel *tcp_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

/* Takes `fd` into `io` and registers its watcher with no events yet (no
 * system call). Fails only on a bug (a watcher registered twice). */
static int io_open(tcp_loop *tl, tcp_io *io, int fd, weft_watcher_cb cb,
                   weft_watcher_busy_read_fn busy_read, void *owner) {
  weft_watcher_init(&io->w, fd, cb, owner);
  io->w.busy_read = busy_read;
  return weft_loop_add_watcher(tl->loop, &io->w, 0);
}

/* Makes `io`'s interest `want`, with at most one epoll_ctl. An empty
 * interest takes the fd out of the loop's epoll set: EPOLLHUP and EPOLLERR
 * are reported even with no events requested, and a socket nobody reads
 * would otherwise report them on every poll. */
static int io_set_interest(tcp_loop *tl, tcp_io *io, uint32_t want) {
  if (io->w.fd < 0 || io->w.loop == NULL)
    return 0;
  return weft_loop_modify_watcher(tl->loop, &io->w, want);
}

/* Takes `io` out of the set (with its events still waiting in the batch
 * being dispatched) and closes its fd. */
static void io_close(tcp_loop *tl, tcp_io *io) {
  if (io->w.fd < 0)
    return;
  if (io->w.loop != NULL)
    weft_loop_remove_watcher(tl->loop, &io->w);
  close(io->w.fd);
  io->w.fd = -1;
}

static int tcp_loop_init(weft_loop *loop, void **loop_state) {
  tcp_loop *tl = calloc(1, sizeof *tl);
  if (tl == NULL) {
    weft_log(WEFT_LOG_ERROR, "tcp: cannot start on loop %d: %s",
             weft_loop_index(loop), weft_strerror(WEFT_ENOMEM));
    return WEFT_ENOMEM;
  }
  tl->loop = loop;
  *loop_state = tl;
  return 0;
}

static void listener_free(tcp_listener *tln);

/* The core closed every channel of this loop before; listeners a server did
 * not close are closed here (their weft_listener forgets us). */
static void tcp_loop_fini(weft_loop *loop, void *loop_state) {
  tcp_loop *tl = loop_state;
  while (tl->listeners != NULL) {
    tcp_listener *tln = tl->listeners;
    weft_listener_set_priv(tln->l, NULL);
    listener_free(tln);
  }
  (void)loop;
  free(tl);
}

static tcp_loop *loop_state_of(weft_loop *loop, int *err) {
  return weft_transport_loop_state(&weft__transport_tcp, loop, err);
}

/* ---- listeners ---- */

static void listener_pause(tcp_listener *tln);

static void listener_resume(void *arg) {
  tcp_listener *tln = arg;
  tln->paused = false;
  int err = io_set_interest(tln->tl, &tln->io, EPOLLIN);
  if (err < 0) {
    weft_log(WEFT_LOG_ERROR, "tcp: listener: cannot resume accepting: %s",
             weft_strerror(err));
    listener_pause(tln);
  }
}

/* Stops accepting for a while: the pending connection stays in the backlog
 * and epoll would report it again at once. */
static void listener_pause(tcp_listener *tln) {
  if (tln->paused)
    return;
  tln->paused = true;
  io_set_interest(tln->tl, &tln->io, 0);
  weft_timer_start(&tln->backoff, WEFT_ACCEPT_BACKOFF_NS, 0, listener_resume,
                   tln);
}

/* Accepts what waits, at most TCP_MAX_ACCEPTS_PER_EVENT. At the fd limit
 * the guard closes each waiting connection at once (the client sees it
 * closed, not a hang) and accepting goes on: descriptors may be free for
 * the next. When even that cannot help, accepting pauses. */
static void listener_event(weft_watcher *w, uint32_t events) {
  (void)events; /* an error shows in accept4 */
  tcp_listener *tln = w->data;
  for (int i = 0; i < TCP_MAX_ACCEPTS_PER_EVENT && tln->io.w.fd >= 0; i++) {
    int fd = accept4(tln->io.w.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      weft_accept_guard_accepted(&tln->guard);
      weft_listener_accepted(tln->l, fd);
      continue;
    }
    switch (errno) {
    case EAGAIN:
      return;
    case EINTR:
    case ECONNABORTED: /* the peer gave up while in the backlog */
    case EPROTO:
    case EPERM: /* a firewall said no to this one */
      continue;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM: {
      int rc = weft_accept_guard_refuse(&tln->guard, tln->io.w.fd, neg_errno());
      if (rc > 0)
        continue; /* one closed; the next, or descriptors are back */
      if (rc < 0)
        listener_pause(tln);
      return; /* 0: none waits; epoll reports the next */
    }
    default:
      weft_log(WEFT_LOG_ERROR, "tcp: accept: %s; pausing the listener",
               weft_strerror(neg_errno()));
      listener_pause(tln);
      return;
    }
  }
}

static int tcp_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  int err = 0;
  tcp_loop *tl = loop_state_of(weft_listener_loop(l), &err);
  if (tl == NULL)
    return err;
  int fd;
  err = weft_socket_listen(ep, backlog, SOCK_NONBLOCK | SOCK_CLOEXEC, &fd);
  if (err < 0)
    return err;

  tcp_listener *tln = calloc(1, sizeof *tln);
  if (tln == NULL) {
    err = WEFT_ENOMEM;
    goto failed_alloc;
  }
  *tln = (tcp_listener){.l = l, .tl = tl};
  weft_timer_init(tl->loop, &tln->backoff);
  err = io_open(tl, &tln->io, fd, listener_event, NULL, tln);
  if (err == 0)
    err = io_set_interest(tl, &tln->io, EPOLLIN);
  if (err < 0)
    goto failed_register;
  weft_accept_guard_init(&tln->guard, tl->loop, "tcp");
  tln->next = tl->listeners;
  if (tl->listeners != NULL)
    tl->listeners->prev = tln;
  tl->listeners = tln;
  weft_listener_set_priv(l, tln);
  return 0;

failed_register:
  if (tln->io.w.loop != NULL)
    weft_loop_remove_watcher(tl->loop, &tln->io.w);
  free(tln);
failed_alloc:
  close(fd);
  return err;
}

static void listener_free(tcp_listener *tln) {
  tcp_loop *tl = tln->tl;
  weft_timer_stop(&tln->backoff);
  weft_accept_guard_fini(&tln->guard);
  io_close(tl, &tln->io);
  if (tln->prev != NULL)
    tln->prev->next = tln->next;
  else
    tl->listeners = tln->next;
  if (tln->next != NULL)
    tln->next->prev = tln->prev;
  free(tln);
}

static void tcp_listen_close(weft_listener *l) {
  tcp_listener *tln = weft_listener_priv(l);
  if (tln == NULL)
    return; /* the loop stopped first and closed it */
  weft_listener_set_priv(l, NULL);
  listener_free(tln);
}

static int tcp_listen_address(weft_listener *l, char *buf, size_t len) {
  tcp_listener *tln = weft_listener_priv(l);
  if (tln == NULL || tln->io.w.fd < 0)
    return WEFT_ECLOSED;
  return weft_socket_address(tln->io.w.fd, false, buf, len);
}

/* ---- socket options ---- */

static int channel_fd(const tcp_channel *tc) {
  return tc->has_fd ? tc->io.w.fd : -1;
}

static int tcp_set_option(weft_channel *ch, weft_channel_option opt,
                          int64_t v) {
  tcp_channel *tc = tcp_of(ch);
  return weft_sockopts_set(&tc->opts, channel_fd(tc), opt, v);
}

static int tcp_get_option(const weft_channel *ch, weft_channel_option opt,
                          int64_t *v) {
  const tcp_channel *tc = tcp_of(ch);
  return weft_sockopts_get(&tc->opts, channel_fd(tc), opt, v);
}

/* ---- channel interest ---- */

/* What the channel wants from epoll now, edge-triggered (file comment). */
static uint32_t channel_interest(const tcp_channel *tc) {
  if (tc->connecting)
    return EPOLLOUT | EPOLLET;
  uint32_t want =
      (tc->reading ? EPOLLIN | EPOLLRDHUP : 0) | (tc->want_out ? EPOLLOUT : 0);
  return want != 0 ? want | EPOLLET : 0;
}

static int channel_update_interest(tcp_channel *tc) {
  return io_set_interest(tc->tl, &tc->io, channel_interest(tc));
}

static bool channel_open(const tcp_channel *tc) {
  return tc->io.w.fd >= 0 &&
         weft_channel_state_of(tc->ch) == WEFT_CHANNEL_ACTIVE;
}

/* ---- writing ---- */

/* Shuts the sending side down once the queue drained (see shutdown_output). */
static int finish_shutdown(tcp_channel *tc) {
  tc->shutdown_pending = false;
  if (tc->output_shut)
    return 0;
  tc->output_shut = true;
  return shutdown(tc->io.w.fd, SHUT_WR) < 0 ? neg_errno() : 0;
}

/* One sendfile of the file region first in the queue, at most
 * TCP_SENDFILE_MAX bytes (from the region's offset: the descriptor's own
 * is not moved). Returns bytes sent, 0 when the socket is full, or an
 * error. A file that ends before the region (sendfile returns 0: it
 * shrank) fails the region's write and closes the channel with the
 * reason (weft_outbound_file_region_failed), and so does a failure of
 * sendfile that is the file's (a read error), not the socket's. */
static ssize_t send_region(tcp_channel *tc, const weft_file_region *r,
                           size_t *asked) {
  uint64_t left = weft_file_region_left(r);
  size_t want = left < TCP_SENDFILE_MAX ? (size_t)left : TCP_SENDFILE_MAX;
  off_t off = (off_t)(r->position + r->transferred);
  *asked = want;
  ssize_t w;
  do
    w = sendfile(tc->io.w.fd, r->fd, &off, want);
  while (w < 0 && errno == EINTR);
  if (w > 0)
    return w;
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return 0;
  int err = w == 0 ? WEFT_EIO : neg_errno();
  if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
    return err; /* the peer's doing: the usual write error */
  char reason[160];
  weft_file_region_failure(reason, sizeof reason, r, "sendfile", err);
  weft_outbound_file_region_failed(tc->ch, err, reason);
  return err;
}

/* One gathering sendmsg of the flushed bytes (or a sendfile, when a file
 * region is first). Returns bytes sent, 0 when the socket is full, or an
 * error. */
static ssize_t send_some(tcp_channel *tc, size_t *asked, bool *from_file) {
  struct iovec iov[TCP_MAX_IOV];
  int n = weft_outbound_iov(tc->ch, iov, TCP_MAX_IOV, asked);
  const weft_file_region *r = weft_outbound_file_region(tc->ch);
  *from_file = n == 0 && r != NULL;
  if (n == 0) /* no region: only empty buffers, which consumed(0) takes */
    return r != NULL ? send_region(tc, r, asked) : 0;
  /* A region follows these bytes (an HTTP head before its file): MSG_MORE
   * holds them for the sendfile that comes next in this flush, so head
   * and body leave in one segment, as one gathered sendmsg sent them
   * before, and a socket with Nagle on does not wait for the head's ACK
   * to send the body. */
  int flags = MSG_NOSIGNAL | MSG_DONTWAIT | (r != NULL ? MSG_MORE : 0);
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t w;
  /* One buffer: send, which skips sendmsg's copy of the msghdr and its
   * iovec from user memory (a ping-pong's usual case). */
  do
    w = n == 1 ? send(tc->io.w.fd, iov[0].iov_base, iov[0].iov_len, flags)
               : sendmsg(tc->io.w.fd, &msg, flags);
  while (w < 0 && errno == EINTR);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : neg_errno();
  return w;
}

/* Sends flushed bytes until the queue is empty, the socket is full or the
 * batch limit is reached; asks for EPOLLOUT while bytes remain. Promise
 * callbacks run inside weft_outbound_consumed and may write, flush or close
 * the channel: a nested flush returns at once (this loop picks its bytes
 * up), and a close ends the loop. The caller holds a channel reference. */
static int write_pending(tcp_channel *tc) {
  if (tc->in_flush)
    return 0;
  tc->in_flush = true;
  int err = 0;
  bool blocked = false;
  for (int i = 0; i < TCP_MAX_WRITES_PER_FLUSH && !blocked; i++) {
    if (!channel_open(tc) || weft_outbound_is_empty(tc->ch))
      break;
    size_t asked = 0;
    bool from_file;
    ssize_t w = send_some(tc, &asked, &from_file);
    if (w < 0) {
      err = (int)w;
      break;
    }
    /* A short sendmsg means a full socket (the kernel then sends the
     * EPOLLOUT edge when room comes). A short sendfile may mean the file
     * ended (it shrank): no edge would come, so only EAGAIN (0) counts
     * as blocked for a region; the next call finds the end or EAGAIN. */
    blocked = asked > 0 && (size_t)w < asked && !(from_file && w > 0);
    weft_outbound_consumed(tc->ch, (size_t)w);
  }
  tc->in_flush = false;
  if (err < 0 || !channel_open(tc))
    return err;
  bool empty = weft_outbound_is_empty(tc->ch);
  tc->want_out = !empty;
  if (empty && tc->shutdown_pending)
    err = finish_shutdown(tc);
  int rc = channel_update_interest(tc);
  /* The batch limit, not a full socket, stopped the sends: the socket
   * stays writable, so no new edge would report EPOLLOUT (the interest is
   * edge-triggered). Re-armed, it is reported behind the other ready
   * sockets, and the rest goes then. */
  if (rc == 0 && !empty && !blocked)
    rc = weft_loop_rearm_watcher(tc->tl->loop, &tc->io.w);
  return err < 0 ? err : rc;
}

static int tcp_flush(weft_channel *ch) {
  tcp_channel *tc = tcp_of(ch);
  if (tc->want_out)
    return 0;              /* the socket is full: EPOLLOUT sends the rest */
  weft_channel_retain(ch); /* a promise may close and free the channel */
  int err = write_pending(tc);
  weft_channel_release(ch);
  return err;
}

static int tcp_shutdown_output(weft_channel *ch) {
  tcp_channel *tc = tcp_of(ch);
  if (!tc->has_fd || tc->io.w.fd < 0)
    return WEFT_ENOTCONN;
  if (!weft_outbound_is_empty(ch)) {
    tc->shutdown_pending = true; /* after the last queued byte */
    return 0;
  }
  return finish_shutdown(tc);
}

/* ---- reading ---- */

static void recv_record(tcp_channel *tc, size_t got, size_t capacity) {
  if (got >= capacity) {
    size_t next = (size_t)tc->recv_index + RECV_GROW;
    tc->recv_index = (uint8_t)(next < RECV_SIZES ? next : RECV_SIZES - 1);
    tc->recv_shrink_next = false;
  } else if (tc->recv_index >= RECV_SHRINK &&
             got <= recv_sizes[tc->recv_index - RECV_SHRINK]) {
    if (tc->recv_shrink_next) {
      tc->recv_index -= RECV_SHRINK;
      tc->recv_shrink_next = false;
    } else {
      tc->recv_shrink_next = true;
    }
  } else {
    tc->recv_shrink_next = false;
  }
}

/* Events after which a short read does not mean an empty socket: the
 * peer's FIN or an error may wait behind the bytes, and came with the
 * edge already reported, so the read goes on to EOF, the error or EAGAIN. */
#define TCP_READ_TO_END (EPOLLRDHUP | EPOLLHUP | EPOLLERR)

/* The budget left bytes in the socket: no new edge will report them. */
static void rearm(tcp_channel *tc) {
  int err = weft_loop_rearm_watcher(tc->tl->loop, &tc->io.w);
  if (err < 0) {
    char reason[96];
    snprintf(reason, sizeof reason, "epoll_ctl (re-arm): %s",
             weft_strerror(err));
    weft_channel_transport_closed(tc->ch, err, reason);
  }
}

/* Outcome of one read into a fresh buffer: bytes (> 0, fired as
 * channel_read), 0 at EOF, WEFT_EAGAIN when drained, or an error. */
static ssize_t read_once(tcp_channel *tc, weft_pool *pool, size_t *capacity) {
  weft_buf *b = weft_buf_alloc(pool, recv_sizes[tc->recv_index]);
  if (b == NULL)
    return WEFT_ENOMEM;
  ssize_t n;
  /* recv, not read: a socket read through read(2) also takes the file
   * position lock and the VFS checks (fdget_pos, rw_verify_area), which a
   * perf profile of a blocking ping-pong showed and recv(2) skips. */
  do
    n = recv(tc->io.w.fd, weft_buf_wptr(b), weft_buf_writable(b), 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0) {
    int err = n == 0 ? 0 : errno == EWOULDBLOCK ? WEFT_EAGAIN : neg_errno();
    weft_buf_release(b);
    return err;
  }
  *capacity = b->capacity;
  b->writer_index += (size_t)n;
  weft_pipeline_fire_channel_read(weft_channel_pipeline(tc->ch), b);
  return n;
}

/* Reads what is ready within the channel's read budget
 * (weft_channel_read_budget: reads and bytes per loop iteration; a socket
 * is dispatched at most once per iteration, so per readiness is per
 * iteration), then fires one channel_read_complete. What the budget leaves
 * stays in the socket, which is re-armed (weft_loop_rearm_watcher: the
 * interest is edge-triggered), so the next iteration's epoll_wait reports
 * it again, behind the loop's other ready sockets. A handler may close the
 * channel or stop reading inside channel_read: the state is checked after
 * every read. The caller holds a channel reference. Returns 0 when the
 * first read found nothing (EAGAIN), WEFT_BUSY_READ_MORE when the budget
 * ran out or it read TCP_BUSY_READ_MORE_BYTES or more and the channel
 * still reads (a flood or a bulk transfer: the loop asks epoll next), 1
 * otherwise. `busy`: a busy read, not announced by epoll, so a buffer it
 * cannot get does not close the channel: it may well have nothing to read
 * (the read epoll announces next meets the shortage with bytes waiting,
 * and closes it then). `events`: what epoll reported (0 for a busy read);
 * a short read ends the reads unless they hold TCP_READ_TO_END. */
static int read_ready(tcp_channel *tc, bool busy, uint32_t events) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(tc->ch));
  weft_read_meter rb = {0}; /* one readiness is one iteration's budget */
  weft_read_meter_begin(&rb, tc->ch, 1);
  ssize_t last = 0;
  bool fired = false, spent = false;
  while (rb.msgs < rb.budget.max_messages) {
    size_t capacity = 0;
    last = pool != NULL ? read_once(tc, pool, &capacity) : WEFT_ENOMEM;
    if (last <= 0)
      break;
    fired = true;
    bool used_up = weft_read_meter_spend(&rb, tc->ch, 1, (size_t)last);
    recv_record(tc, (size_t)last, capacity);
    if (!channel_open(tc) || !tc->reading ||
        ((size_t)last < capacity && !(events & TCP_READ_TO_END)))
      break;
    spent = used_up;
    if (spent)
      break;
  }
  if (fired && channel_open(tc))
    weft_pipeline_fire_channel_read_complete(weft_channel_pipeline(tc->ch));
  if (spent && channel_open(tc) && tc->reading)
    rearm(tc);
  if (!channel_open(tc) || last > 0 || last == WEFT_EAGAIN) {
    if ((spent || rb.bytes >= TCP_BUSY_READ_MORE_BYTES) && channel_open(tc) &&
        tc->reading)
      return WEFT_BUSY_READ_MORE;
    return fired ? 1 : 0;
  }
  if (busy && !fired && last == WEFT_ENOMEM)
    return 0;
  if (last == 0) {
    weft_channel_transport_closed(tc->ch, 0, "peer closed");
  } else {
    char reason[96];
    snprintf(reason, sizeof reason, "read: %s", weft_strerror((int)last));
    weft_channel_transport_closed(tc->ch, (int)last, reason);
  }
  return 1;
}

/* ---- connecting ---- */

static void connect_done(tcp_channel *tc) {
  int soerr = 0;
  socklen_t len = sizeof soerr;
  if (getsockopt(tc->io.w.fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
    soerr = errno;
  if (soerr == EINPROGRESS || soerr == EALREADY)
    return; /* spurious: still connecting */
  tc->connecting = false;
  int err = soerr != 0 ? -soerr : channel_update_interest(tc);
  weft_channel_connected(tc->ch, err);
}

/* ---- events ---- */

static void channel_event(weft_watcher *w, uint32_t events) {
  tcp_channel *tc = w->data;
  weft_channel *ch = tc->ch;
  weft_channel_retain(ch); /* handlers may close and release it */
  if (tc->connecting) {
    connect_done(tc);
    goto out;
  }
  if ((events & EPOLLOUT) && channel_open(tc)) {
    int err = write_pending(tc);
    if (err < 0 && channel_open(tc)) {
      char reason[96];
      snprintf(reason, sizeof reason, "write: %s", weft_strerror(err));
      weft_channel_transport_closed(ch, err, reason);
    }
  }
  /* EPOLLHUP/EPOLLERR come without being asked for; a read reports the
   * error or EOF they stand for. */
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
      channel_open(tc) && tc->reading)
    read_ready(tc, false, events);
out:
  weft_channel_release(ch);
}

/* The watcher's busy_read (weft/source.h): channel_event's read, asked
 * for while the loop spins on this socket alone, whether or not epoll
 * would report it ready; most calls meet EAGAIN. WEFT_BUSY_READ_MORE after
 * a bulk read (read_ready). */
static int channel_busy_read(weft_watcher *w) {
  tcp_channel *tc = w->data;
  if (tc->connecting || !channel_open(tc) || !tc->reading)
    return 0;
  weft_channel *ch = tc->ch;
  weft_channel_retain(ch); /* handlers may close and release it */
  int found = read_ready(tc, true, 0);
  weft_channel_release(ch);
  return found;
}

/* ---- channel lifecycle ---- */

/* Common to adopt and connect: the channel owns `fd` from here on. */
static int channel_take_fd(weft_channel *ch, int fd) {
  tcp_channel *tc = tcp_of(ch);
  int err = 0;
  tcp_loop *tl = loop_state_of(weft_channel_loop(ch), &err);
  if (tl == NULL)
    return err;
  tc->ch = ch;
  tc->tl = tl;
  tc->reading = weft_channel_auto_read(ch);
  tc->recv_index = RECV_INITIAL;
  err = io_open(tl, &tc->io, fd, channel_event, channel_busy_read, tc);
  if (err < 0)
    return err; /* not ours yet: the caller closes it */
  tc->has_fd = true;
  return weft_sockopts_apply(&tc->opts, tc->io.w.fd);
}

static int tcp_adopt(weft_channel *ch, intptr_t handle) {
  int fd = (int)handle;
  int err = channel_take_fd(ch, fd);
  if (err == 0)
    err = channel_update_interest(tcp_of(ch));
  if (err < 0) {
    tcp_channel *tc = tcp_of(ch);
    if (tc->has_fd)
      io_close(tc->tl, &tc->io); /* the core's close then finds fd -1 */
    else
      close(fd);
  }
  return err;
}

static void tcp_discard(intptr_t handle) { close((int)handle); }

/* Starts a non-blocking connect to the first address of `ep` that gives a
 * socket. */
static int connect_start(weft_channel *ch, const struct addrinfo *ai) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
  if (fd < 0)
    return neg_errno();
  int err = channel_take_fd(ch, fd);
  tcp_channel *tc = tcp_of(ch);
  if (err < 0) {
    if (!tc->has_fd)
      close(fd); /* otherwise the caller's io_close releases it */
    return err;
  }
  int rc;
  do
    rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  while (rc < 0 && errno == EINTR);
  if (rc < 0 && errno != EINPROGRESS)
    return neg_errno();
  tc->connecting = rc < 0;
  err = channel_update_interest(tc);
  if (err < 0)
    return err;
  if (!tc->connecting)
    weft_channel_connected(ch, 0); /* loopback may connect at once */
  return 0;
}

static int tcp_connect(weft_channel *ch, const weft_endpoint *ep) {
  struct addrinfo *res;
  int err = weft_endpoint_resolve(ep, false, &res);
  if (err < 0)
    return err;
  err = res != NULL ? connect_start(ch, res) : WEFT_EADDRNOTAVAIL;
  freeaddrinfo(res);
  if (err < 0) {
    tcp_channel *tc = tcp_of(ch);
    if (tc->has_fd)
      io_close(tc->tl, &tc->io);
  }
  return err;
}

/* Releases the socket; called once, by the core, when the channel closes. */
static void tcp_close(weft_channel *ch) {
  tcp_channel *tc = tcp_of(ch);
  if (!tc->has_fd)
    return;
  io_close(tc->tl, &tc->io);
  tc->want_out = tc->reading = tc->connecting = false;
}

static int tcp_set_read(weft_channel *ch, bool on) {
  tcp_channel *tc = tcp_of(ch);
  if (!tc->has_fd)
    return 0; /* applied at adopt / connect from the channel's option */
  tc->reading = on;
  return channel_update_interest(tc);
}

static int peer_or_local(const weft_channel *ch, char *buf, size_t len,
                         bool peer) {
  const tcp_channel *tc = tcp_of(ch);
  if (!tc->has_fd || tc->io.w.fd < 0)
    return WEFT_ENOTCONN;
  return weft_socket_address(tc->io.w.fd, peer, buf, len);
}

static int tcp_remote_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, true);
}

static int tcp_local_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, false);
}

/* ---- kernel TLS ---- */

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

/* The socket of an open, connected channel with nothing unsent, or -1
 * with the error in *err. */
static int ktls_fd(const weft_channel *ch, int *err) {
  const tcp_channel *tc = tcp_of(ch);
  if (!tc->has_fd || tc->io.w.fd < 0 || tc->connecting) {
    *err = WEFT_ENOTCONN;
    return -1;
  }
  if (!weft_outbound_is_empty(ch)) {
    *err = WEFT_EBUSY; /* those bytes must not be encrypted again */
    return -1;
  }
  return tc->io.w.fd;
}

static int tcp_ktls_tx(weft_channel *ch, const void *crypto_info, size_t len) {
  tcp_channel *tc = tcp_of(ch);
  int err = 0, fd = ktls_fd(ch, &err);
  if (fd < 0)
    return err;
  if (!tc->ulp_tls) {
    if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof "tls") < 0)
      return neg_errno(); /* ENOENT: no tls module in this kernel */
    tc->ulp_tls = true;
  }
  if (setsockopt(fd, SOL_TLS, TLS_TX, crypto_info, (socklen_t)len) < 0)
    return neg_errno();
  return 0;
}

static int tcp_ktls_send_record(weft_channel *ch, uint8_t type,
                                const void *data, size_t len) {
  int err = 0, fd = ktls_fd(ch, &err);
  if (fd < 0)
    return err;
  union {
    char buf[CMSG_SPACE(sizeof(uint8_t))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_TLS;
  c->cmsg_type = TLS_SET_RECORD_TYPE;
  c->cmsg_len = CMSG_LEN(sizeof type);
  memcpy(CMSG_DATA(c), &type, sizeof type);
  ssize_t w;
  do
    w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (w < 0 && errno == EINTR);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK ? WEFT_EAGAIN : neg_errno();
  return (size_t)w == len ? 0 : WEFT_EAGAIN;
}

const weft_transport_ops weft__transport_tcp = {
    .name = "tcp",
    .caps = WEFT_TRANSPORT_CAP_STREAM | WEFT_TRANSPORT_CAP_HALF_CLOSE |
            WEFT_TRANSPORT_CAP_SOCKET_OPTS | WEFT_TRANSPORT_CAP_TCP |
            WEFT_TRANSPORT_CAP_FILE_REGION,
    .channel_priv_size = sizeof(tcp_channel),
    .loop_init = tcp_loop_init,
    .loop_fini = tcp_loop_fini,
    .listen = tcp_listen,
    .listen_close = tcp_listen_close,
    .listen_address = tcp_listen_address,
    .connect = tcp_connect,
    .adopt = tcp_adopt,
    .discard = tcp_discard,
    .flush = tcp_flush,
    .close = tcp_close,
    .shutdown_output = tcp_shutdown_output,
    .set_option = tcp_set_option,
    .get_option = tcp_get_option,
    .set_read = tcp_set_read,
    .remote_address = tcp_remote_address,
    .local_address = tcp_local_address,
    .ktls_tx = tcp_ktls_tx,
    .ktls_send_record = tcp_ktls_send_record,
};
