/* SPDX-License-Identifier: Apache-2.0 */
/* Redis Cluster's key-to-slot mapping (cluster_slot.h). */
#include "cluster_slot.h"

#include <string.h>

#include "proto.h"

/* CRC16/XMODEM, bit by bit: polynomial 0x1021, initial value 0, MSB first
 * (the Redis Cluster spec's "CRC16 reference implementation" parameters).
 * The table below is built from the polynomial at the first call; 256
 * entries of the same function the spec tabulates. */
static uint16_t crc_table[256];
static bool crc_ready;

static void crc_init(void) {
  for (unsigned i = 0; i < 256; i++) {
    uint16_t crc = (uint16_t)(i << 8);
    for (int b = 0; b < 8; b++)
      crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    crc_table[i] = crc;
  }
}

uint16_t kv_crc16(const void *data, size_t len) {
  /* The table is the same whoever builds it: two threads that race here
   * write identical values, and the flag is set after them. */
  if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) {
    crc_init();
    __atomic_store_n(&crc_ready, true, __ATOMIC_RELEASE);
  }
  const uint8_t *p = data;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++)
    crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ p[i]) & 0xFF]);
  return crc;
}

unsigned kv_cluster_keyslot(const void *key, size_t len) {
  const char *k = key;
  const char *open = len > 0 ? memchr(k, '{', len) : NULL;
  if (open != NULL) {
    size_t from = (size_t)(open - k) + 1;
    const char *close = memchr(k + from, '}', len - from);
    /* "{}" (nothing between) hashes the whole key, as the spec says. */
    if (close != NULL && close > k + from)
      return kv_crc16(k + from, (size_t)(close - (k + from))) &
             (KV_CLUSTER_SLOTS - 1);
  }
  return kv_crc16(k, len) & (KV_CLUSTER_SLOTS - 1);
}

bool kv_cmd_has_key(int cmd) {
  switch (cmd) {
  case KV_CMD_PING:
  case KV_CMD_SCAN:
  case KV_CMD_DBSIZE:
  case KV_CMD_FLUSHALL:
  case KV_CMD_INFO:
  case KV_CMD_KEYS:
  case KV_CMD_MULTI:
  case KV_CMD_EXEC:
  case KV_CMD_DISCARD:
  case KV_CMD_AUTH:
  case KV_CMD_HELLO:
  case KV_CMD_CLIENT:
  case KV_CMD_COMMAND:
  case KV_CMD_ECHO:
  case KV_CMD_SELECT:
  case KV_CMD_CONFIG:
  case KV_CMD_QUIT:
  case KV_CMD_CLUSTER:
  case KV_CMD_ASKING:
  case KV_CMD_READONLY:
  case KV_CMD_READWRITE:
  case KV_CMD_MIGRATE:
    return false;
  default:
    return kv_cmd_name(cmd) != NULL;
  }
}
