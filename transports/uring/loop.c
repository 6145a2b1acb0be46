/* The io_uring TCP transport ("uring").
 *
 * Per loop, one ring (IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN |
 * TASKRUN_FLAG where the kernel has them, else COOP_TASKRUN, else none;
 * probed once and cached) and one provided buffer ring that every channel of
 * the loop receives into. The ring is the loop's weft_source:
 *
 *   poll    one io_uring_enter at most, for everything: it submits the SQEs
 *           queued since the last poll (flushes, re-arms, closes) and, under
 *           DEFER_TASKRUN, runs the deferred completions (GETEVENTS). It is
 *           skipped when nothing is queued and the kernel's IORING_SQ_TASKRUN
 *           flag says no completion work waits, so a busy-polling idle loop
 *           makes no system call. Then the CQ is reaped from shared memory.
 *   arm     enables the registered eventfd (disabled while busy polling, so
 *           the kernel does not signal it per completion), then re-checks the
 *           SQ, the TASKRUN flag and the CQ: > 0 if anything is pending.
 *   wakeup  reads the eventfd.
 *
 * SQEs are only queued by the channel ops; they reach the kernel in the next
 * poll (or earlier when the SQ is full), so all submissions of one loop
 * iteration share one io_uring_enter.
 *
 * Receiving: one multishot recv per channel selects buffers from the loop's
 * provided buffer ring. Each completion becomes a weft_buf wrapping the ring
 * slot (weft_buf_wrap); its free callback puts the slot back into the ring.
 * When handlers hold every slot, the multishot recv ends with ENOBUFS; the
 * bytes stay in the socket and the channel continues with single recvs into
 * pool memory until slots are back, then re-arms the multishot recv. No byte
 * is lost and a slow handler cannot stall the other channels for good.
 *
 * Every channel that got data in one reap gets one channel_read_complete
 * after the whole batch is dispatched (as tcp fires one per up to 16
 * reads), so an echo flushes once per batch, not once per recv CQE.
 *
 * Sending: at most one send in flight per channel keeps the byte order; it
 * gathers up to UR_MAX_IOV flushed buffers in one sendmsg (send for one),
 * from a send context taken from a per-loop cache (an idle channel holds
 * none). The buffers are retained while the kernel may read them: a close
 * fails the outbound queue at once, but the memory lives until the CQE. Sends
 * of at least send_zc_min bytes ([transport.uring]) use SENDMSG_ZC; their
 * buffers are held until the notification CQE. When a notification reports that
 * the kernel copied anyway (loopback, or a device without scatter-gather), the
 * channel stops using zero copy: the copy plus the notification cost more.
 *
 * connect, shutdown and close go through the ring. Every request with a
 * CQE still to come holds a channel reference, so the channel's memory
 * outlives its requests; a close cancels them all (ASYNC_CANCEL by fd).
 *
 * Where io_uring cannot run, the probe says why and names transport=tcp;
 * with `[transport.uring] fallback = tcp` the registry hands out the "tcp"
 * transport for uring:// endpoints instead (this plugin knows no other).
 *
 * liburing 2.3 (Debian 12) lacks io_uring_setup_buf_ring and the SEND_ZC
 * usage report flags; both are written here.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/pipeline.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring.h"

/* ---- liburing 2.3 compatibility (constants from Linux 6.2 uapi) ---- */

#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3) /* sqe->ioprio of SEND_ZC */
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31) /* res of the notif CQE */
#endif

/* ---- tuning ---- */

#define UR_SQ_ENTRIES 1024
#define UR_CQ_ENTRIES 8192 /* multishot recvs make many CQEs per SQE */
#define UR_MAX_IOV 256     /* buffers gathered per sendmsg (IOV_MAX 1024) */
#define UR_SEND_CACHE 16   /* idle send contexts kept per loop */
#define UR_REAP_MAX 256    /* CQEs copied out per poll, at most */
#define UR_BGID 0          /* the provided buffer group of every loop */
#define UR_BUF_COUNT_DEFAULT 256u
#define UR_BUF_SIZE_DEFAULT 16384u
#define UR_SEND_ZC_MIN_DEFAULT 65536u
#define UR_PLAIN_RECV_SIZE 16384u /* single recv while the ring is empty */
#define UR_ACCEPT_BACKOFF_NS (100u * 1000u * 1000u) /* on EMFILE */
#define UR_FINI_WAIT_NS (2000u * 1000u * 1000u)     /* drain at loop stop */

/* ---- conversions at the edge ---- */

static int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- settings: [transport.uring] ---- */

/* Read at loop start; written by ur_config_set, which the registry
 * serialises and which happens before the loops that use it start. */
static struct {
  unsigned buf_count;   /* provided buffers per loop, a power of two */
  unsigned buf_size;    /* bytes each */
  unsigned send_zc_min; /* bytes; 0 = never zero copy */
} settings = {UR_BUF_COUNT_DEFAULT, UR_BUF_SIZE_DEFAULT,
              UR_SEND_ZC_MIN_DEFAULT};

static const weft_transport_key ur_keys[] = {
    {"buf_count", "256",
     "provided receive buffers per loop, a power of two from 1 to 32768"},
    {"buf_size", "16384", "bytes per provided buffer, 64 .. 1048576"},
    {"send_zc_min", "65536",
     "bytes from which a send tries SENDMSG_ZC, 0 = never"},
    {NULL, NULL, NULL}};

static bool parse_uint(const char *s, unsigned min, unsigned max,
                       unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < min ||
      v > max)
    return false;
  *out = (unsigned)v;
  return true;
}

static int ur_config_set(const char *key, const char *value, char *why,
                         size_t why_len) {
  unsigned v;
  bool ok;
  const char *valid;
  if (strcmp(key, "buf_count") == 0) {
    ok = parse_uint(value, 1, 32768, &v) && (v & (v - 1)) == 0;
    valid = ur_keys[0].values;
    if (ok)
      settings.buf_count = v;
  } else if (strcmp(key, "buf_size") == 0) {
    ok = parse_uint(value, 64, 1u << 20, &v);
    valid = ur_keys[1].values;
    if (ok)
      settings.buf_size = v;
  } else {
    ok = parse_uint(value, 0, UINT_MAX, &v);
    valid = ur_keys[2].values;
    if (ok)
      settings.send_zc_min = v;
  }
  if (!ok)
    snprintf(why, why_len, "%s", valid);
  return ok ? 0 : WEFT_EINVAL;
}

