/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/device.c: the probe, and what a loop keeps per RDMA
 * device: the protection domain, the completion channel (a weft_source)
 * that every group's CQ reports to, the pool hook that registers pool
 * slabs, and the QP map; the groups of CQ + SRQ and the receive slab are
 * group.c's. This is set up once per loop and device, apart from the data
 * path. A device's memory is counted apart from its queues, as pool slab
 * registrations and held receive buffers may outlive the loop. The design
 * is in verbs_internal.h.
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

/* ---- devices: PD, completion channel, pool hook ---- */

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
  weft__verbs_dev_unref(arg);
}

/* The pool is freed: its hook will not register another slab. */
static void slab_hook_fini(void *arg) { weft__verbs_dev_unref(arg); }

/* Frees what is left once the loop, the pool and every held slot let go. */
void weft__verbs_dev_unref(verbs_dev *d) {
  if (--d->refs > 0)
    return;
  weft__verbs_slab_fini(d);
  free(d->groups);
  free(d->hash);
  if (d->pd != NULL)
    ibv_dealloc_pd(d->pd);
  free(d);
}

static const weft_source_ops dev_source_ops = {.name = "verbs-cq",
                                               .poll = weft__verbs_dev_poll,
                                               .arm = weft__verbs_dev_arm,
                                               .wakeup =
                                                   weft__verbs_dev_wakeup};

/* Channels per group from what the device allows: its CQ must hold every
 * completion of its channels, its SRQ their shares. */
static int dev_size(verbs_dev *d) {
  struct ibv_device_attr attr;
  int rc = ibv_query_device(d->ctx, &attr);
  if (rc != 0)
    return -rc;
  uint32_t by_cq = attr.max_cqe > 0
                       ? (uint32_t)attr.max_cqe / VERBS_CQ_PER_CHANNEL
                       : VERBS_GROUP_MAX;
  uint32_t by_srq = attr.max_srq_wr > 0
                        ? (uint32_t)attr.max_srq_wr / VERBS_SHARE
                        : VERBS_GROUP_MAX;
  d->group_max = VERBS_GROUP_MAX;
  if (by_cq < d->group_max)
    d->group_max = by_cq;
  if (by_srq < d->group_max)
    d->group_max = by_srq;
  int groups = attr.max_cq < attr.max_srq ? attr.max_cq : attr.max_srq;
  d->max_groups = groups > 0 ? (uint32_t)groups : 1;
  d->max_sge = attr.max_sge < VERBS_MAX_SGE ? attr.max_sge : VERBS_MAX_SGE;
  if (d->group_max == 0 || d->max_sge < 1 || attr.max_srq <= 0)
    return WEFT_ENOBUFS;
  return 0;
}

static int dev_open(verbs_loop *vl, struct ibv_context *ctx, verbs_dev **out) {
  int err;
  verbs_dev *d = calloc(1, sizeof *d);
  if (d == NULL)
    return WEFT_ENOMEM;
  d->vl = vl;
  d->ctx = ctx;
  d->refs = 1;
  err = dev_size(d);
  if (err < 0)
    goto failed_size;
  d->pd = ibv_alloc_pd(ctx);
  if (d->pd == NULL) {
    err = neg_errno();
    goto failed_size;
  }
  d->hash = calloc(VERBS_HASH_MIN, sizeof *d->hash);
  d->hash_mask = VERBS_HASH_MIN - 1;
  err = d->hash == NULL ? WEFT_ENOMEM : weft__verbs_slab_init(d);
  if (err < 0)
    goto failed_size; /* weft__verbs_dev_unref frees what was allocated */
  d->cc = ibv_create_comp_channel(ctx);
  if (d->cc == NULL) {
    err = neg_errno();
    goto failed_size;
  }
  if (fcntl(d->cc->fd, F_SETFL, fcntl(d->cc->fd, F_GETFL) | O_NONBLOCK) < 0) {
    err = neg_errno();
    goto failed_cc;
  }
  /* Every pool slab, now and later, is registered once. The hook may
   * register a slab whenever the pool maps one, until the pool is freed,
   * even with no slab registered (the pool gives empty slabs back), so it
   * holds a reference of its own, dropped by slab_hook_fini. */
  weft_pool *pool = weft_loop_pool(vl->loop);
  d->pool_hook = weft_pool_add_slab_hook(pool, slab_reg, slab_unreg, d);
  if (d->pool_hook < 0) {
    err = d->pool_hook;
    goto failed_cc;
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
  ibv_destroy_comp_channel(d->cc);
  d->vl = NULL;
  weft__verbs_dev_unref(d);
  return err;
failed_cc:
  ibv_destroy_comp_channel(d->cc);
failed_size:
  d->vl = NULL;
  weft__verbs_dev_unref(d);
  return err;
}

/* Called by loop_fini once no channel uses the device. */
void weft__verbs_dev_close(verbs_dev *d) {
  if (d->source_added)
    weft_loop_remove_source(d->vl->loop, &d->source);
  for (uint32_t i = 0; i < d->n_groups; i++)
    weft__verbs_group_close(d->groups[i]);
  d->n_groups = 0;
  ibv_destroy_comp_channel(d->cc);
  d->vl = NULL;
  weft__verbs_dev_unref(d);
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
