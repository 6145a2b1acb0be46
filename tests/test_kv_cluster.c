/* SPDX-License-Identifier: Apache-2.0 */
/* The KV service's Redis Cluster pieces that need no network: CRC16 and
 * key slots against the Redis Cluster specification's values and Redis'
 * own answers, and the [cluster] config lines with their error texts. */
#include "harness.h"

#include <string.h>

#include <weft/error.h>

#include "samples/kv/cluster.h"
#include "samples/kv/cluster_slot.h"

static unsigned slot_of(const char *key) {
  return kv_cluster_keyslot(key, strlen(key));
}

START_TEST(kv_cluster_crc16_matches_spec_vector) {
  /* The spec's reference: CRC16/XMODEM("123456789") = 0x31C3. */
  ck_assert_uint_eq(kv_crc16("123456789", 9), 0x31C3);
  ck_assert_uint_eq(kv_crc16("", 0), 0);
}
END_TEST

START_TEST(kv_cluster_keyslot_matches_redis) {
  /* What redis-server 7's CLUSTER KEYSLOT answers for these keys. */
  ck_assert_uint_eq(slot_of("foo"), 12182);
  ck_assert_uint_eq(slot_of("bar"), 5061);
  ck_assert_uint_eq(slot_of("123456789"), 12739);
  ck_assert_uint_eq(slot_of("{user1000}.following"),
                    slot_of("{user1000}.followers"));
  ck_assert_uint_eq(slot_of("{user1000}.following"), slot_of("user1000"));
  /* The first '{' and the first '}' after it; "{}" hashes the whole key. */
  ck_assert_uint_eq(slot_of("foo{bar}{zap}"), slot_of("bar"));
  ck_assert_uint_eq(slot_of("foo{}{bar}"), kv_crc16("foo{}{bar}", 10) & 16383);
  ck_assert_uint_eq(slot_of("foo{{bar}}zap"), slot_of("{bar"));
  ck_assert_uint_eq(slot_of("foo{bar"), kv_crc16("foo{bar", 7) & 16383);
  ck_assert_uint_lt(slot_of(""), KV_CLUSTER_SLOTS);
}
END_TEST

static int key(kv_cluster_options *o, const char *k, const char *v, char *err,
               size_t len) {
  err[0] = '\0';
  return kv_cluster_config_key(o, k, v, err, len);
}

START_TEST(kv_cluster_config_reads_nodes_and_slots) {
  kv_cluster_options o;
  kv_cluster_options_init(&o);
  char err[512];
  ck_assert_int_eq(key(&o, "enabled", "yes", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "myself", "b", err, sizeof err), 0);
  ck_assert_int_eq(
      key(&o, "node", "a 127.0.0.1:7001 slots=0-99,200", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "node",
                       "b [::1]:7002 rpc=127.0.0.1:8002 slots=100-199 "
                       "id=ABCDEF0123456789abcdef0123456789ABCDEF01",
                       err, sizeof err),
                   0);
  ck_assert(o.enabled);
  ck_assert_uint_eq(o.n_nodes, 2);
  ck_assert_str_eq(o.nodes[1].host, "::1");
  ck_assert_int_eq(o.nodes[1].port, 7002);
  ck_assert_str_eq(o.nodes[1].rpc_host, "127.0.0.1");
  ck_assert_int_eq(o.nodes[1].rpc_port, 8002);
  ck_assert_str_eq(o.nodes[1].id, "abcdef0123456789abcdef0123456789abcdef01");
  ck_assert_uint_eq(strlen(o.nodes[0].id), KV_CLUSTER_ID_LEN);
  ck_assert_uint_eq(o.owner[0], 0);
  ck_assert_uint_eq(o.owner[99], 0);
  ck_assert_uint_eq(o.owner[100], 1);
  ck_assert_uint_eq(o.owner[200], 0);
  ck_assert_uint_eq(o.owner[201], KV_CLUSTER_NO_NODE);
  ck_assert_int_eq(kv_cluster_options_check(&o, err, sizeof err), 0);
  kv_cluster *c;
  ck_assert_int_eq(kv_cluster_new(&c, &o), 0);
  ck_assert_uint_eq(c->myself, 1);
  ck_assert_uint_eq(kv_cluster_slots_assigned(c), 201);
  ck_assert_int_eq(kv_cluster_find_node(c, "a", 1), 0);
  ck_assert_int_eq(
      kv_cluster_find_node(c, "ABCDEF0123456789abcdef0123456789abcdef01", 40),
      1);
  ck_assert_int_eq(kv_cluster_find_node(c, "z", 1), -1);
  kv_cluster_free(c);
}
END_TEST

START_TEST(kv_cluster_config_errors_name_the_valid_form) {
  kv_cluster_options o;
  kv_cluster_options_init(&o);
  char err[512];
  ck_assert_int_eq(key(&o, "enabled", "maybe", err, sizeof err), WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "expected yes or no"));
  ck_assert_int_eq(key(&o, "colour", "red", err, sizeof err), WEFT_ENOENT);
  ck_assert_int_eq(key(&o, "node", "a localhost", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "HOST:PORT"));
  ck_assert_int_eq(key(&o, "node", "a h:1 slots=5-3", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "from 0 to 16383"));
  ck_assert_int_eq(key(&o, "node", "a h:1 slots=16384", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_int_eq(key(&o, "node", "a h:1 colour=red", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "unknown word 'colour=red'"));
  ck_assert_int_eq(key(&o, "node", "a h:1 id=12", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "40 hex digits"));
  /* A failed line leaves nothing behind: no node, no slot. */
  ck_assert_uint_eq(o.n_nodes, 0);
  ck_assert_uint_eq(o.owner[5], KV_CLUSTER_NO_NODE);
  ck_assert_int_eq(key(&o, "node", "a h:1 slots=0-10", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "node", "b h:2 slots=10-20", err, sizeof err),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "slot 10 is given to node a already"));
  ck_assert_uint_eq(o.owner[11], KV_CLUSTER_NO_NODE);
  ck_assert_int_eq(key(&o, "node", "a h:3", err, sizeof err), WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "repeats the name"));
  ck_assert_int_eq(key(&o, "enabled", "yes", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "myself", "q", err, sizeof err), 0);
  ck_assert_int_eq(kv_cluster_options_check(&o, err, sizeof err), WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "the nodes are: a"));
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "kv_cluster", "core", 30, kv_cluster_crc16_matches_spec_vector,
      kv_cluster_keyslot_matches_redis, kv_cluster_config_reads_nodes_and_slots,
      kv_cluster_config_errors_name_the_valid_form, NULL);
}