/* ---- the probe (once per process) ---- */

/* Ring setup flags in order of preference. DEFER_TASKRUN (6.1) runs
 * completion work only when the loop asks, on its own thread; TASKRUN_FLAG
 * lets poll see in shared memory whether asking is needed. */
static const unsigned setup_choices[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
        IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SUBMIT_ALL,
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
        IORING_SETUP_SUBMIT_ALL,
    0,
};

static unsigned probed_setup_flags; /* written by the probe, read after */
static bool probed_send_zc;         /* SENDMSG_ZC is there (6.1) */

/* Creates a ring with the best flags this kernel takes. */
static int ring_create(struct io_uring *ring, unsigned entries, unsigned cq,
                       unsigned *flags_out) {
  int rc = WEFT_EINVAL;
  for (size_t i = 0; i < sizeof setup_choices / sizeof setup_choices[0]; i++) {
    struct io_uring_params p = {.flags = setup_choices[i]};
    if (cq > 0) {
      p.flags |= IORING_SETUP_CQSIZE;
      p.cq_entries = cq;
    }
    rc = io_uring_queue_init_params(entries, ring, &p);
    if (rc == 0) {
      *flags_out = setup_choices[i];
      return 0;
    }
    if (rc != -EINVAL)
      break; /* not a flag problem: EPERM, ENOSYS, ENOMEM */
  }
  return rc;
}

/* A sentence naming the cause of a failed io_uring_setup and the way out. */
static void explain_setup_error(int rc, char *why, size_t len) {
  const char *cause;
  switch (rc) {
  case -EPERM:
    cause = "blocked by a container seccomp profile, or sysctl "
            "kernel.io_uring_disabled?";
    break;
  case -ENOSYS:
    cause = "kernel built without io_uring, or a seccomp profile answers "
            "ENOSYS";
    break;
  case -ENOMEM:
    cause = "locked-memory limit too low? raise `ulimit -l`";
    break;
  default:
    cause = "unexpected";
    break;
  }
  snprintf(why, len,
           "io_uring_setup: %s (%s); use transport=tcp, or set "
           "[transport.uring] fallback = tcp to fall back automatically",
           weft_strerror(rc), cause);
}

/* Registers a provided buffer ring of `entries` slots: what liburing 2.4's
 * io_uring_setup_buf_ring does, which 2.3 lacks. */
static int buf_ring_setup(struct io_uring *ring, unsigned entries, int bgid,
                          struct io_uring_buf_ring **out) {
  void *mem = NULL;
  size_t bytes = (size_t)entries * sizeof(struct io_uring_buf);
  long page = sysconf(_SC_PAGESIZE);
  if (posix_memalign(&mem, (size_t)page, bytes) != 0)
    return WEFT_ENOMEM;
  memset(mem, 0, bytes);
  struct io_uring_buf_ring *br = mem;
  io_uring_buf_ring_init(br);
  struct io_uring_buf_reg reg = {
      .ring_addr = (uintptr_t)br, .ring_entries = entries, .bgid = bgid};
  int rc = io_uring_register_buf_ring(ring, &reg, 0);
  if (rc < 0) {
    free(mem);
    return rc;
  }
  *out = br;
  return 0;
}

