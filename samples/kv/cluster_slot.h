/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/cluster_slot.h: Redis Cluster's key-to-slot mapping, for the
 * server (cluster.c) and the client (client_cluster.c).
 *
 * From the Redis Cluster specification ("Keys distribution model" and
 * "Hash tags", https://redis.io/docs/reference/cluster-spec/): the key
 * space is split into 16384 slots; a key's slot is CRC16 of the key modulo
 * 16384, where CRC16 is the XMODEM variant (polynomial 0x1021, initial
 * value 0, no reflection, no final xor; CRC16("123456789") = 0x31C3). If
 * the key holds a '{' with a '}' after it and at least one byte between
 * them, only the bytes between the first '{' and the first '}' after it
 * are hashed (the hash tag), so "{user1}.a" and "{user1}.b" share a slot.
 *
 * Threads: pure functions, safe on any thread.
 */
#ifndef WEFT_SAMPLES_KV_CLUSTER_SLOT_H
#define WEFT_SAMPLES_KV_CLUSTER_SLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Slots of the key space (the Redis Cluster spec's 16384). */
#define KV_CLUSTER_SLOTS 16384

/** CRC16/XMODEM of `len` bytes at `data` (the spec's reference values:
 *  "123456789" gives 0x31C3). */
uint16_t kv_crc16(const void *data, size_t len);

/** The slot of key `key` (`len` bytes, any bytes), 0 to 16383: CRC16 of
 *  its hash tag if it has one, else of the whole key, modulo 16384. */
unsigned kv_cluster_keyslot(const void *key, size_t len);

/**
 * True when command `cmd` (kv_cmd, proto.h) names keys in its arguments,
 * and so is routed by the slot of its first key (argument 0 for every such
 * command of this service). False for commands about the connection or the
 * whole node (PING, INFO, SCAN, KEYS, DBSIZE, CLUSTER, ...). For clients
 * that route requests (client_cluster.c).
 */
bool kv_cmd_has_key(int cmd);

#endif
