/* SPDX-License-Identifier: Apache-2.0 */
/* The store's side of WATCH (samples/kv/store.h: kv_watch_version): a
 * key's version changes with every change of its value or TTL, and with
 * its deletion, expiry and FLUSHALL (then it is missing), never with a
 * read; a key made again after a deletion has a new version. Also
 * SETRANGE (kv_setrange) and the lock of a few keys (kv_txn_lock_keys),
 * which the commands added with WATCH (issue 31) use. */
#include "harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <weft/error.h>

#include "store.h"

#define MS 1000000ull /* ns */

static _Atomic uint64_t fake_now = 1000 * MS;

static uint64_t fake_clock(void *arg) {
  (void)arg;
  return atomic_load(&fake_now);
}

static kv_store *new_store(void) {
  kv_store_options o;
  kv_store_options_init(&o);
  o.n_stripes = 4; /* few stripes: the keys below share them */
  kv_store *s = NULL;
  ck_assert_int_eq(kv_store_new(&s, &o), 0);
  kv_store_set_clock(s, fake_clock, NULL);
  return s;
}

/* The version of `k` now; `exists` gets whether it exists. */
static uint64_t version(kv_store *s, const char *k, bool *exists) {
  uint64_t v = 12345;
  int rc = kv_watch_version(s, k, strlen(k), &v);
  ck_assert_int_ge(rc, 0);
  *exists = rc == 1;
  if (!*exists)
    ck_assert_uint_eq(v, 0);
  return v;
}

/* Asserts that `change` (a store call on key "k") changed its version or
 * existence, and that a GET did not. */