static bool opcodes_supported(struct io_uring *ring, const char **missing) {
  static const struct {
    int op;
    const char *name;
  } need[] = {
      {IORING_OP_ACCEPT, "ACCEPT"},
      {IORING_OP_CONNECT, "CONNECT"},
      {IORING_OP_RECV, "RECV"},
      {IORING_OP_SEND, "SEND"},
      {IORING_OP_SENDMSG, "SENDMSG"},
      {IORING_OP_CLOSE, "CLOSE"},
      {IORING_OP_SHUTDOWN, "SHUTDOWN"},
      {IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"},
  };
  struct io_uring_probe *p = io_uring_get_probe_ring(ring);
  if (p == NULL) {
    *missing = "IORING_REGISTER_PROBE";
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < sizeof need / sizeof need[0] && ok; i++)
    if (!io_uring_opcode_supported(p, need[i].op)) {
      *missing = need[i].name;
      ok = false;
    }
  probed_send_zc = io_uring_opcode_supported(p, IORING_OP_SENDMSG_ZC);
  io_uring_free_probe(p);
  return ok;
}

/* Checks everything the transport needs; 0 or an error with `why`. */
static int probe_features(char *why, size_t len) {
  struct io_uring ring;
  unsigned flags = 0;
  int rc = ring_create(&ring, 8, 0, &flags);
  if (rc < 0) {
    explain_setup_error(rc, why, len);
    return rc;
  }
  probed_setup_flags = flags;
  const char *missing = NULL;
  if (!opcodes_supported(&ring, &missing)) {
    snprintf(why, len,
             "io_uring: the kernel lacks IORING_OP_%s (Linux 5.19 or newer "
             "needed); use transport=tcp",
             missing);
    rc = WEFT_ENOTSUP;
    goto out;
  }
  struct io_uring_buf_ring *br = NULL;
  rc = buf_ring_setup(&ring, 1, UR_BGID, &br);
  if (rc < 0) {
    snprintf(why, len,
             "io_uring_register_buf_ring: %s (provided buffer rings need "
             "Linux 5.19); use transport=tcp",
             weft_strerror(rc));
    goto out;
  }
  io_uring_unregister_buf_ring(&ring, UR_BGID);
  free(br);
out:
  io_uring_queue_exit(&ring);
  return rc;
}

typedef struct probe_job {
  char *why;
  size_t len;
  int rc;
} probe_job;

static void *probe_thread(void *arg) {
  probe_job *job = arg;
  job->rc = probe_features(job->why, job->len);
  return NULL;
}

/* The probe's ring lives on a thread of its own: tearing a ring down sends
 * task work with TWA_SIGNAL to every thread that used it, which makes a
 * blocking socket call with a timeout on the caller's thread fail with
 * EINTR (seen on Linux 6.18). A thread that has exited gets none. */
static int ur_probe(char *why, size_t len) {
  probe_job job = {.why = why, .len = len, .rc = WEFT_EIO};
  pthread_t t;
  int rc = pthread_create(&t, NULL, probe_thread, &job);
  if (rc != 0) {
    snprintf(why, len, "uring: cannot start the probe thread: %s",
             weft_strerror(-rc));
    return -rc;
  }
  pthread_join(t, NULL);
  return job.rc;
}

/* ---- per-loop state ---- */

/* What a CQE's user_data points at. 0 = a request whose result does not
 * matter (cancel, close, shutdown). */
enum ur_kind {
  UR_OP_ACCEPT = 1,
  UR_OP_RECV,
  UR_OP_PLAIN_RECV,
  UR_OP_SEND,
  UR_OP_SEND_ZC,
  UR_OP_CONNECT,
};

typedef struct ur_op {
  uint8_t kind;
} ur_op;

typedef struct ur_listener ur_listener;
typedef struct ur_channel ur_channel;
typedef struct ur_send ur_send;

typedef struct ur_loop {
  weft_loop *loop;
  weft_source source;
  struct io_uring ring;
  unsigned setup_flags;
  int efd;       /* registered eventfd: in the loop's epoll set */
  bool evfd_on;  /* the kernel signals efd (only while arming/asleep) */
  bool stopping; /* loop_fini is draining */
  /* the provided buffer ring */
  struct io_uring_buf_ring *br;
  uint8_t *bufs; /* buf_count * buf_size bytes */
  unsigned buf_count, buf_size, buf_mask;
  unsigned bufs_out; /* slots held by pipelines (wrapped weft_bufs) */
  bool orphaned;     /* the ring is gone: the last slot back frees this */
  unsigned send_zc_min;
  uint64_t inflight; /* requests holding a reference, CQE still to come */
  ur_listener *listeners;
  /* channels that got data in this reap: read_complete fires after it */
  ur_channel *rc_head, *rc_tail;
  ur_send *send_free; /* cached send contexts */
  unsigned send_free_n;
  weft__uring_stats stats;
} ur_loop;

struct ur_listener {
  ur_op op;
  weft_listener *l;
  ur_loop *ul;
  int fd;
  bool armed;   /* the multishot accept is in the kernel */
  bool closing; /* freed on the accept's last CQE */
  weft_timer backoff;
  ur_listener *prev, *next;
};

enum ur_recv_state {
  UR_RECV_IDLE,       /* nothing in the kernel */
  UR_RECV_ARMED,      /* multishot recv on the buffer ring */
  UR_RECV_CANCELLING, /* multishot recv, cancel requested */
  UR_RECV_PLAIN,      /* single recv into plain_buf */
};

/* One send in flight: what the kernel reads (msg, iov) and the buffers
 * retained until its CQE (for SENDMSG_ZC, until the notification CQE).
 * Taken from a per-loop cache, so an idle channel holds none. */
typedef struct ur_send {
  ur_op op; /* UR_OP_SEND or UR_OP_SEND_ZC */
  weft_channel *ch;
  int n; /* entries of iov and bufs */
  struct msghdr msg;
  struct iovec iov[UR_MAX_IOV];
  weft_buf *bufs[UR_MAX_IOV];
  struct ur_send *next_free;
} ur_send;

/* Per-channel state (channel_priv_size bytes, zeroed by the core). */
struct ur_channel {
  weft_channel *ch;
  ur_loop *ul;
  int fd; /* -1 once closed */
  bool has_fd;
  bool reading;
  bool connecting;
  bool send_inflight;
  bool in_consume; /* weft_outbound_consumed on the stack */
  bool shutdown_pending;
  bool output_shut;
  bool zc_off;     /* the kernel copied a zero-copy send: stop trying */
  bool rc_pending; /* on the loop's read_complete list (holds a ref) */
  uint8_t recv_state;
  weft_sockopts opts; /* set before the socket existed, applied after */
  ur_op op_recv, op_plain, op_connect;
  weft_buf *plain_buf;
  struct sockaddr_storage peer; /* connect's address */
  socklen_t peer_len;
  ur_channel *rc_next;
};

#define container_of(p, type, member)                                          \
  ((type *)(void *)((char *)(p)-offsetof(type, member)))

static ur_channel *ur_of(const weft_channel *ch) {
  return weft_channel_priv(ch);
}

static ur_loop *loop_state_of(weft_loop *loop, int *err) {
  return weft_transport_loop_state(&weft__transport_uring, loop, err);
}

/* An SQE, submitting what is queued when the SQ is full. NULL only when
 * the kernel refuses SQEs for good (or keeps answering EBUSY because the
 * CQ is full, which the next poll resolves). */
static struct io_uring_sqe *get_sqe(ur_loop *ul) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ul->ring);
  for (int tries = 0; sqe == NULL && tries < 8; tries++) {
    int rc = io_uring_submit(&ul->ring);
    ul->stats.enters++;
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
      return NULL;
    sqe = io_uring_get_sqe(&ul->ring);
  }
  return sqe;
}

/* ---- the provided buffer ring ---- */

static void buf_ring_put(ur_loop *ul, unsigned bid) {
  io_uring_buf_ring_add(ul->br, ul->bufs + (size_t)bid * ul->buf_size,
                        ul->buf_size, (unsigned short)bid, ul->buf_mask, 0);
  io_uring_buf_ring_advance(ul->br, 1);
}

static void loop_free(ur_loop *ul);

/* weft_buf free callback: the slot goes back to the ring. */
static void slot_returned(void *base, size_t capacity, void *arg) {
  (void)capacity;
  ur_loop *ul = arg;
  ul->bufs_out--;
  if (ul->orphaned) {
    if (ul->bufs_out == 0)
      loop_free(ul);
    return;
  }
  buf_ring_put(ul, (unsigned)(((uint8_t *)base - ul->bufs) / ul->buf_size));
}

static bool ring_has_slots(const ur_loop *ul) {
  return ul->bufs_out < ul->buf_count;
}

