/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/group.c: how a loop's verbs resources follow its
 * connection count. Channels share a CQ and an SRQ in groups: a group
 * starts with room for VERBS_GROUP_STEP channels and doubles (the CQ with
 * ibv_resize_cq, the SRQ with ibv_modify_srq's max_wr) up to what the
 * device allows; a device that cannot resize, or a full group, gets a new
 * group, all polled by the device's one source (recv.c). The receive slots
 * live in one reservation of address space, registered a chunk at a time
 * as the groups' high-water marks need them. Each channel brings
 * VERBS_SHARE receives to its group's SRQ, less the slots it holds; the
 * slots a channel's handlers still hold when it ends are orphans, for
 * which the slab keeps room until they come back. "Sizing from the
 * connection count" and "Flow control" in verbs_internal.h say why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>

#include "transports/verbs/verbs_internal.h"

/* ---- the receive slab ---- */

#define CHUNK_BYTES ((size_t)VERBS_CHUNK_SLOTS * VERBS_SLOT_SIZE)
#define MAX_CHUNKS (VERBS_MAX_SLOTS / VERBS_CHUNK_SLOTS)

int weft__verbs_slab_init(verbs_dev *d) {
  /* Address space only: PROT_NONE costs no memory and no commit charge;
   * a chunk becomes memory when it is registered. */
  size_t len = (size_t)VERBS_MAX_SLOTS * VERBS_SLOT_SIZE;
  void *p = mmap(NULL, len, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return WEFT_ENOMEM;
  d->slab = p;
  d->slab_reserved = len;
  d->chunk_mr = calloc(MAX_CHUNKS, sizeof *d->chunk_mr);
  d->free_slots = calloc(VERBS_MAX_SLOTS, sizeof *d->free_slots);
  if (d->chunk_mr == NULL || d->free_slots == NULL)
    return WEFT_ENOMEM; /* weft__verbs_slab_fini frees what was taken */
  return 0;
}

void weft__verbs_slab_fini(verbs_dev *d) {
  for (uint32_t i = 0; i < d->n_chunks; i++)
    ibv_dereg_mr(d->chunk_mr[i]);
  d->n_chunks = 0;
  if (d->slab != NULL)
    munmap(d->slab, d->slab_reserved);
  d->slab = NULL;
  free(d->chunk_mr);
  free(d->free_slots);
}

/* Registers the next chunk of the slab; its slots become free. */
static int slab_grow(verbs_dev *d) {
  if (d->n_chunks == MAX_CHUNKS)
    return WEFT_ENOBUFS;
  uint8_t *p = d->slab + (size_t)d->n_chunks * CHUNK_BYTES;
  if (mprotect(p, CHUNK_BYTES, PROT_READ | PROT_WRITE) != 0)
    return neg_errno();
  struct ibv_mr *mr = ibv_reg_mr(d->pd, p, CHUNK_BYTES, IBV_ACCESS_LOCAL_WRITE);
  if (mr == NULL) {
    int err = neg_errno();
    mprotect(p, CHUNK_BYTES, PROT_NONE);
    return err;
  }
  d->chunk_mr[d->n_chunks++] = mr;
  uint32_t first = d->n_slots;
  d->n_slots += VERBS_CHUNK_SLOTS;
  for (uint32_t i = d->n_slots; i > first; i--)
    slot_put(d, i - 1); /* the lowest on top */
  return 0;
}

/* Registers chunks until the slab has `need` slots. */
static int slab_ensure(verbs_dev *d, uint32_t need) {
  while (d->n_slots < need) {
    int err = slab_grow(d);
    if (err < 0)
      return err;
  }
  return 0;
}

/* ---- groups: a CQ and an SRQ ---- */

static int group_new(verbs_dev *d, verbs_group **out) {
  if (d->n_groups >= d->max_groups)
    return WEFT_ENOBUFS;
  if (d->n_groups == d->groups_len) {
    uint32_t len = d->groups_len > 0 ? 2 * d->groups_len : 4;
    verbs_group **gs = realloc(d->groups, len * sizeof *gs);
    if (gs == NULL)
      return WEFT_ENOMEM;
    d->groups = gs;
    d->groups_len = len;
  }
  verbs_group *g = calloc(1, sizeof *g);
  if (g == NULL)
    return WEFT_ENOMEM;
  g->dev = d;
  g->max = d->group_max;
  g->cap = VERBS_GROUP_STEP < g->max ? VERBS_GROUP_STEP : g->max;
  g->cq =
      ibv_create_cq(d->ctx, (int)(g->cap * VERBS_CQ_PER_CHANNEL), g, d->cc, 0);
  if (g->cq == NULL) {
    int err = neg_errno();
    free(g);
    return err;
  }
  struct ibv_srq_init_attr sa = {
      .attr = {.max_wr = g->cap * VERBS_SHARE, .max_sge = 1}};
  g->srq = ibv_create_srq(d->pd, &sa);
  if (g->srq == NULL) {
    int err = neg_errno();
    ibv_destroy_cq(g->cq);
    free(g);
    return err;
  }
  d->groups[d->n_groups++] = g;
  *out = g;
  return 0;
}

/* Doubles the group's room, CQ first: a CQ larger than its channels need
 * is harmless if the SRQ then cannot grow. A device that cannot resize
 * keeps the group at its size. */
static int group_grow(verbs_group *g) {
  uint32_t cap = 2 * g->cap < g->max ? 2 * g->cap : g->max;
  int rc = ibv_resize_cq(g->cq, (int)(cap * VERBS_CQ_PER_CHANNEL));
  if (rc == 0) {
    struct ibv_srq_attr sa = {.max_wr = cap * VERBS_SHARE};
    rc = ibv_modify_srq(g->srq, &sa, IBV_SRQ_MAX_WR);
  }
  if (rc != 0) {
    weft_log(WEFT_LOG_INFO,
             "verbs: %s cannot grow a completion or shared receive queue "
             "past %u channels (%s); further channels get a group of their "
             "own",
             ibv_get_device_name(g->dev->ctx->device), g->cap, strerror(rc));
    g->max = g->cap;
    return rc > 0 ? -rc : WEFT_EIO;
  }
  g->cap = cap;
  return 0;
}

/* A group with room for one more channel, grown or new if need be. */
static int group_find(verbs_dev *d, verbs_group **out) {
  for (uint32_t i = 0; i < d->n_groups; i++)
    if (d->groups[i]->n_channels < d->groups[i]->cap) {
      *out = d->groups[i];
      return 0;
    }
  for (uint32_t i = 0; i < d->n_groups; i++)
    if (d->groups[i]->cap < d->groups[i]->max &&
        group_grow(d->groups[i]) == 0) {
      *out = d->groups[i];
      return 0;
    }
  return group_new(d, out);
}

/* Logs why a channel found no room on `d`; returns `err`. */
static int refuse(verbs_dev *d, int err, const char *what) {
  weft_log(WEFT_LOG_WARN,
           "verbs: loop %d refuses a channel on %s, which has %u: %s (%s)",
           weft_loop_index(d->vl->loop), ibv_get_device_name(d->ctx->device),
           d->n_channels, what, weft_strerror(err));
  return err;
}

int weft__verbs_group_join(verbs_dev *d, verbs_group **out) {
  if (d->n_channels >= VERBS_MAX_CHANNELS)
    return refuse(d, WEFT_ENOBUFS, "as many as a loop takes per device");
  verbs_group *g;
  int err = group_find(d, &g);
  if (err < 0)
    return refuse(d, err, "no completion or shared receive queue for it");
  /* Slots for every group's high-water mark, a poll batch each (a batch's
   * messages are held after its refill) and the orphans. */
  uint32_t hw = g->n_channels + 1 > g->hw ? g->n_channels + 1 : g->hw;
  uint32_t hw_sum = d->hw_sum - g->hw + hw;
  err = slab_ensure(d, hw_sum * VERBS_SHARE + d->n_groups * VERBS_POLL_BATCH +
                           d->orphans);
  if (err < 0)
    return refuse(d, err,
                  "no receive slots could be registered for it (is "
                  "RLIMIT_MEMLOCK too low?)");
  d->hw_sum = hw_sum;
  g->hw = hw;
  g->n_channels++;
  d->n_channels++;
  weft__verbs_group_refill(g);
  *out = g;
  return 0;
}

void weft__verbs_group_leave(verbs_chan *vc) {
  verbs_group *g = vc->grp;
  if (g == NULL)
    return;
  verbs_dev *d = g->dev;
  g->n_channels--;
  d->n_channels--;
  g->in_use -= vc->in_use;
  vc->grp = NULL;
  if (vc->in_use > 0) {
    /* Its handlers (or queued writes elsewhere) still hold slots: they
     * come back through weft__verbs_slot_release, which needs the
     * channel's memory until the last one. */
    d->orphans += vc->in_use;
    vc->orphaned = true;
    weft_channel_retain(vc->ch);
  }
}

void weft__verbs_group_close(verbs_group *g) {
  ibv_destroy_srq(g->srq);
  if (g->cq_unacked > 0)
    ibv_ack_cq_events(g->cq, g->cq_unacked);
  ibv_destroy_cq(g->cq);
  free(g);
}

/* ---- receives ---- */

/* Posts up to `n` receives from free slots, chained, in one call. Returns
 * how many were posted or an error. */
static int srq_post(verbs_group *g, uint32_t n) {
  verbs_dev *d = g->dev;
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
    sges[i] =
        (struct ibv_sge){.addr = (uintptr_t)slot_ptr(d, slot),
                         .length = VERBS_SLOT_SIZE,
                         .lkey = d->chunk_mr[slot / VERBS_CHUNK_SLOTS]->lkey};
    wrs[i] = (struct ibv_recv_wr){.wr_id = VERBS_WR_RECV | slot,
                                  .sg_list = &sges[i],
                                  .num_sge = 1,
                                  .next = i + 1 < k ? &wrs[i + 1] : NULL};
  }
  struct ibv_recv_wr *bad = NULL;
  int rc = ibv_post_srq_recv(g->srq, wrs, &bad);
  /* The work requests before `bad` were posted, failure or not. */
  uint32_t done = rc == 0 ? k : bad != NULL ? (uint32_t)(bad - wrs) : 0;
  d->n_free -= done;
  g->posted += done;
  if (rc != 0)
    return rc > 0 ? -rc : WEFT_EIO;
  return (int)k;
}

bool weft__verbs_group_refill(verbs_group *g) {
  verbs_dev *d = g->dev;
  uint32_t want = group_want(g);
  int err = 0;
  while (g->posted < want && err == 0) {
    if (d->n_free == 0)
      err = slab_grow(d); /* the sizing says it cannot happen */
    if (err == 0) {
      int k = srq_post(g, want - g->posted);
      err = k < 0 ? k : 0;
    }
  }
  if (g->posted >= want) {
    g->short_logged = false;
    return true;
  }
  if (!g->short_logged) {
    g->short_logged = true;
    weft_log(WEFT_LOG_ERROR,
             "verbs: a shared receive queue on %s is %u receives short (%s); "
             "its %u channels return no credits until it is refilled",
             ibv_get_device_name(d->ctx->device), want - g->posted,
             weft_strerror(err < 0 ? err : WEFT_EIO), g->n_channels);
  }
  return false;
}

/* A received buffer's last reference went (loop thread). */
void weft__verbs_slot_release(void *base, size_t capacity, void *arg) {
  (void)capacity;
  verbs_chan *vc = arg;
  verbs_dev *d = vc->dev;
  vc->in_use--;
  if (d->vl != NULL)
    slot_put(d, (uint32_t)(((uint8_t *)base - d->slab) / VERBS_SLOT_SIZE));
  bool last = false;
  if (vc->orphaned) {
    d->orphans--;
    last = vc->in_use == 0;
    vc->orphaned = !last;
  } else if (vc->grp != NULL) {
    vc->grp->in_use--;
    /* A touched channel sends at the end of its batch anyway. */
    if (!vc->touched && vc->state == VC_ESTABLISHED &&
        weft__verbs_returnable(&vc->flow, vc->in_use) >= VERBS_CREDIT_THRESHOLD)
      weft__verbs_queue_deliver(vc);
  }
  weft__verbs_dev_unref(d);
  if (last)
    weft_channel_release(vc->ch); /* taken by weft__verbs_group_leave */
}
