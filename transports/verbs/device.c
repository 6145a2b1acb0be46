/* transports/verbs/device.c: the probe, and what a loop keeps per RDMA
 * device: the protection domain, the completion queue with its completion
 * channel (a weft_source), the SRQ every QP of the loop receives from, and
 * the registered slab of fixed-size receive slots behind it. This is set up
 * once per loop and device, apart from the data path: recv.c polls the CQ
 * made here and refills the SRQ with weft__verbs_srq_refill. A device's
 * memory is counted apart from its queues, as pool slab registrations and
 * held receive buffers may outlive the loop. The design is in
 * verbs_internal.h.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/source.h>

#include "transports/verbs/verbs_internal.h"

/* ---- the probe ---- */

int weft__verbs_probe(char *why, size_t why_len) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    int e = list == NULL ? errno : 0;
    if (list != NULL)
      ibv_free_device_list(list);
    bool kernel = access("/sys/class/infiniband", F_OK) == 0;
    snprintf(why, why_len,
             "verbs: no RDMA device found (ibv_get_device_list returned "
             "%s%s%s); load rdma_rxe for Soft-RoCE (modprobe rdma_rxe; rdma "
             "link add rxe0 type rxe netdev <if>), or use transport=tcp",
             list == NULL ? "an error: " : "none",
             list == NULL ? strerror(e) : "",
             kernel ? "" : "; the kernel has no RDMA support loaded");
    return WEFT_ENODEV;
  }
  ibv_free_device_list(list);
  if (access("/dev/infiniband/rdma_cm", F_OK) != 0) {
    snprintf(why, why_len,
             "verbs: rdma_cm is not available (/dev/infiniband/rdma_cm is "
             "missing: modprobe rdma_ucm), or use transport=tcp");
    return WEFT_ENODEV;
  }
  return 0;
}

/* ---- devices: PD, CQ, SRQ, receive slab ---- */

static void dev_unref(verbs_dev *d);

static int slab_reg(void *arg, void *base, size_t len, uint64_t *key) {
  verbs_dev *d = arg;
  struct ibv_mr *mr = ibv_reg_mr(d->pd, base, len, IBV_ACCESS_LOCAL_WRITE);
  if (mr == NULL)
    return neg_errno();
  d->refs++;
  *key = (uint64_t)(uintptr_t)mr; /* the MR: unreg needs it, lkey is in it */
  return 0;
}

static void slab_unreg(void *arg, void *base, size_t len, uint64_t key) {
  (void)base;
  (void)len;
  ibv_dereg_mr((struct ibv_mr *)(uintptr_t)key);
  dev_unref(arg);
}

/* The pool is freed: its hook will not register another slab. */
static void slab_hook_fini(void *arg) { dev_unref(arg); }

/* Frees what is left once the loop, the pool and every held slot let go. */
static void dev_unref(verbs_dev *d) {
  if (--d->refs > 0)
    return;
  if (d->slab_mr != NULL)
    ibv_dereg_mr(d->slab_mr);
  free(d->slab);
  free(d->free_slots);
  if (d->pd != NULL)
    ibv_dealloc_pd(d->pd);
  free(d);
}

/* A received buffer's last reference went (loop thread). */
void weft__verbs_slot_release(void *base, size_t capacity, void *arg) {
  (void)capacity;
  verbs_dev *d = arg;
  if (d->vl != NULL)
    slot_put(d, (uint32_t)(((uint8_t *)base - d->slab) / VERBS_SLOT_SIZE));
  dev_unref(d);
}

/* Posts up to `n` receives from free slots, chained, in one call. Returns
 * how many were posted or an error. */
