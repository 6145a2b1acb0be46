/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/loop.c: the per-loop instance of the plugin, and the
 * map by which a device's completions find their channels. A loop has one
 * rdma_cm event channel, non-blocking and polled as a weft_source
 * (connect.c handles its events); its devices open with the first QP on
 * them (device.c). loop_fini ends what is left on the loop. The map from
 * QP numbers to channels is per device and filled as QPs are created; the
 * CQ poll (recv.c) looks every completion up in it.
 */
#include <fcntl.h>
#include <stdlib.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/source.h>

#include "transports/verbs/verbs_internal.h"

/* ---- the QP number -> channel map ---- */

/* Doubles the buckets once there are as many channels as buckets, so a
 * lookup stays short with thousands of channels. Without memory for it,
 * the chains just grow. */
static void hash_grow(verbs_dev *d) {
  uint32_t size = 2 * (d->hash_mask + 1);
  verbs_chan **nh = calloc(size, sizeof *nh);
  if (nh == NULL)
    return;
  for (uint32_t i = 0; i <= d->hash_mask; i++)
    while (d->hash[i] != NULL) {
      verbs_chan *vc = d->hash[i];
      d->hash[i] = vc->hash_next;
      vc->hash_next = nh[vc->qp_num & (size - 1)];
      nh[vc->qp_num & (size - 1)] = vc;
    }
  free(d->hash);
  d->hash = nh;
  d->hash_mask = size - 1;
}

void weft__verbs_hash_add(verbs_dev *d, verbs_chan *vc) {
  if (d->hash_count > d->hash_mask)
    hash_grow(d);
  verbs_chan **b = &d->hash[vc->qp_num & d->hash_mask];
  vc->hash_next = *b;
  *b = vc;
  d->hash_count++;
}

void weft__verbs_hash_del(verbs_dev *d, verbs_chan *vc) {
  for (verbs_chan **p = &d->hash[vc->qp_num & d->hash_mask]; *p != NULL;
       p = &(*p)->hash_next)
    if (*p == vc) {
      *p = vc->hash_next;
      d->hash_count--;
      return;
    }
}

verbs_chan *weft__verbs_hash_find(verbs_dev *d, uint32_t qp_num) {
  for (verbs_chan *vc = d->hash[qp_num & d->hash_mask]; vc != NULL;
       vc = vc->hash_next)
    if (vc->qp_num == qp_num)
      return vc;
  return NULL;
}

/* ---- the per-loop instance ---- */

static const weft_source_ops cm_source_ops = {.name = "verbs-cm",
                                              .poll = weft__verbs_cm_poll};

int weft__verbs_loop_init(weft_loop *loop, void **loop_state) {
  int err;
  verbs_loop *vl = calloc(1, sizeof *vl);
  if (vl == NULL)
    return WEFT_ENOMEM;
  vl->loop = loop;
  vl->ec = rdma_create_event_channel();
  if (vl->ec == NULL) {
    err = neg_errno();
    goto failed_channel;
  }
  if (fcntl(vl->ec->fd, F_SETFL, fcntl(vl->ec->fd, F_GETFL) | O_NONBLOCK) < 0) {
    err = neg_errno();
    goto failed_source;
  }
  weft_source_init(&vl->cm_source, &cm_source_ops, vl->ec->fd, vl);
  err = weft_loop_add_source(loop, &vl->cm_source);
  if (err < 0)
    goto failed_source;
  *loop_state = vl;
  return 0;

failed_source:
  rdma_destroy_event_channel(vl->ec);
failed_channel:
  weft_log(WEFT_LOG_ERROR,
           "verbs: cannot start on loop %d: rdma_create_event_channel: %s "
           "(is rdma_ucm loaded?)",
           weft_loop_index(loop), weft_strerror(err));
  free(vl);
  return err;
}

/* The core closed every channel before; lingering ones end now. */
void weft__verbs_loop_fini(weft_loop *loop, void *loop_state) {
  verbs_loop *vl = loop_state;
  while (vl->chans != NULL)
    weft__verbs_vc_teardown(vl->chans);
  while (vl->listeners != NULL) {
    weft_listener_set_priv(vl->listeners->l, NULL);
    weft__verbs_listener_free(vl->listeners);
  }
  for (int i = 0; i < vl->n_devs; i++)
    weft__verbs_dev_close(vl->devs[i]);
  weft_loop_remove_source(loop, &vl->cm_source);
  rdma_destroy_event_channel(vl->ec);
  free(vl);
}