#define ASSERT_CHANGES(s, change)                                              \
  do {                                                                         \
    bool e0, e1;                                                               \
    uint64_t v0 = version(s, "k", &e0);                                        \
    kv_blob *b_ = NULL;                                                        \
    kv_get(s, "k", 1, &b_);                                                    \
    kv_blob_release(b_);                                                       \
    bool eg;                                                                   \
    ck_assert_uint_eq(version(s, "k", &eg), v0);                               \
    ck_assert(eg == e0);                                                       \
    change;                                                                    \
    uint64_t v1 = version(s, "k", &e1);                                        \
    ck_assert_msg(e0 != e1 || v0 != v1, "%s left k's version", #change);       \
  } while (0)

START_TEST(kv_watch_version_changes_with_every_write) {
  kv_store *s = new_store();
  size_t n;
  int64_t i64;
  kv_blob *b;
  ASSERT_CHANGES(s, kv_set(s, "k", 1, "1", 1, NULL));       /* made */
  ASSERT_CHANGES(s, kv_set(s, "k", 1, "1", 1, NULL));       /* same value */
  ASSERT_CHANGES(s, kv_incr(s, "k", 1, &i64));              /* INCR */
  ASSERT_CHANGES(s, kv_append(s, "k", 1, "x", 1, &n));      /* APPEND */
  ASSERT_CHANGES(s, kv_setrange(s, "k", 1, 0, "y", 1, &n)); /* SETRANGE */
  ASSERT_CHANGES(s, kv_expire(s, "k", 1, 100000, 0));       /* a TTL */
  ASSERT_CHANGES(s, kv_persist(s, "k", 1));                 /* none */
  kv_set(s, "k", 1, "1", 1, NULL);                          /* a number again */
  ASSERT_CHANGES(s, kv_incrbyfloat(s, "k", 1, 1.5L, &b); kv_blob_release(b));
  ASSERT_CHANGES(s, kv_del(s, 1, &(kv_key){"k", 1})); /* deleted */
  ASSERT_CHANGES(s, kv_set(s, "o", 1, "v", 1, NULL);
                 kv_rename(s, "o", 1, "k", 1));    /* renamed to */
  ASSERT_CHANGES(s, kv_rename(s, "k", 1, "o", 1)); /* from */
  ASSERT_CHANGES(s, kv_mset(s, 1, &(kv_key){"k", 1}, &(kv_key){"m", 1}));
  ASSERT_CHANGES(s, kv_flushall(s)); /* flushed */
  ASSERT_CHANGES(s, kv_set(s, "k", 1, "1", 1, &(kv_set_options){.ttl_ms = 10}));
  ASSERT_CHANGES(s, atomic_fetch_add(&fake_now, 20 * MS)); /* expired */
  /* Deleted and made again with the same value: a new version. */
  bool e;
  kv_set(s, "k", 1, "1", 1, NULL);
  uint64_t v = version(s, "k", &e);
  kv_del(s, 1, &(kv_key){"k", 1});
  kv_set(s, "k", 1, "1", 1, NULL);
  ck_assert_uint_ne(version(s, "k", &e), v);
  /* Other keys' writes leave it, even in its stripe. */
  v = version(s, "k", &e);
  for (char c = 'a'; c <= 'z'; c++)
    kv_set(s, &c, 1, "1", 1, NULL); /* 'k' too: the last check is below */
  kv_set(s, "k", 1, "2", 1, NULL);
  v = version(s, "k", &e);
  for (int j = 0; j < 50; j++) {
    char key[8];
    int len = snprintf(key, sizeof key, "x%d", j);
    kv_set(s, key, (size_t)len, "1", 1, NULL);
  }
  ck_assert_uint_eq(version(s, "k", &e), v);
  ck_assert_int_eq(kv_watch_version(s, "k", KV_MAX_KEY_LEN_DEFAULT + 1, &v),
                   WEFT_EMSGSIZE);
  kv_store_free(s);
}
END_TEST

static void assert_value(kv_store *s, const char *k, const void *want,
                         size_t len) {
  kv_blob *b = NULL;
  ck_assert_int_eq(kv_get(s, k, strlen(k), &b), 1);
  ck_assert_uint_eq(b->len, len);
  ck_assert(memcmp(b->data, want, len) == 0);
  kv_blob_release(b);
}

START_TEST(kv_setrange_as_redis) {
  kv_store *s = new_store();
  size_t n;
  ck_assert_int_eq(kv_setrange(s, "a", 1, 0, "", 0, &n), 0); /* nothing */
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(kv_exists(s, 1, &(kv_key){"a", 1}), 0);
  ck_assert_int_eq(kv_setrange(s, "a", 1, 3, "xy", 2, &n), 0); /* padded */
  ck_assert_uint_eq(n, 5);
  assert_value(s, "a", "\0\0\0xy", 5);
  ck_assert_int_eq(kv_expire(s, "a", 1, 5000, 0), 1);
  ck_assert_int_eq(kv_setrange(s, "a", 1, 1, "Q", 1, &n), 0); /* inside */
  ck_assert_uint_eq(n, 5);
  assert_value(s, "a", "\0Q\0xy", 5);
  int64_t ttl;
  ck_assert_int_eq(kv_pttl(s, "a", 1, &ttl), 1);
  ck_assert_int_eq(ttl, 5000); /* kept */
  ck_assert_int_eq(kv_setrange(s, "a", 1, 4, "", 0, &n), 0);
  ck_assert_uint_eq(n, 5);
  ck_assert_int_eq(kv_setrange(s, "a", 1, KV_MAX_VALUE_LEN_DEFAULT, "z", 1, &n),
                   WEFT_EMSGSIZE);
  ck_assert_int_eq(kv_setrange(s, "a", 1, UINT64_MAX - 1, "zz", 2, &n),
                   WEFT_EMSGSIZE);
  assert_value(s, "a", "\0Q\0xy", 5);
  kv_store_free(s);
}
END_TEST

START_TEST(kv_txn_lock_keys_nests_in_a_held_transaction) {
  kv_store *s = new_store();
  kv_key keys[2] = {{"a", 1}, {"b", 1}};
  kv_txn t, inner;
  ck_assert(kv_txn_lock_keys(&t, s, 2, keys));
  kv_set(s, "a", 1, "1", 1, NULL); /* its own lock skipped: no deadlock */
  ck_assert(!kv_txn_lock_keys(&inner, s, 2, keys)); /* held already */
  kv_set(s, "b", 1, "2", 1, NULL);
  kv_txn_unlock(&t);
  ck_assert_int_eq(kv_exists(s, 2, keys), 2);
  kv_store_free(s);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "kv_watch", "core", 60, kv_watch_version_changes_with_every_write,
      kv_setrange_as_redis, kv_txn_lock_keys_nests_in_a_held_transaction, NULL);
}
