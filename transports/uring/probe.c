/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/probe.c: what comes before any loop: the
 * [transport.uring] settings, and the probe that checks once per process
 * that io_uring can run here (and says why not). The ring and buffer ring
 * setup it tries are the ones every loop then uses, so they live here too.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/error.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- settings: [transport.uring] ---- */

ur_settings weft__uring_settings = {UR_BUF_COUNT_DEFAULT, UR_BUF_SIZE_DEFAULT,
                                    UR_SEND_ZC_MIN_DEFAULT};

const weft_transport_key weft__uring_keys[] = {
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

int weft__uring_config_set(const char *key, const char *value, char *why,
                           size_t why_len) {
  unsigned v;
  bool ok;
  const char *valid;
  if (strcmp(key, "buf_count") == 0) {
    ok = parse_uint(value, 1, 32768, &v) && (v & (v - 1)) == 0;
    valid = weft__uring_keys[0].values;
    if (ok)
      weft__uring_settings.buf_count = v;
  } else if (strcmp(key, "buf_size") == 0) {
    ok = parse_uint(value, 64, 1u << 20, &v);
    valid = weft__uring_keys[1].values;
    if (ok)
      weft__uring_settings.buf_size = v;
  } else {
    ok = parse_uint(value, 0, UINT_MAX, &v);
    valid = weft__uring_keys[2].values;
    if (ok)
      weft__uring_settings.send_zc_min = v;
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
bool weft__uring_probed_send_zc;    /* SENDMSG_ZC is there (6.1) */

/* ThreadSanitizer does not see liburing map and unmap a ring (raw
 * system calls, not libc's mmap), so when one loop's ring goes and another
 * loop's new ring is mapped at the same address, the new ring's first
 * reads look like a race with the old ring's last writes (test_channel_uring
 * under load: reap against io_uring_cq_advance). A release by the thread
 * that ends a ring, before the unmap, and an acquire by the thread that
 * creates one, after the map, give TSan the order the unmap and the map
 * really have. One sync object for every ring: acquire takes in every
 * release before it. Nothing in other builds. */
#if defined(__SANITIZE_THREAD__)
#define UR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UR_TSAN 1
#endif
#endif
#ifdef UR_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char ring_lifetimes; /* the sync object's address */
#define RING_MAPPED() __tsan_acquire(&ring_lifetimes)
#define RING_UNMAPPING() __tsan_release(&ring_lifetimes)
#else
#define RING_MAPPED() ((void)0)
#define RING_UNMAPPING() ((void)0)
#endif

void weft__uring_ring_exit(struct io_uring *ring) {
  RING_UNMAPPING(); /* after this thread's last access to the ring */
  io_uring_queue_exit(ring);
}

/* Creates a ring with the best flags this kernel takes. */
int weft__uring_ring_create(struct io_uring *ring, unsigned entries,
                            unsigned cq, unsigned *flags_out) {
  int rc = WEFT_EINVAL;
  for (size_t i = 0; i < sizeof setup_choices / sizeof setup_choices[0]; i++) {
    struct io_uring_params p = {.flags = setup_choices[i]};
    if (cq > 0) {
      p.flags |= IORING_SETUP_CQSIZE;
      p.cq_entries = cq;
    }
    rc = io_uring_queue_init_params(entries, ring, &p);
    if (rc == 0) {
      RING_MAPPED(); /* before this thread's first access to the ring */
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
int weft__uring_buf_ring_setup(struct io_uring *ring, unsigned entries,
                               int bgid, struct io_uring_buf_ring **out) {
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
  weft__uring_probed_send_zc =
      io_uring_opcode_supported(p, IORING_OP_SENDMSG_ZC);
  io_uring_free_probe(p);
  return ok;
}

/* Checks everything the transport needs; 0 or an error with `why`. */
static int probe_features(char *why, size_t len) {
  struct io_uring ring;
  unsigned flags = 0;
  int rc = weft__uring_ring_create(&ring, 8, 0, &flags);
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
  rc = weft__uring_buf_ring_setup(&ring, 1, UR_BGID, &br);
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
  weft__uring_ring_exit(&ring);
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
int weft__uring_probe(char *why, size_t len) {
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
