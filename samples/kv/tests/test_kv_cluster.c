/* SPDX-License-Identifier: Apache-2.0 */
/* The KV service's Redis Cluster pieces that need no network: CRC16 and
 * key slots against the Redis Cluster specification's values and Redis'
 * own answers, and the [cluster] config lines with their error texts. */
#include "harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/error.h>

#include "cluster.h"
#include "cluster_slot.h"
#include "kv_config.h"

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

/* How many entries of `list` ("section.key=...") name section.key. */
static int listed(const char *const *list, const char *section,
                  const char *key) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s.%s=", section, key);
  int n = 0;
  for (size_t i = 0; list[i] != NULL; i++)
    n += strncmp(list[i], prefix, strlen(prefix)) == 0;
  return n;
}

/* Every [kv] key is read by the server, its clients or both: a new key
 * must be sorted into kv_server_unread or kv_client_unread, or --help and
 * -o would offer a client the server's key (or the reverse). */
START_TEST(kv_config_every_kv_key_has_its_readers) {
  /* the CA both check with; the client certificate, which the server
   * presents as MIGRATE's client */
  static const char *const both[] = {"tls_ca_cert_file", "tls_ca_cert_dir",
                                     "tls_client_cert_file",
                                     "tls_client_key_file", NULL};
  for (const weft_config_key *k = kv_config_keys; k->section != NULL; k++) {
    if (strcmp(k->section, "kv") != 0)
      continue;
    int shared = 0;
    for (size_t i = 0; both[i] != NULL; i++)
      shared += strcmp(both[i], k->name) == 0;
    int n = listed(kv_client_unread, "kv", k->name) +
            listed(kv_server_unread, "kv", k->name);
    ck_assert_msg(n + shared == 1,
                  "[kv] %s: in %d unread lists (shared: %d); put it in "
                  "kv_server_unread or kv_client_unread (kv_config.c)",
                  k->name, n, shared);
  }
  /* and every entry of the lists names a key that exists */
  const char *const *lists[] = {kv_client_unread, kv_server_unread};
  for (size_t l = 0; l < 2; l++)
    for (size_t i = 0; lists[l][i] != NULL; i++) {
      if (strncmp(lists[l][i], "kv.", 3) != 0)
        continue;
      bool found = false;
      for (const weft_config_key *k = kv_config_keys; k->section != NULL; k++)
        found |= strcmp(k->section, "kv") == 0 &&
                 listed(&lists[l][i], "kv", k->name) == 1;
      ck_assert_msg(found, "%s names no [kv] key", lists[l][i]);
    }
}
END_TEST

START_TEST(kv_cluster_config_file_default_beside_ini) {
  kv_cluster_options o;
  kv_cluster_options_init(&o);
  ck_assert_int_eq(kv_cluster_default_config_file(&o, "/etc/weft/node1.ini"),
                   0);
  ck_assert_str_eq(o.config_file, "/etc/weft/node1.nodes.conf");
  kv_cluster_options_init(&o);
  ck_assert_int_eq(kv_cluster_default_config_file(&o, "dir.d/kv"), 0);
  ck_assert_str_eq(o.config_file, "dir.d/kv.nodes.conf");
  kv_cluster_options_init(&o);
  ck_assert_int_eq(kv_cluster_default_config_file(&o, NULL), 0);
  ck_assert_str_eq(o.config_file, "");
  char err[64];
  ck_assert_int_eq(
      kv_cluster_config_key(&o, "config_file", "/x/a.conf", err, sizeof err),
      0);
  ck_assert_int_eq(kv_cluster_default_config_file(&o, "b.ini"), 0);
  ck_assert_str_eq(o.config_file, "/x/a.conf"); /* set: kept */
}
END_TEST