static int buffers_init(ur_loop *ul) {
  ul->buf_count = settings.buf_count;
  ul->buf_size = settings.buf_size;
  ul->buf_mask = (unsigned)io_uring_buf_ring_mask(ul->buf_count);
  void *mem = NULL;
  if (posix_memalign(&mem, (size_t)sysconf(_SC_PAGESIZE),
                     (size_t)ul->buf_count * ul->buf_size) != 0)
    return WEFT_ENOMEM;
  ul->bufs = mem;
  int rc = buf_ring_setup(&ul->ring, ul->buf_count, UR_BGID, &ul->br);
  if (rc < 0) {
    free(ul->bufs);
    ul->bufs = NULL;
    return rc;
  }
  for (unsigned i = 0; i < ul->buf_count; i++)
    io_uring_buf_ring_add(ul->br, ul->bufs + (size_t)i * ul->buf_size,
                          ul->buf_size, (unsigned short)i, ul->buf_mask,
                          (int)i);
  io_uring_buf_ring_advance(ul->br, (int)ul->buf_count);
  ul->stats.buf_count = ul->buf_count;
  ul->stats.buf_size = ul->buf_size;
  return 0;
}

/* ---- the source: poll, arm, wakeup ---- */

/* True when completions wait for this thread to run them (DEFER_TASKRUN or
 * COOP_TASKRUN with TASKRUN_FLAG), or the CQ overflowed into the kernel. */