static int srq_post(verbs_dev *d, uint32_t n) {
  struct ibv_recv_wr wrs[VERBS_POLL_BATCH * 2];
  struct ibv_sge sges[VERBS_POLL_BATCH * 2];
  uint32_t max = sizeof wrs / sizeof wrs[0];
  uint32_t k = n < d->n_free ? n : d->n_free;
  if (k > max)
    k = max;
  if (k == 0)
    return 0;
  for (uint32_t i = 0; i < k; i++) {
    uint32_t slot = d->free_slots[d->n_free - 1 - i];
    sges[i] = (struct ibv_sge){.addr = (uintptr_t)slot_ptr(d, slot),
                               .length = VERBS_SLOT_SIZE,
                               .lkey = d->slab_mr->lkey};
    wrs[i] = (struct ibv_recv_wr){.wr_id = slot,
                                  .sg_list = &sges[i],
                                  .num_sge = 1,
                                  .next = i + 1 < k ? &wrs[i + 1] : NULL};
  }
  struct ibv_recv_wr *bad = NULL;
  int rc = ibv_post_srq_recv(d->srq, wrs, &bad);
  if (rc != 0)
    return rc > 0 ? -rc : WEFT_EIO;
  d->n_free -= k;
  return (int)k;
}

/* Reposts exactly what was consumed, as far as free slots allow. */
void weft__verbs_srq_refill(verbs_dev *d) {
  while (d->owed > 0 && d->n_free > 0) {
    int k = srq_post(d, d->owed);
    if (k <= 0) {
      weft_log(WEFT_LOG_ERROR, "verbs: ibv_post_srq_recv: %s",
               weft_strerror(k < 0 ? k : WEFT_EIO));
      break;
    }
    d->owed -= (uint32_t)k;
  }
}

static const weft_source_ops dev_source_ops = {.name = "verbs-cq",
                                               .poll = weft__verbs_dev_poll,
                                               .arm = weft__verbs_dev_arm,
                                               .wakeup =
                                                   weft__verbs_dev_wakeup};

/* Sizes from what the device allows. */
static int dev_size(verbs_dev *d) {
  struct ibv_device_attr attr;
  int rc = ibv_query_device(d->ctx, &attr);
  if (rc != 0)
    return -rc;
  d->srq_depth = VERBS_SRQ_DEPTH;
  if (attr.max_srq_wr > 0 && (uint32_t)attr.max_srq_wr < d->srq_depth)
    d->srq_depth = (uint32_t)attr.max_srq_wr;
  uint32_t per = VERBS_CREDITS + VERBS_CTRL_RESERVE;
  d->max_channels = d->srq_depth / per;
  uint32_t cqe = d->srq_depth + d->max_channels * VERBS_SQ_DEPTH;
  if (attr.max_cqe > 0 && (uint32_t)attr.max_cqe < cqe) {
    cqe = (uint32_t)attr.max_cqe;
    uint32_t by_cq =
        cqe > d->srq_depth ? (cqe - d->srq_depth) / VERBS_SQ_DEPTH : 0;
    if (by_cq < d->max_channels)
      d->max_channels = by_cq;
  }
  d->max_sge = attr.max_sge < VERBS_MAX_SGE ? attr.max_sge : VERBS_MAX_SGE;
  if (d->max_channels == 0 || d->max_sge < 1)
    return WEFT_ENOBUFS;
  return (int)cqe;
}