/* Nodes a (slots 0-99) and b (100-199), this node `me`, state in `path`. */
static kv_cluster *two_nodes(const char *me, const char *path,
                             const char *a_slots) {
  kv_cluster_options o;
  kv_cluster_options_init(&o);
  char err[512], line[128];
  ck_assert_int_eq(key(&o, "enabled", "yes", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "myself", me, err, sizeof err), 0);
  snprintf(line, sizeof line, "a 127.0.0.1:7001 slots=%s", a_slots);
  ck_assert_int_eq(key(&o, "node", line, err, sizeof err), 0);
  ck_assert_int_eq(
      key(&o, "node", "b 127.0.0.1:7002 slots=100-199", err, sizeof err), 0);
  ck_assert_int_eq(key(&o, "config_file", path, err, sizeof err), 0);
  kv_cluster *c;
  ck_assert_int_eq(kv_cluster_new(&c, &o), 0);
  return c;
}

/* What a SETSLOT NODE changed comes back from the state file; a claim no
 * SETSLOT made (an epoch of the lines) yields to an edited line. */
START_TEST(kv_cluster_state_file_round_trip_and_epochs) {
  char path[] = "/tmp/weft-kv-state-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char err[KV_CLUSTER_PATH_MAX + 256];
  kv_cluster *c = two_nodes("a", path, "0-99");
  /* SETSLOT 5 NODE b, as cluster_cmd.c does it. */
  atomic_store(&c->owner[5], 1);
  atomic_store(&c->node_epoch[1], atomic_fetch_add(&c->epoch, 1) + 1);
  atomic_store(&c->migrating[7], 1);
  ck_assert_int_eq(kv_cluster_state_save(c, err, sizeof err), 0);
  kv_cluster_free(c);

  /* The restart: slot 5 is b's (epoch 3 > the lines' 2), 7 still
   * migrating, the epochs as saved. */
  c = two_nodes("a", path, "0-99");
  ck_assert_int_eq(kv_cluster_state_load(c, err, sizeof err), 0);
  ck_assert_uint_eq(atomic_load(&c->owner[5]), 1);
  ck_assert_uint_eq(atomic_load(&c->owner[6]), 0);
  ck_assert_uint_eq(atomic_load(&c->migrating[7]), 1);
  ck_assert_uint_eq(atomic_load(&c->epoch), 3);
  ck_assert_uint_eq(atomic_load(&c->node_epoch[1]), 3);
  ck_assert_uint_eq(atomic_load(&c->node_epoch[0]), 1);
  kv_cluster_free(c);

  /* a's line edited to end at 98: the file's claim of 99 for a has a's
   * epoch 1, one of the lines' own, so the edited line wins and 99 has no
   * owner; slot 5 stays b's (a SETSLOT's claim). */
  c = two_nodes("a", path, "0-98");
  ck_assert_int_eq(kv_cluster_state_load(c, err, sizeof err), 0);
  ck_assert_uint_eq(atomic_load(&c->owner[99]), KV_CLUSTER_NO_NODE);
  ck_assert_uint_eq(atomic_load(&c->owner[5]), 1);
  ck_assert_uint_eq(atomic_load(&c->migrating[7]), 1);
  kv_cluster_free(c);

  /* a's line edited to give slot 7 to nobody: its MIGRATING mark goes
   * (a node migrates only a slot it owns). */
  c = two_nodes("a", path, "0-6,8-99");
  ck_assert_int_eq(kv_cluster_state_load(c, err, sizeof err), 0);
  ck_assert_uint_eq(atomic_load(&c->migrating[7]), KV_CLUSTER_NO_NODE);
  kv_cluster_free(c);

  /* Node b reading a's file: refused, naming the file and line. */
  c = two_nodes("b", path, "0-99");
  ck_assert_int_eq(kv_cluster_state_load(c, err, sizeof err), WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, ":2: not node b's state file"));
  kv_cluster_free(c);
  unlink(path);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "kv_cluster", "core", 30, kv_cluster_crc16_matches_spec_vector,
      kv_cluster_keyslot_matches_redis, kv_cluster_config_reads_nodes_and_slots,
      kv_cluster_config_errors_name_the_valid_form,
      kv_config_every_kv_key_has_its_readers,
      kv_cluster_config_file_default_beside_ini,
      kv_cluster_state_file_round_trip_and_epochs, NULL);
}