static bool kernel_has_work(const ur_loop *ul) {
  unsigned f = IO_URING_READ_ONCE(*ul->ring.sq.kflags);
  return (f & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

/* The one io_uring_enter of an iteration: submit and fetch completions. */
static void enter_if_needed(ur_loop *ul) {
  bool submit = io_uring_sq_ready(&ul->ring) > 0;
  if (!submit && !kernel_has_work(ul))
    return;
  int rc = io_uring_submit_and_get_events(&ul->ring);
  ul->stats.enters++;
  /* EBUSY/EAGAIN: the CQ is full; reaping below makes room, and the SQEs
   * still queued go with the next enter. */
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    weft_log(WEFT_LOG_WARN, "uring: io_uring_enter: %s", weft_strerror(rc));
}

static void dispatch(ur_loop *ul, uint64_t user_data, int32_t res,
                     uint32_t flags);
static void fire_read_completes(ur_loop *ul);

static int reap(ur_loop *ul, int budget) {
  struct {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
  } batch[UR_REAP_MAX];
  int max = budget < UR_REAP_MAX ? budget : UR_REAP_MAX;
  int n = 0;
  unsigned head;
  struct io_uring_cqe *cqe;
  /* Copy out, then hand the slots back before any handler runs: handlers
   * may queue work that makes more CQEs. */
  io_uring_for_each_cqe(&ul->ring, head, cqe) {
    batch[n].user_data = cqe->user_data;
    batch[n].res = cqe->res;
    batch[n].flags = cqe->flags;
    if (++n == max)
      break;
  }
  io_uring_cq_advance(&ul->ring, (unsigned)n);
  ul->stats.cqes += (uint64_t)n;
  for (int i = 0; i < n; i++)
    dispatch(ul, batch[i].user_data, batch[i].res, batch[i].flags);
  fire_read_completes(ul);
  return n;
}

static void evfd_set(ur_loop *ul, bool on) {
  if (ul->evfd_on == on)
    return;
  io_uring_cq_eventfd_toggle(&ul->ring, on);
  ul->evfd_on = on;
}

static int ur_poll(weft_source *src, int budget) {
  ur_loop *ul = src->data;
  evfd_set(ul, false); /* busy: no eventfd signal per completion */
  enter_if_needed(ul);
  return reap(ul, budget);
}

static int ur_arm(weft_source *src) {
  ur_loop *ul = src->data;
  if (io_uring_sq_ready(&ul->ring) > 0)
    return 1; /* poll submits them first */
  evfd_set(ul, true);
  /* Dekker with the kernel: it publishes work (task-work list, CQ tail;
   * full barrier) and then reads cq_flags to decide whether to signal the
   * eventfd; we store cq_flags and then read its side. One of us sees the
   * other, so no completion is left unsignalled while we sleep. */
  atomic_thread_fence(memory_order_seq_cst);
  return kernel_has_work(ul) || io_uring_cq_ready(&ul->ring) > 0;
}

static void ur_wakeup(weft_source *src, uint32_t events) {
  (void)events;
  ur_loop *ul = src->data;
  uint64_t v;
  ssize_t r;
  do
    r = read(ul->efd, &v, sizeof v);
  while (r < 0 && errno == EINTR);
}

static const weft_source_ops ur_source_ops = {
    .name = "uring", .poll = ur_poll, .arm = ur_arm, .wakeup = ur_wakeup};

/* ---- loop lifecycle ---- */

static int ur_loop_init(weft_loop *loop, void **loop_state) {
  int err;
  ur_loop *ul = calloc(1, sizeof *ul);
  if (ul == NULL)
    return WEFT_ENOMEM;
  ul->loop = loop;
  ul->efd = -1;
  ul->send_zc_min = settings.send_zc_min;
  err = ring_create(&ul->ring, UR_SQ_ENTRIES, UR_CQ_ENTRIES, &ul->setup_flags);
  if (err < 0)
    goto failed_ring;
  ul->stats.setup_flags = ul->setup_flags;
  /* A registered ring fd saves a file lookup per enter (5.18); optional. */
  io_uring_register_ring_fd(&ul->ring);
  ul->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ul->efd < 0) {
    err = neg_errno();
    goto failed_eventfd;
  }
  err = io_uring_register_eventfd(&ul->ring, ul->efd);
  if (err < 0)
    goto failed_register_eventfd;
  ul->evfd_on = true;
  evfd_set(ul, false);
  err = buffers_init(ul);
  if (err < 0)
    goto failed_buffers;
  weft_source_init(&ul->source, &ur_source_ops, ul->efd, ul);
  err = weft_loop_add_source(loop, &ul->source);
  if (err < 0)
    goto failed_add_source;
  *loop_state = ul;
  return 0;

failed_add_source:
  io_uring_unregister_buf_ring(&ul->ring, UR_BGID);
  free(ul->br);
  free(ul->bufs);
failed_buffers:
failed_register_eventfd:
  close(ul->efd);
failed_eventfd:
  io_uring_queue_exit(&ul->ring);
failed_ring:
  weft_log(WEFT_LOG_ERROR,
           "uring: cannot start on loop %d: %s; use transport=tcp",
           weft_loop_index(loop), weft_strerror(err));
  free(ul);
  return err;
}

static void loop_free(ur_loop *ul) {
  while (ul->send_free != NULL) {
    ur_send *s = ul->send_free;
    ul->send_free = s->next_free;
    free(s);
  }
  free(ul->bufs);
  free(ul);
}

static void listener_free(ur_listener *ln);
static void listener_close(ur_listener *ln);

/* Cancels everything still in the kernel and reaps until every request
 * that holds a channel or buffer reference has completed, so nothing the
 * kernel may still touch is freed under it. */
static void drain(ur_loop *ul) {
  struct io_uring_sqe *sqe = get_sqe(ul);
  if (sqe != NULL) {
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(sqe, 0);
  }
  uint64_t waited = 0;
  while (ul->inflight > 0 && waited < UR_FINI_WAIT_NS) {
    struct __kernel_timespec ts = {.tv_nsec = 10 * 1000 * 1000};
    struct io_uring_cqe *cqe;
    io_uring_submit_and_wait_timeout(&ul->ring, &cqe, 1, &ts, NULL);
    if (reap(ul, UR_REAP_MAX) == 0)
      waited += 10u * 1000u * 1000u;
  }
  if (ul->inflight > 0)
    weft_log(WEFT_LOG_WARN, "uring: loop stop: %llu requests did not complete",
             (unsigned long long)ul->inflight);
}

/* The core closed every channel of this loop before. */
static void ur_loop_fini(weft_loop *loop, void *loop_state) {
  ur_loop *ul = loop_state;
  ul->stopping = true;
  while (ul->listeners != NULL) {
    ur_listener *ln = ul->listeners;
    weft_listener_set_priv(ln->l, NULL);
    listener_close(ln);
  }
  drain(ul);
  weft_loop_remove_source(loop, &ul->source);
  io_uring_unregister_buf_ring(&ul->ring, UR_BGID);
  io_uring_queue_exit(&ul->ring);
  close(ul->efd);
  free(ul->br);
  ul->br = NULL;
  if (ul->bufs_out > 0) {
    /* Pipelines still hold slots (the pool reports them as leaks); the
     * memory stays until the last comes back. */
    ul->orphaned = true;
    return;
  }
  loop_free(ul);
}

int weft__uring_stats_get(weft_loop *loop, weft__uring_stats *out) {
  int err = 0;
  ur_loop *ul = loop_state_of(loop, &err);
  if (ul == NULL)
    return err < 0 ? err : WEFT_ENOENT;
  *out = ul->stats;
  out->bufs_out = ul->bufs_out;
  return 0;
}

/* ---- listeners ---- */

static void accept_arm(ur_listener *ln) {
  struct io_uring_sqe *sqe = get_sqe(ln->ul);
  if (sqe == NULL)
    return;
  io_uring_prep_multishot_accept(sqe, ln->fd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data(sqe, &ln->op);
  ln->armed = true;
  ln->ul->inflight++;
}

static void accept_resume(void *arg) {
  ur_listener *ln = arg;
  if (!ln->armed && !ln->closing)
    accept_arm(ln);
}

static void accept_done(ur_listener *ln, int32_t res, uint32_t flags) {
  if (res >= 0) {
    if (ln->closing)
      close(res);
    else
      weft_listener_accepted(ln->l, res);
  }
  if (flags & IORING_CQE_F_MORE)
    return;
  ln->armed = false;
  ln->ul->inflight--;
  if (ln->closing) {
    free(ln);
    return;
  }
  switch (res) {
  case -EMFILE:
  case -ENFILE:
  case -ENOBUFS:
  case -ENOMEM:
    weft_log(WEFT_LOG_WARN,
             "uring: accept: %s; not accepting for %u ms (raise the fd limit "
             "with ulimit -n?)",
             weft_strerror(res), (unsigned)(UR_ACCEPT_BACKOFF_NS / 1000000u));
    weft_timer_start(&ln->backoff, UR_ACCEPT_BACKOFF_NS, 0, accept_resume, ln);
    return;
  case -ECANCELED:
  case -ECONNABORTED: /* the peer gave up while in the backlog */
  case -EINTR:
  case -EPROTO:
  case -EPERM: /* a firewall said no to this one */
    accept_arm(ln);
    return;
  default:
    if (res >= 0) {
      accept_arm(ln); /* the kernel ended the multishot (CQ overflow) */
      return;
    }
    weft_log(WEFT_LOG_ERROR, "uring: accept: %s; retrying in %u ms",
             weft_strerror(res), (unsigned)(UR_ACCEPT_BACKOFF_NS / 1000000u));
    weft_timer_start(&ln->backoff, UR_ACCEPT_BACKOFF_NS, 0, accept_resume, ln);
  }
}

static int ur_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  int err = 0;
  ur_loop *ul = loop_state_of(weft_listener_loop(l), &err);
  if (ul == NULL)
    return err;
  int fd;
  err = weft_socket_listen(ep, backlog, SOCK_CLOEXEC, &fd);
  if (err < 0)
    return err;
  ur_listener *ln = calloc(1, sizeof *ln);
  if (ln == NULL) {
    close(fd);
    return WEFT_ENOMEM;
  }
  *ln = (ur_listener){.op = {UR_OP_ACCEPT}, .l = l, .ul = ul, .fd = fd};
  weft_timer_init(ul->loop, &ln->backoff);
  ln->next = ul->listeners;
  if (ul->listeners != NULL)
    ul->listeners->prev = ln;
  ul->listeners = ln;
  weft_listener_set_priv(l, ln);
  accept_arm(ln);
  return 0;
}

static void listener_unlink(ur_listener *ln) {
  ur_loop *ul = ln->ul;
  if (ln->prev != NULL)
    ln->prev->next = ln->next;
  else
    ul->listeners = ln->next;
  if (ln->next != NULL)
    ln->next->prev = ln->prev;
  ln->prev = ln->next = NULL;
}

static void listener_free(ur_listener *ln) { free(ln); }

/* Cancels the accept and closes the socket through the ring; the memory
 * goes with the accept's last CQE (or now, if it was not armed). */
static void listener_close(ur_listener *ln) {
  listener_unlink(ln);
  weft_timer_stop(&ln->backoff);
  ln->closing = true;
  struct io_uring_sqe *sqe;
  if (ln->armed && (sqe = get_sqe(ln->ul)) != NULL) {
    io_uring_prep_cancel(sqe, &ln->op, 0);
    io_uring_sqe_set_data64(sqe, 0);
  }
  if ((sqe = get_sqe(ln->ul)) != NULL) {
    io_uring_prep_close(sqe, ln->fd);
    io_uring_sqe_set_data64(sqe, 0);
  } else {
    close(ln->fd);
  }
  ln->fd = -1;
  if (!ln->armed)
    listener_free(ln);
}

static void ur_listen_close(weft_listener *l) {
  ur_listener *ln = weft_listener_priv(l);
  if (ln == NULL)
    return; /* the loop stopped first and closed it */
  weft_listener_set_priv(l, NULL);
  listener_close(ln);
}

static int ur_listen_address(weft_listener *l, char *buf, size_t len) {
  ur_listener *ln = weft_listener_priv(l);
  if (ln == NULL || ln->fd < 0)
    return WEFT_ECLOSED;
  return weft_socket_address(ln->fd, false, buf, len);
}

/* ---- socket options ---- */

static int channel_fd(const ur_channel *uc) { return uc->has_fd ? uc->fd : -1; }

static int ur_set_option(weft_channel *ch, weft_channel_option opt, int64_t v) {
  ur_channel *uc = ur_of(ch);
  return weft_sockopts_set(&uc->opts, channel_fd(uc), opt, v);
}

static int ur_get_option(const weft_channel *ch, weft_channel_option opt,
                         int64_t *v) {
  const ur_channel *uc = ur_of(ch);
  return weft_sockopts_get(&uc->opts, channel_fd(uc), opt, v);
}

/* ---- helpers for channel requests ---- */

static bool channel_open(const ur_channel *uc) {
  return uc->fd >= 0 && weft_channel_state_of(uc->ch) == WEFT_CHANNEL_ACTIVE;
}

/* A request that reports back holds the channel until its last CQE. */
static void request_started(ur_channel *uc) {
  weft_channel_retain(uc->ch);
  uc->ul->inflight++;
}

static void request_ended(ur_loop *ul, weft_channel *ch) {
  ul->inflight--;
  weft_channel_release(ch);
}

static void channel_failed(ur_channel *uc, const char *what, int err) {
  if (!channel_open(uc))
    return;
  char reason[96];
  snprintf(reason, sizeof reason, "%s: %s", what, weft_strerror(err));
  weft_channel_transport_closed(uc->ch, err, reason);
}

/* ---- receiving ---- */

static void recv_arm(ur_channel *uc) {
  if (!uc->reading || uc->fd < 0 || uc->recv_state != UR_RECV_IDLE ||
      uc->ul->stopping)
    return;
  ur_loop *ul = uc->ul;
  struct io_uring_sqe *sqe = get_sqe(ul);
  if (sqe == NULL) {
    channel_failed(uc, "read", WEFT_EIO);
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
      io_uring_sqe_set_data64(sqe, 0);
      channel_failed(uc, "read", WEFT_ENOMEM);
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

static void fire_read_completes(ur_loop *ul) {
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
    channel_failed(uc, "read", res);
    return;
  }
  if (channel_open(uc))
    recv_arm(uc); /* the multishot ended: ENOBUFS, set_read, CQ overflow */
}

static void recv_done(ur_channel *uc, int32_t res, uint32_t flags) {
  ur_loop *ul = uc->ul;
  weft_channel *ch = uc->ch;
  if (flags & IORING_CQE_F_BUFFER) {
    unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
    uint8_t *base = ul->bufs + (size_t)bid * ul->buf_size;
    weft_buf *b = NULL;
    if (res > 0 && channel_open(uc))
      b = weft_buf_wrap(weft_loop_pool(ul->loop), base, ul->buf_size,
                        (size_t)res, slot_returned, ul);
    if (b != NULL) {
      ul->bufs_out++;
      ul->stats.recv_bufs++;
      fire_read(uc, b);
    } else {
      if (res > 0 && channel_open(uc))
        channel_failed(uc, "read", WEFT_ENOMEM);
      buf_ring_put(ul, bid);
    }
  }
  if (flags & IORING_CQE_F_MORE)
    return;
  recv_ended(uc, res > 0 ? 1 : res);
  request_ended(ul, ch);
}

static void plain_recv_done(ur_channel *uc, int32_t res) {
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

/* ---- sending ---- */

static void shutdown_now(ur_channel *uc) {
  uc->shutdown_pending = false;
  if (uc->output_shut || uc->fd < 0)
    return;
  uc->output_shut = true;
  struct io_uring_sqe *sqe = get_sqe(uc->ul);
  if (sqe == NULL) {
    shutdown(uc->fd, SHUT_WR);
    return;
  }
  io_uring_prep_shutdown(sqe, uc->fd, SHUT_WR);
  io_uring_sqe_set_data64(sqe, 0);
}

/* A send context from the loop's cache (malloc when it is empty). */
static ur_send *send_get(ur_loop *ul) {
  ur_send *s = ul->send_free;
  if (s != NULL) {
    ul->send_free = s->next_free;
    ul->send_free_n--;
    return s;
  }
  return malloc(sizeof *s);
}

/* Releases the buffers the kernel no longer reads and caches the context. */
static void send_put(ur_loop *ul, ur_send *s) {
  for (int i = 0; i < s->n; i++)
    weft_buf_release(s->bufs[i]);
  if (ul->send_free_n >= UR_SEND_CACHE) {
    free(s);
    return;
  }
  s->next_free = ul->send_free;
  ul->send_free = s;
  ul->send_free_n++;
}

/* Collects up to UR_MAX_IOV flushed buffers into `s`, retaining each. */
static size_t gather(ur_channel *uc, ur_send *s) {
  size_t count = weft_outbound_count(uc->ch), total = 0;
  int n = 0;
  for (size_t i = 0; i < count && n < UR_MAX_IOV; i++) {
    weft_buf *b = weft_outbound_buf(uc->ch, i);
    size_t len = weft_buf_readable(b);
    if (len == 0)
      continue; /* completed by the next consume */
    s->iov[n] = (struct iovec){.iov_base = weft_buf_rptr(b), .iov_len = len};
    s->bufs[n++] = weft_buf_retain(b);
    total += len;
  }
  s->n = n;
  return total;
}

/* Queues the SQE of `s`: SENDMSG_ZC, or send for one buffer, else sendmsg. */
static void send_prep(ur_channel *uc, ur_send *s, struct io_uring_sqe *sqe,
                      bool zc) {
  s->op.kind = zc ? UR_OP_SEND_ZC : UR_OP_SEND;
  s->ch = uc->ch;
  s->msg = (struct msghdr){.msg_iov = s->iov, .msg_iovlen = (size_t)s->n};
  if (zc) {
    io_uring_prep_sendmsg_zc(sqe, uc->fd, &s->msg, MSG_NOSIGNAL);
    sqe->ioprio |= IORING_SEND_ZC_REPORT_USAGE;
    uc->ul->stats.zc_sends++;
  } else if (s->n == 1) {
    io_uring_prep_send(sqe, uc->fd, s->iov[0].iov_base, s->iov[0].iov_len,
                       MSG_NOSIGNAL);
    uc->ul->stats.sends++;
  } else {
    io_uring_prep_sendmsg(sqe, uc->fd, &s->msg, MSG_NOSIGNAL);
    uc->ul->stats.sends++;
  }
  io_uring_sqe_set_data(sqe, s);
}

/* Starts the channel's one send, if none is in flight and bytes wait. */
static void send_start(ur_channel *uc) {
  if (uc->send_inflight || uc->in_consume || !channel_open(uc))
    return;
  if (weft_outbound_is_empty(uc->ch)) {
    if (uc->shutdown_pending)
      shutdown_now(uc);
    return;
  }
  ur_loop *ul = uc->ul;
  ur_send *s = send_get(ul);
  if (s == NULL) {
    channel_failed(uc, "write", WEFT_ENOMEM);
    return;
  }
  size_t bytes = gather(uc, s);
  if (s->n == 0) {
    /* Only empty buffers: complete them. */
    send_put(ul, s);
    uc->in_consume = true;
    weft_outbound_consumed(uc->ch, 0);
    uc->in_consume = false;
    send_start(uc);
    return;
  }
  struct io_uring_sqe *sqe = get_sqe(ul);
  if (sqe == NULL) {
    send_put(ul, s);
    channel_failed(uc, "write", WEFT_EIO);
    return;
  }
  bool zc = bytes >= ul->send_zc_min && ul->send_zc_min > 0 && probed_send_zc &&
            !uc->zc_off;
  send_prep(uc, s, sqe, zc);
  uc->send_inflight = true;
  request_started(uc);
}

/* The bytes of the send in flight left (or it failed). */
static void send_finished(ur_channel *uc, int32_t res) {
  uc->send_inflight = false;
  if (!channel_open(uc))
    return;
  if (res < 0) {
    channel_failed(uc, "write", res);
    return;
  }
  uc->in_consume = true; /* promises may flush: they must not send twice */
  weft_outbound_consumed(uc->ch, (size_t)res);
  uc->in_consume = false;
  send_start(uc);
}

static void send_done(ur_loop *ul, ur_send *s, int32_t res) {
  weft_channel *ch = s->ch;
  send_put(ul, s);
  send_finished(ur_of(ch), res);
  request_ended(ul, ch);
}

/* SENDMSG_ZC: first the bytes (F_MORE when a notification follows), then
 * the notification, after which the kernel no longer reads the buffers. */
static void send_zc_done(ur_loop *ul, ur_send *s, int32_t res, uint32_t flags) {
  weft_channel *ch = s->ch;
  ur_channel *uc = ur_of(ch);
  if (flags & IORING_CQE_F_NOTIF) {
    if ((uint32_t)res & IORING_NOTIF_USAGE_ZC_COPIED) {
      uc->zc_off = true; /* the kernel copied anyway: plain sends from now */
      ul->stats.zc_copied++;
    }
  } else {
    send_finished(uc, res);
    if (flags & IORING_CQE_F_MORE)
      return; /* the notification holds the buffers */
  }
  send_put(ul, s);
  request_ended(ul, ch);
}

static int ur_flush(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  send_start(uc); /* a send in flight picks the rest up when it ends */
  return 0;
}

static int ur_shutdown_output(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return WEFT_ENOTCONN;
  if (uc->send_inflight || !weft_outbound_is_empty(ch)) {
    uc->shutdown_pending = true; /* after the last queued byte */
    return 0;
  }
  shutdown_now(uc);
  return 0;
}

/* ---- connecting ---- */

static void connect_done(ur_channel *uc, int32_t res) {
  ur_loop *ul = uc->ul;
  weft_channel *ch = uc->ch;
  uc->connecting = false;
  if (weft_channel_state_of(ch) == WEFT_CHANNEL_REGISTERED) {
    if (res == 0) {
      /* auto-read may have changed while connecting */
      int64_t auto_read = 1;
      weft_channel_get_option(ch, WEFT_OPT_AUTO_READ, &auto_read);
      uc->reading = auto_read != 0;
      recv_arm(uc);
    }
    weft_channel_connected(ch, res);
  }
  request_ended(ul, ch);
}

/* ---- completions ---- */

static void dispatch(ur_loop *ul, uint64_t user_data, int32_t res,
                     uint32_t flags) {
  ur_op *op = (ur_op *)(uintptr_t)user_data;
  if (op == NULL)
    return; /* cancel, close, shutdown, nop: nothing to do */
  switch (op->kind) {
  case UR_OP_ACCEPT:
    accept_done((ur_listener *)op, res, flags);
    break;
  case UR_OP_RECV:
    recv_done(container_of(op, ur_channel, op_recv), res, flags);
    break;
  case UR_OP_PLAIN_RECV:
    plain_recv_done(container_of(op, ur_channel, op_plain), res);
    break;
  case UR_OP_SEND:
    send_done(ul, (ur_send *)op, res);
    break;
  case UR_OP_SEND_ZC:
    send_zc_done(ul, (ur_send *)op, res, flags);
    break;
  case UR_OP_CONNECT:
    connect_done(container_of(op, ur_channel, op_connect), res);
    break;
  default:
    weft_log(WEFT_LOG_ERROR, "uring: CQE with unknown request kind %u",
             (unsigned)op->kind);
  }
}

/* ---- channel lifecycle ---- */

static int channel_take_fd(weft_channel *ch, int fd) {
  ur_channel *uc = ur_of(ch);
  int err = 0;
  ur_loop *ul = loop_state_of(weft_channel_loop(ch), &err);
  if (ul == NULL)
    return err;
  int64_t auto_read = 1;
  weft_channel_get_option(ch, WEFT_OPT_AUTO_READ, &auto_read);
  uc->ch = ch;
  uc->ul = ul;
  uc->fd = fd;
  uc->has_fd = true;
  uc->reading = auto_read != 0;
  uc->op_recv.kind = UR_OP_RECV;
  uc->op_plain.kind = UR_OP_PLAIN_RECV;
  uc->op_connect.kind = UR_OP_CONNECT;
  return weft_sockopts_apply(&uc->opts, uc->fd);
}

static int ur_adopt(weft_channel *ch, intptr_t handle) {
  int fd = (int)handle;
  int err = channel_take_fd(ch, fd);
  ur_channel *uc = ur_of(ch);
  if (err < 0) {
    close(fd);
    uc->fd = -1; /* the core's close then finds nothing to do */
    return err;
  }
  recv_arm(uc);
  return 0;
}

static void ur_discard(intptr_t handle) { close((int)handle); }

static int connect_start(weft_channel *ch, const struct addrinfo *ai) {
  if (ai->ai_addrlen > sizeof(struct sockaddr_storage))
    return WEFT_EINVAL;
  int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0)
    return neg_errno();
  int err = channel_take_fd(ch, fd);
  ur_channel *uc = ur_of(ch);
  if (err < 0) {
    close(fd);
    uc->fd = -1;
    return err;
  }
  struct io_uring_sqe *sqe = get_sqe(uc->ul);
  if (sqe == NULL) {
    close(fd);
    uc->fd = -1;
    return WEFT_EIO;
  }
  memcpy(&uc->peer, ai->ai_addr, ai->ai_addrlen);
  uc->peer_len = ai->ai_addrlen;
  io_uring_prep_connect(sqe, fd, (struct sockaddr *)&uc->peer, uc->peer_len);
  io_uring_sqe_set_data(sqe, &uc->op_connect);
  uc->connecting = true;
  request_started(uc);
  return 0;
}

static int ur_connect(weft_channel *ch, const weft_endpoint *ep) {
  struct addrinfo *res;
  int err = weft_endpoint_resolve(ep, false, &res);
  if (err < 0)
    return err;
  err = res != NULL ? connect_start(ch, res) : WEFT_EADDRNOTAVAIL;
  freeaddrinfo(res);
  return err;
}

/* Cancels every request on the socket, then closes it, both through the
 * ring; the requests' CQEs release their channel references. */
static void ur_close(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return;
  ur_loop *ul = uc->ul;
  struct io_uring_sqe *sqe = get_sqe(ul);
  if (sqe != NULL) {
    io_uring_prep_cancel_fd(sqe, uc->fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, 0);
    /* Hard link: the close runs after the cancel whatever it found. */
    sqe->flags |= IOSQE_IO_HARDLINK;
    sqe = get_sqe(ul);
  }
  if (sqe != NULL) {
    io_uring_prep_close(sqe, uc->fd);
    io_uring_sqe_set_data64(sqe, 0);
  } else {
    close(uc->fd);
  }
  uc->fd = -1;
  uc->reading = false;
  uc->shutdown_pending = false;
}

static int ur_set_read(weft_channel *ch, bool on) {
  ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return 0; /* applied at adopt / connect from the channel's option */
  uc->reading = on;
  if (on) {
    recv_arm(uc); /* no-op while a recv (or its cancel) is in the kernel */
    return 0;
  }
  if (uc->recv_state == UR_RECV_ARMED) {
    /* Completions already on their way are still delivered. */
    struct io_uring_sqe *sqe = get_sqe(uc->ul);
    if (sqe == NULL)
      return WEFT_EIO;
    io_uring_prep_cancel(sqe, &uc->op_recv, 0);
    io_uring_sqe_set_data64(sqe, 0);
    uc->recv_state = UR_RECV_CANCELLING;
  }
  return 0;
}

static int peer_or_local(const weft_channel *ch, char *buf, size_t len,
                         bool peer) {
  const ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return WEFT_ENOTCONN;
  return weft_socket_address(uc->fd, peer, buf, len);
}

static int ur_remote_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, true);
}

static int ur_local_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, false);
}

const weft_transport_ops weft__transport_uring = {
    .name = "uring",
    .caps = WEFT_TRANSPORT_CAP_STREAM | WEFT_TRANSPORT_CAP_HALF_CLOSE |
            WEFT_TRANSPORT_CAP_SOCKET_OPTS,
    .channel_priv_size = sizeof(ur_channel),
    .probe = ur_probe,
    .config_keys = ur_keys,
    .config_set = ur_config_set,
    .loop_init = ur_loop_init,
    .loop_fini = ur_loop_fini,
    .listen = ur_listen,
    .listen_close = ur_listen_close,
    .listen_address = ur_listen_address,
    .connect = ur_connect,
    .adopt = ur_adopt,
    .discard = ur_discard,
    .flush = ur_flush,
    .close = ur_close,
    .shutdown_output = ur_shutdown_output,
    .set_option = ur_set_option,
    .get_option = ur_get_option,
    .set_read = ur_set_read,
    .remote_address = ur_remote_address,
    .local_address = ur_local_address,
};