static int dev_open(verbs_loop *vl, struct ibv_context *ctx, verbs_dev **out) {
  int err;
  verbs_dev *d = calloc(1, sizeof *d);
  if (d == NULL)
    return WEFT_ENOMEM;
  d->vl = vl;
  d->ctx = ctx;
  d->refs = 1;
  int cqe = dev_size(d);
  if (cqe < 0) {
    err = cqe;
    goto failed_size;
  }
  d->pd = ibv_alloc_pd(ctx);
  if (d->pd == NULL) {
    err = neg_errno();
    goto failed_size;
  }
  d->n_slots = d->srq_depth + VERBS_SPARE_SLOTS;
  d->slab_len = (size_t)d->n_slots * VERBS_SLOT_SIZE;
  d->slab = aligned_alloc(4096, d->slab_len);
  d->free_slots = calloc(d->n_slots, sizeof *d->free_slots);
  if (d->slab == NULL || d->free_slots == NULL) {
    err = WEFT_ENOMEM;
    goto failed_slab; /* dev_unref frees what was allocated */
  }
  for (uint32_t i = d->n_slots; i > 0; i--)
    slot_put(d, i - 1);
  d->slab_mr = ibv_reg_mr(d->pd, d->slab, d->slab_len, IBV_ACCESS_LOCAL_WRITE);
  if (d->slab_mr == NULL) {
    err = neg_errno();
    goto failed_slab;
  }
  d->cc = ibv_create_comp_channel(ctx);
  if (d->cc == NULL) {
    err = neg_errno();
    goto failed_slab;
  }
  if (fcntl(d->cc->fd, F_SETFL, fcntl(d->cc->fd, F_GETFL) | O_NONBLOCK) < 0) {
    err = neg_errno();
    goto failed_cq;
  }
  d->cq = ibv_create_cq(ctx, cqe, d, d->cc, 0);
  if (d->cq == NULL) {
    err = neg_errno();
    goto failed_cq;
  }
  struct ibv_srq_init_attr sa = {
      .attr = {.max_wr = d->srq_depth, .max_sge = 1}};
  d->srq = ibv_create_srq(d->pd, &sa);
  if (d->srq == NULL) {
    err = neg_errno();
    goto failed_srq;
  }
  d->owed = d->srq_depth;
  weft__verbs_srq_refill(d);
  if (d->owed != 0) {
    err = WEFT_EIO;
    goto failed_post;
  }
  /* Every pool slab, now and later, is registered once. The hook may
   * register a slab whenever the pool maps one, until the pool is freed,
   * even with no slab registered (the pool gives empty slabs back), so it
   * holds a reference of its own, dropped by slab_hook_fini. */
  weft_pool *pool = weft_loop_pool(vl->loop);
  d->pool_hook = weft_pool_add_slab_hook(pool, slab_reg, slab_unreg, d);
  if (d->pool_hook < 0) {
    err = d->pool_hook;
    goto failed_post;
  }
  d->refs++;
  weft_pool_set_slab_hook_fini(pool, d->pool_hook, slab_hook_fini);
  weft_source_init(&d->source, &dev_source_ops, d->cc->fd, d);
  err = weft_loop_add_source(vl->loop, &d->source);
  if (err < 0)
    goto failed_source;
  d->source_added = true;
  *out = d;
  return 0;

failed_source:
  /* The hook stays with the pool and holds its reference: keep the PD. */
  ibv_destroy_srq(d->srq);
  ibv_destroy_cq(d->cq);
  ibv_destroy_comp_channel(d->cc);
  d->vl = NULL;
  dev_unref(d);
  return err;
failed_post:
  ibv_destroy_srq(d->srq);
failed_srq:
  ibv_destroy_cq(d->cq);
failed_cq:
  ibv_destroy_comp_channel(d->cc);
failed_slab:
failed_size:
  d->vl = NULL;
  dev_unref(d);
  return err;
}

/* Called by loop_fini once no channel uses the device. */
void weft__verbs_dev_close(verbs_dev *d) {
  if (d->source_added)
    weft_loop_remove_source(d->vl->loop, &d->source);
  ibv_destroy_srq(d->srq);
  if (d->cq_unacked > 0)
    ibv_ack_cq_events(d->cq, d->cq_unacked);
  ibv_destroy_cq(d->cq);
  ibv_destroy_comp_channel(d->cc);
  d->vl = NULL;
  dev_unref(d);
}

int weft__verbs_dev_get(verbs_loop *vl, struct ibv_context *ctx,
                        verbs_dev **out) {
  for (int i = 0; i < vl->n_devs; i++)
    if (vl->devs[i]->ctx == ctx) {
      *out = vl->devs[i];
      return 0;
    }
  if (vl->n_devs == VERBS_MAX_DEVICES)
    return WEFT_ENOSPC;
  int err = dev_open(vl, ctx, out);
  if (err < 0) {
    weft_log(WEFT_LOG_ERROR, "verbs: cannot set up device %s: %s",
             ibv_get_device_name(ctx->device), weft_strerror(err));
    return err;
  }
  vl->devs[vl->n_devs++] = *out;
  return 0;
}
