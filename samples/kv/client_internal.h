/* SPDX-License-Identifier: Apache-2.0 */
/* What the KV client's files share beyond client.h. */
#ifndef WEFT_KV_CLIENT_INTERNAL_H
#define WEFT_KV_CLIENT_INTERNAL_H

#include "client.h"

/**
 * kv_client_close's work, with its outcome: queues the close on c's loop,
 * where `cb` (may be NULL) runs once the channel is gone. Returns what
 * weft_loop_execute said: < 0 when the loop has finished and `cb` will
 * never run (kv_sync_close then stops waiting). Any thread.
 */
int kv__client_close_start(kv_client *c, kv_closed_cb cb, void *arg);

#endif
