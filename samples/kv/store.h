/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/store.h: the storage core of weft's sample key-value service.
 *
 * An in-memory map from binary-safe keys to binary-safe values with the
 * commands the server maps Redis (RESP) and weft RPC requests onto: GET, SET
 * (EX/PX/NX/XX/KEEPTTL, GET), GETDEL, GETEX, DEL, EXISTS, INCR/INCRBY/DECR,
 * INCRBYFLOAT, APPEND, MGET, MSET, RENAME, SCAN, KEYS, DBSIZE, FLUSHALL,
 * PTTL, EXPIRE, PERSIST, plus the counters INFO reports, and transactions
 * (kv_txn: several commands applied atomically). It knows nothing of the
 * network.
 *
 * Concurrency: lock striping. The key space is split into N stripes by the
 * key's hash; each stripe is its own hash table behind its own mutex. Values
 * are reference-counted immutable blobs (kv_blob), so a GET holds the lock
 * only long enough to take a reference and the reply is encoded outside it;
 * a SET allocates its blob before taking the lock and releases the old one
 * after dropping it. samples/kv/README.md says why this beat shard-per-loop
 * with message passing (numbers in docs/benchmarks.md).
 *
 * Thread rules: every function is safe from any thread at any time, except
 * kv_store_free (no other call may run or follow) and, for a store created
 * with `single_thread`, all of them (one thread at a time). Multi-key
 * commands (DEL, EXISTS, MGET, MSET, RENAME, KEYS, DBSIZE, FLUSHALL) are
 * atomic: they lock every stripe they touch, in stripe order, so no reader
 * sees half an MSET. A transaction (kv_txn) extends that to a sequence of
 * commands.
 *
 * Limits: keys are 0 .. max_key_len bytes (default 64 KiB, not Redis' 512
 * MiB: a key is copied into every reply and hashed on every request, and
 * the server's frame limit is sized from it); values 0 .. max_value_len
 * bytes (default 1 MiB). Longer input is refused with WEFT_EMSGSIZE before
 * anything is allocated.
 *
 * Expiry: a key with a TTL is deleted lazily when a command touches it after
 * its deadline, and actively by kv_store_expire_some(), which the server
 * calls from a periodic loop timer (sampling with bounded work, like Redis'
 * activeExpireCycle). Time is weft_now_ns() (CLOCK_MONOTONIC) unless a test
 * injects a clock with kv_store_set_clock().
 *
 * Errors are negative weft codes (weft/error.h); kv_error_message() gives
 * the text a Redis client expects for the ones a command can return.
 */
#ifndef WEFT_SAMPLES_KV_STORE_H
#define WEFT_SAMPLES_KV_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_store kv_store;

/**
 * Marsaglia's xorshift64 (shifts 13, 7, 17; "Xorshift RNGs", 2003): steps
 * `*state` (never 0: a 0 state stays 0) and returns the new value. Fast
 * and not secure; for sampling keys (active expiry, benchmarks). The
 * caller owns the state: one per thread, or under a lock.
 */
static inline uint64_t kv_xorshift64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/**
 * A growable array of `n` items of `elem_size` bytes at `items`, with room
 * for `*cap`: makes room for one more, doubling `*cap` (16 at first) when
 * it is full. Returns the array (moved or not), or NULL when out of memory
 * or past SIZE_MAX bytes (the array and `*cap` are then as they were).
 */
static inline void *kv_array_reserve(void *items, size_t n, size_t *cap,
                                     size_t elem_size) {
  if (n < *cap)
    return items;
  if (*cap > SIZE_MAX / 2 / elem_size)
    return NULL;
  size_t new_cap = *cap ? *cap * 2 : 16;
  void *a = realloc(items, new_cap * elem_size);
  if (a != NULL)
    *cap = new_cap;
  return a;
}

/**
 * An immutable, reference-counted byte string: a value held by the store or
 * handed to a caller. `len` and `data` are read-only once the blob is given
 * to the store (fill `data` between kv_blob_new and kv_set_blob only);
 * `refs` is private. Each holder of a reference releases it once with
 * kv_blob_release(); the memory is freed with the last reference.
 */
typedef struct kv_blob {
  _Atomic uint32_t refs; /* private: reference count */
  size_t len;            /* read-only: bytes in data */
  unsigned char data[];  /* read-only once stored: the bytes */
} kv_blob;

/** A key or value passed by the caller: `len` bytes at `ptr` (borrowed). */
typedef struct kv_key {
  const void *ptr;
  size_t len;
} kv_key;

/** Default and upper limits (bytes, stripes). */
#define KV_MAX_KEY_LEN_DEFAULT (64u * 1024u)
#define KV_MAX_VALUE_LEN_DEFAULT (1024u * 1024u)
#define KV_STRIPES_DEFAULT 64u
#define KV_STRIPES_MAX 1024u

/** Options for kv_store_new(). Initialise with kv_store_options_init(). */
typedef struct kv_store_options {
  unsigned n_stripes;   /* power of two, 1..KV_STRIPES_MAX (default 64) */
  size_t max_key_len;   /* bytes, >= 1 (default 64 KiB) */
  size_t max_value_len; /* bytes (default 1 MiB) */
  bool single_thread;   /* true: no locks at all; the caller guarantees one
                           thread at a time (a shard owned by one loop).
                           Forces n_stripes = 1. Default false. */
} kv_store_options;

/** Fills `opts` with the defaults documented on each field. Any thread. */
void kv_store_options_init(kv_store_options *opts);

/**
 * Creates an empty store. `opts` may be NULL for the defaults. Stores the
 * store in `*out` and returns 0, or WEFT_EINVAL (a bad option) or
 * WEFT_ENOMEM. The caller owns the store and frees it with kv_store_free().
 * Any thread.
 */
int kv_store_new(kv_store **out, const kv_store_options *opts);

/**
 * Frees the store, every key, and the store's reference to every value
 * (blobs still referenced by callers stay valid until they release them),
 * after the lazy-free thread (kv_flushall) has freed what it was given.
 * No other call on the store may run concurrently or follow. NULL is a
 * no-op.
 */
void kv_store_free(kv_store *store);

/** The clock kv_store_set_clock() installs: nanoseconds, monotonic. */
typedef uint64_t (*kv_clock_fn)(void *arg);

/**
 * Test hook: makes the store read time from `fn(arg)` (nanoseconds, must
 * never go backwards) instead of weft_now_ns(); `fn` NULL restores
 * weft_now_ns. Call before the store is shared with other threads; `fn` may
 * be called from any thread that uses the store.
 */
void kv_store_set_clock(kv_store *store, kv_clock_fn fn, void *arg);

/**
 * Allocates a blob for a value of `len` bytes, refusing a length above the
 * store's max_value_len before allocating, so the server can call it as soon
 * as it knows a bulk string's length. The bytes are uninitialised: fill
 * `data`, then pass the blob to kv_set_blob() or release it. Stores the blob
 * (one reference, the caller's) in `*out` and returns 0, or WEFT_EMSGSIZE or
 * WEFT_ENOMEM. Any thread.
 */
int kv_blob_new(const kv_store *store, size_t len, kv_blob **out);

/** Takes one more reference to `blob` and returns it. Any thread. */
kv_blob *kv_blob_retain(kv_blob *blob);

/** Drops one reference; frees the blob with the last. NULL is a no-op. */
void kv_blob_release(kv_blob *blob);

/**
 * GET: looks `key` up. If present (and not expired) stores a new reference
 * to its value in `*out` (the caller releases it) and returns 1; if absent
 * stores NULL and returns 0 (an expired key is deleted now). Counts a hit
 * or a miss. Errors: WEFT_EMSGSIZE (key longer than max_key_len). An empty
 * key is a valid key, as in Redis. Any thread.
 */
int kv_get(kv_store *store, const void *key, size_t klen, kv_blob **out);

/** Keys kv_store_prefetch hints at once; more are ignored. */
#define KV_PREFETCH_MAX 16

/**
 * A hint that `keys` are about to be looked up: loads what a lookup of each
 * will read into the cache, in three rounds over the batch, so that a
 * server hinting a pipelined batch before running it waits for the cache
 * misses of the batch together, not one after another. Round one starts
 * loading each key's bucket (no lock); round two, under the key's stripe
 * lock held for a few loads, starts loading the entry the bucket points
 * to; round three finds the key's entry (now in the cache) and starts
 * loading its value. Each round runs over the whole batch before the next,
 * which is what gives the loads of one round time to arrive (the bucket,
 * the entry and the value were three dependent misses per GET or SET: perf
 * on redis-benchmark -P 16). Changes nothing (an expired key is left for
 * the lookup to delete and count) and never fails. Keys longer than
 * max_key_len are skipped, and only the first KV_PREFETCH_MAX of the
 * others are hinted. Never waits: a stripe whose lock is taken (by another
 * thread, or by a transaction of this one) gets round one only. Any
 * thread.
 */
void kv_store_prefetch(kv_store *store, size_t n, const kv_key *keys);

/** SET condition and TTL flags (kv_set_options.flags). */
enum kv_set_flags {
  KV_SET_NX = 1u << 0,      /* only if the key does not exist */
  KV_SET_XX = 1u << 1,      /* only if the key exists */
  KV_SET_KEEPTTL = 1u << 2, /* keep the key's current TTL (if any) */
  KV_SET_EXPIRED = 1u << 3, /* the deadline has passed already (EXAT or
                               PXAT in the past, which Redis allows): the
                               SET happens (NX/XX are checked, kv_set_get
                               returns the old value) and the key is then
                               deleted at once. With ttl_ms 0. */
};

/** Options of one SET. Zero-initialised = plain SET without TTL. */
typedef struct kv_set_options {
  unsigned flags; /* kv_set_flags, OR-ed */
  int64_t ttl_ms; /* in milliseconds, > 0 = expire after that long (PX;
                     EX n becomes n * 1000, see kv_ttl_ms_from_seconds);
                     0 = no TTL: clears any existing TTL unless KEEPTTL */
} kv_set_options;

/**
 * Converts an EX argument in seconds to kv_set_options.ttl_ms. Returns 0,
 * or WEFT_EINVAL when `seconds` <= 0 or the product overflows (Redis:
 * "invalid expire time"). Any thread.
 */
int kv_ttl_ms_from_seconds(int64_t seconds, int64_t *ttl_ms);

/**
 * SET: stores a copy of `val` (`vlen` bytes) under `key`. `opts` may be NULL
 * (plain SET). Returns 1 if the value was stored, 0 if NX/XX prevented it.
 * Errors: WEFT_EMSGSIZE (key or value above the maximum; nothing is
 * allocated), WEFT_EINVAL (NX with XX, KEEPTTL with a TTL, a negative TTL or
 * one whose deadline overflows: Redis' "syntax error" / "invalid expire
 * time"), WEFT_ENOMEM. On error the store is unchanged. Any thread.
 */
int kv_set(kv_store *store, const void *key, size_t klen, const void *val,
           size_t vlen, const kv_set_options *opts);

/**
 * SET with a value the caller built with kv_blob_new(): like kv_set(), and
 * it always consumes the caller's reference to `blob` (the store keeps it,
 * or releases it when nothing was stored or on error). Any thread.
 */
int kv_set_blob(kv_store *store, const void *key, size_t klen, kv_blob *blob,
                const kv_set_options *opts);

/**
 * SET ... GET (and GETSET): kv_set_blob() that also stores in `*old` a
 * reference to the value the key held before (the caller releases it), or
 * NULL when it had none; the old value is returned whether or not NX/XX let
 * the SET happen (Redis 7's rule). `*old` is NULL on error. Any thread.
 */
int kv_set_get(kv_store *store, const void *key, size_t klen, kv_blob *blob,
               const kv_set_options *opts, kv_blob **old);

/**
 * GETDEL: like kv_get(), and deletes the key when present. Returns 1 with
 * the value in `*out` (the caller releases it) or 0 with NULL; errors as
 * kv_get. Counts a hit or a miss. Any thread.
 */
int kv_getdel(kv_store *store, const void *key, size_t klen, kv_blob **out);

/** What GETEX does to the key's TTL (kv_getex). */
typedef enum kv_getex_mode {
  KV_GETEX_KEEP,    /* nothing (a plain GET) */
  KV_GETEX_SET,     /* a new TTL of ttl_ms (<= 0: delete the key now) */
  KV_GETEX_PERSIST, /* remove the TTL */
} kv_getex_mode;

/**
 * GETEX: like kv_get(), then changes the key's TTL as `mode` says (for
 * KV_GETEX_SET, `ttl_ms` from now; a deadline past the clock's range is
 * clamped to the latest one, about 584 years after the clock's zero).
 * Returns 1 with the value or 0; errors as kv_get, and WEFT_ENOMEM (then
 * nothing changed). Any thread.
 */
int kv_getex(kv_store *store, const void *key, size_t klen, kv_getex_mode mode,
             int64_t ttl_ms, kv_blob **out);

/**
 * APPEND: appends `len` bytes to the value at `key` (a missing key counts as
 * empty), keeping its TTL, and stores the new length in `*new_len`. The new
 * value is built without a lock (the old one is read, the new one built,
 * and installed if the key still holds the old one; else again). Returns 0,
 * WEFT_EMSGSIZE (the result would exceed max_value_len, or the key
 * max_key_len: nothing changed) or WEFT_ENOMEM. Any thread.
 */
int kv_append(kv_store *store, const void *key, size_t klen, const void *data,
              size_t len, size_t *new_len);

/**
 * INCRBYFLOAT: adds `incr` to the value at `key` read as a long double
 * (Redis' string2ld: strtold, no leading space, nothing after the number,
 * not NaN, at most 5119 characters; a missing key counts as 0), keeping
 * its TTL, and stores the sum as Redis writes it ("%.17Lf" without
 * trailing zeros). `*result` gets a reference to the new value (the
 * caller releases it). Errors: WEFT_EINVAL (the value is not such a
 * number: Redis' "value is not a valid float"), WEFT_ERANGE (the sum is
 * NaN or infinite: "increment would produce NaN or Infinity"),
 * WEFT_EMSGSIZE, WEFT_ENOMEM; the value is then unchanged. Any thread.
 */
int kv_incrbyfloat(kv_store *store, const void *key, size_t klen,
                   long double incr, kv_blob **result);

/**
 * Parses `len` bytes as INCRBYFLOAT reads a number (see kv_incrbyfloat):
 * true with the value in `*out`, false when it is not one. Any thread.
 */
bool kv_parse_long_double(const void *text, size_t len, long double *out);

/**
 * RENAME: moves the value and TTL of `src` to `dst`, replacing what `dst`
 * held. Returns 1, or 0 when `src` does not exist (Redis' "no such key");
 * a key renamed to itself is left as it is (1). Errors: WEFT_EMSGSIZE (a
 * key above max_key_len), WEFT_ENOMEM (nothing changed). Atomic. Any
 * thread.
 */
int kv_rename(kv_store *store, const void *src, size_t slen, const void *dst,
              size_t dlen);

/**
 * DEL: deletes the `n` keys (duplicates count once: the second finds the key
 * gone). Returns the number deleted (expired keys count as absent), or
 * WEFT_EMSGSIZE for a key longer than max_key_len (then nothing is deleted)
 * or WEFT_EINVAL when n > INT_MAX. Atomic. Any thread.
 */
int kv_del(kv_store *store, size_t n, const kv_key *keys);

/**
 * EXISTS: the number of the `n` keys that exist (a key given twice counts
 * twice, as in Redis). Errors as kv_del. Atomic. Any thread.
 */
int kv_exists(kv_store *store, size_t n, const kv_key *keys);

/**
 * INCRBY: adds `delta` to the value at `key` read as a signed 64-bit decimal
 * (Redis' rules: optional '-', no '+', no spaces, no leading zeros, at most
 * 20 characters), storing the sum as decimal text and keeping the key's TTL.
 * A missing key counts as 0. Stores the new value in `*result` and returns
 * 0. Errors: WEFT_EINVAL (the value is not such an integer: "value is not an
 * integer or out of range"), WEFT_ERANGE (the sum overflows: "increment or
 * decrement would overflow"), WEFT_EMSGSIZE for a key above the maximum,
 * WEFT_ENOMEM. On error the value is unchanged. Any thread.
 */
int kv_incrby(kv_store *store, const void *key, size_t klen, int64_t delta,
              int64_t *result);

/** INCR: kv_incrby with delta 1. */
int kv_incr(kv_store *store, const void *key, size_t klen, int64_t *result);

/** DECR: kv_incrby with delta -1. */
int kv_decr(kv_store *store, const void *key, size_t klen, int64_t *result);

/**
 * MGET: for each of the `n` keys stores in `out[i]` a new reference to its
 * value (the caller releases each non-NULL entry) or NULL if absent. Returns
 * the number found, or an error as kv_del (then every out[i] is NULL).
 * Counts hits and misses. Atomic (one snapshot). Any thread.
 */
int kv_mget(kv_store *store, size_t n, const kv_key *keys, kv_blob **out);

/**
 * MSET: sets the `n` pairs keys[i] = vals[i] (copies), clearing their TTLs;
 * a later duplicate key wins. Every allocation happens before the locks are
 * taken. Returns 0, or WEFT_EMSGSIZE (a key or value above its maximum),
 * WEFT_EINVAL (n > INT_MAX), WEFT_ENOMEM; on error nothing is set. Atomic. Any
 * thread.
 */
int kv_mset(kv_store *store, size_t n, const kv_key *keys, const kv_key *vals);

/**
 * PTTL: if `key` exists returns 1 and stores its remaining time to live in
 * `*ttl_ms` (milliseconds, rounded up; -1 = no TTL); returns 0 if absent.
 * Errors as kv_get. Any thread.
 */
int kv_pttl(kv_store *store, const void *key, size_t klen, int64_t *ttl_ms);

/**
 * GET and PTTL at one instant: if `key` exists returns 1, stores a new
 * reference to its value in `*out` (the caller releases it) and its
 * remaining time to live in `*ttl_ms` (milliseconds, rounded up, so at
 * least 1 for a live key; -1 = no TTL); returns 0 if absent (`*out` NULL).
 * One lookup, one reading of the clock: a key that expires between a
 * kv_get and a kv_pttl is found by the first and missing for the second,
 * and its TTL would read as none (MIGRATE sent such a key as persistent).
 * Errors as kv_get. Any thread.
 */
int kv_get_pttl(kv_store *store, const void *key, size_t klen, kv_blob **out,
                int64_t *ttl_ms);

/** EXPIRE conditions (kv_expire), Redis 7's NX/XX/GT/LT. */
enum kv_expire_flags {
  KV_EXPIRE_NX = 1u << 0, /* only if the key has no TTL */
  KV_EXPIRE_XX = 1u << 1, /* only if it has one */
  KV_EXPIRE_GT = 1u << 2, /* only if the new deadline is later (a key
                             without a TTL has an infinite one) */
  KV_EXPIRE_LT = 1u << 3, /* only if it is earlier */
};

/**
 * EXPIRE / PEXPIRE: gives `key` a TTL of `ttl_ms` milliseconds from now, if
 * the conditions in `flags` (kv_expire_flags; the caller refuses
 * incompatible ones) hold. `ttl_ms` <= 0 deletes the key, as Redis does for
 * a deadline in the past. A deadline past the clock's range is clamped
 * (see kv_getex). Returns 1 if the TTL was set or the key deleted, 0 if the
 * key does not exist or a condition failed; WEFT_EMSGSIZE, WEFT_ENOMEM.
 * Any thread.
 */
int kv_expire(kv_store *store, const void *key, size_t klen, int64_t ttl_ms,
              unsigned flags);

/**
 * PERSIST: removes `key`'s TTL. Returns 1 if it had one, 0 if it had none
 * or does not exist; WEFT_EMSGSIZE. Any thread.
 */
int kv_persist(kv_store *store, const void *key, size_t klen);

/**
 * The keys one SCAN call returned: `n` keys, each a blob owned by the
 * result. Initialise with {0}; kv_scan_result_clear() releases the keys and
 * the array (reusable after).
 */
typedef struct kv_scan_result {
  size_t n;       /* read-only: number of keys */
  size_t cap;     /* private */
  kv_blob **keys; /* read-only: the keys, n entries */
} kv_scan_result;

/** Releases every key of `res` and its array; leaves it empty. */
void kv_scan_result_clear(kv_scan_result *res);

/** SCAN's bounds (kv_scan): the most keys one call examines (a larger
 *  COUNT is taken as this), the longest MATCH pattern in bytes, and the
 *  copying and matching one call may do before it returns, in units of one
 *  key byte times the pattern's 64-bit state words (ceil((elements + 1) /
 *  64); 1 without a pattern). */
#define KV_SCAN_COUNT_MAX 1000u
#define KV_SCAN_PATTERN_MAX 1024u
#define KV_SCAN_WORK_MAX (1u << 20)

/**
 * SCAN: continues the iteration at `cursor` (0 starts one) and appends to
 * `res` the keys of the next buckets, stopping after a whole bucket once it
 * has about `count` keys (a hint: 0 means 10, above KV_SCAN_COUNT_MAX means
 * KV_SCAN_COUNT_MAX), has visited `count` * 10 buckets, or has done
 * KV_SCAN_WORK_MAX of work, so a call's time is bounded whatever the keys
 * and the pattern. With `pattern` (NULL for none; `plen` bytes, at most
 * KV_SCAN_PATTERN_MAX, Redis glob: * ? [abc] [^a] [a-z] \x) only matching
 * keys are kept; the filtering happens after the stripe lock is dropped,
 * so like Redis a call may return no keys without having finished. Stores
 * the next cursor in `*next`: 0 when the iteration is complete.
 *
 * Guarantee (Redis' reverse-binary cursor over power-of-two tables): a full
 * iteration returns every key that was present from its start to its end
 * at least once, even if tables grow or shrink in between; a key may be
 * returned more than once; keys added or removed during the iteration may or
 * may not appear. Expired keys are not returned. Any cursor value is
 * accepted. Returns 0, WEFT_EMSGSIZE (pattern too long: nothing done,
 * `*next` = `cursor`) or WEFT_ENOMEM (the keys appended so far stay in
 * `res`; retry with the same cursor). Any thread; one stripe lock at a
 * time.
 */
int kv_scan(kv_store *store, uint64_t cursor, size_t count, const void *pattern,
            size_t plen, kv_scan_result *res, uint64_t *next);

/** KEYS' bound on the keys it examines (kv_keys). */
#define KV_KEYS_MAX 100000u

/**
 * KEYS: appends to `res` every live key matching `pattern` (Redis glob,
 * `plen` bytes, at most KV_SCAN_PATTERN_MAX; NULL = every key). The
 * stripes are walked in order, one locked at a time while its keys are
 * copied (they are matched after its unlock), so another thread waits for
 * one stripe's walk at most: each key is seen at most once, but a change
 * made on another thread meanwhile may be seen in part (a RENAME across
 * stripes: both names or neither). Under a transaction that holds every
 * stripe (EXEC) no lock is taken and the answer is one snapshot. Bounded
 * like SCAN: the copying and matching may do at most KV_SCAN_WORK_MAX of
 * work (SCAN's units) over at most KV_KEYS_MAX keys; past either it stops
 * and returns WEFT_ETOOLONG, having added nothing to `res` (use SCAN on
 * such a store). Returns 0,
 * WEFT_EMSGSIZE (the pattern is too long), WEFT_ETOOLONG or WEFT_ENOMEM
 * (nothing added). Clear `res` with kv_scan_result_clear() either way.
 * Any thread.
 */
int kv_keys(kv_store *store, const void *pattern, size_t plen,
            kv_scan_result *res);

/**
 * KEYS in steps, for a caller that must not hold its thread for a whole
 * walk (the server's KEYS yields its loop between steps): kv_keys_begin,
 * then kv_keys_step until it returns 0 or an error, then kv_keys_end.
 * Same answer, bounds and locking as kv_keys, whose steps these are; a
 * change made between two steps is seen or not, as one made on another
 * thread during kv_keys. Fields are private. One thread at a time.
 */
typedef struct kv_keys_iter {
  struct glob_nfa *pattern; /* compiled; NULL when it matches every key */
  size_t stripe;            /* the next stripe to walk */
  size_t from;              /* res->n when it began */
  size_t work, seen;        /* SCAN's units, keys examined: the bounds */
} kv_keys_iter;

/** Starts a KEYS over `pattern` (as kv_keys) whose keys go to `res`.
 *  Returns 0, WEFT_EMSGSIZE or WEFT_ENOMEM (nothing to end then). */
int kv_keys_begin(kv_keys_iter *it, const void *pattern, size_t plen,
                  const kv_scan_result *res);

/** Walks whole stripes, one locked at a time, until about `keys` more keys
 *  were examined (at least one stripe) or the store is done; appends the
 *  matches to `res`. Returns 1 while stripes are left, 0 when done, or
 *  WEFT_ETOOLONG / WEFT_ENOMEM (every key of this KEYS removed from `res`
 *  again; no more steps). */
int kv_keys_step(kv_store *store, kv_keys_iter *it, size_t keys,
                 kv_scan_result *res);

/** Frees what kv_keys_begin took (not `res`). */
void kv_keys_end(kv_keys_iter *it);

/**
 * True if `str` matches the Redis glob `pattern` (* ? [...] and \ escapes;
 * binary safe). Never backtracks: the pattern becomes an automaton run
 * bit-parallel, (slen + 1) x ceil((elements + 1) / 64) word steps at most
 * (elements: the pattern's bytes, less escapes, classes and repeated
 * stars). False also when out of memory (the automaton takes 2 KiB per 64
 * elements). Any thread.
 */
bool kv_glob_match(const void *pattern, size_t plen, const void *str,
                   size_t slen);

/**
 * DBSIZE: the number of keys, including keys whose TTL has passed but that
 * no command or expiry cycle has deleted yet (as Redis). Takes every
 * stripe's lock, so it is exact and never sees half a transaction. Any
 * thread.
 */
uint64_t kv_dbsize(kv_store *store);

/**
 * FLUSHALL: deletes every key atomically. The entries are freed (and the
 * store's value references released) after the locks are dropped: by the
 * caller for a few thousand keys, else by the store's lazy-free thread
 * (one per store, started by the first such flush and joined by
 * kv_store_free, as Redis' FLUSHALL ASYNC), so the call takes about the
 * same time whatever the store holds. Counters other than keys and memory
 * stay. Returns 0 or WEFT_ENOMEM (the store is unchanged then). Any
 * thread.
 */
int kv_flushall(kv_store *store);

/**
 * Active expiry: examines at most `budget` keys that have a TTL, sampled at
 * random, stripe after stripe (continuing where the last call stopped), and
 * deletes the expired ones. A stripe is sampled again while more than a
 * quarter of its sample was expired (Redis' activeExpireCycle heuristic).
 * Returns the number of keys deleted. Meant for a periodic loop timer: the
 * work per call is bounded by `budget`. Any thread.
 */
size_t kv_store_expire_some(kv_store *store, size_t budget);

/** Counters for INFO. Each is exact; the set is not one snapshot. */
typedef struct kv_store_stats {
  uint64_t keys;         /* keys stored (as kv_dbsize) */
  uint64_t expires;      /* keys with a TTL */
  uint64_t expired_keys; /* keys deleted because their TTL passed */
  uint64_t mem_bytes;    /* bytes of keys plus values stored (payload only) */
  uint64_t hits;         /* GET/MGET lookups that found the key */
  uint64_t misses;       /* GET/MGET lookups that did not */
} kv_store_stats;

/** Sums the stripes' counters into `*out`. Any thread, takes no lock. */
void kv_store_stats_get(kv_store *store, kv_store_stats *out);

/**
 * A transaction: commands run one after the other with the stripes of all
 * of their keys locked, so no other thread sees any of them before all are
 * applied (Redis' MULTI/EXEC). Collect the keys, lock, run the commands on
 * this thread, unlock:
 *
 *   kv_txn t;
 *   kv_txn_init(&t, store);
 *   kv_txn_add_key(&t, "a", 1);      // every key a command will touch
 *   kv_txn_add_all(&t);              // or every stripe (FLUSHALL, KEYS)
 *   kv_txn_lock(&t);
 *   kv_set(store, "a", 1, "1", 1, NULL);   // any store calls
 *   kv_txn_unlock(&t);
 *
 * Between lock and unlock the calling thread's store calls skip the locks
 * the transaction holds; touching a stripe it does not hold is a bug
 * (asserted in debug builds: it could deadlock). One transaction per
 * thread at a time; the fields are private.
 */
typedef struct kv_txn {
  kv_store *store;
  uint64_t bits[KV_STRIPES_MAX / 64]; /* stripes to lock */
  bool locked;
} kv_txn;

/** Starts collecting a transaction's keys on `store`. */
void kv_txn_init(kv_txn *t, kv_store *store);

/** Adds the stripe of `key`; a key above max_key_len is ignored (every
 *  command refuses it before locking anything). */
void kv_txn_add_key(kv_txn *t, const void *key, size_t klen);

/** Adds every stripe: for commands that walk the whole store (FLUSHALL,
 *  KEYS, SCAN, DBSIZE, the server's CLUSTER COUNTKEYSINSLOT,
 *  GETKEYSINSLOT and SETSLOT NODE); a walk holding only some stripes
 *  would lock the others while holding those, out of index order. */
void kv_txn_add_all(kv_txn *t);

/** Locks the collected stripes in index order, for this thread. */
void kv_txn_lock(kv_txn *t);

/** Unlocks them. */
void kv_txn_unlock(kv_txn *t);

/**
 * Holds every stripe of `store` for this thread, for a check and a change
 * that must be one step against every command (CLUSTER SETSLOT NODE: no
 * key of the slot left, then the new owner). When this thread runs a
 * transaction on `store` already (EXEC), that one must hold every stripe
 * (the command that calls this is queued as a whole-store one): returns
 * false and locks nothing. Otherwise initialises `t` with every stripe,
 * locks it (kv_txn_lock) and returns true: the caller unlocks it with
 * kv_txn_unlock. Blocks every other command of the store meanwhile.
 */
bool kv_txn_lock_all(kv_txn *t, kv_store *store);

/**
 * WATCH's view of `key`: 1 with its version in `*version` when it exists
 * (not expired), 0 with `*version` 0 when it does not. The version
 * changes with every change of the key's value or TTL (it is the key's
 * stripe's change count at the last one, so a key deleted and set again
 * has a new one); deletion, expiry and FLUSHALL show as the key missing.
 * EXEC compares both with the transaction's stripes locked: the key
 * changed since WATCH when either differs. A key missing at WATCH and at
 * EXEC counts as unchanged even if it existed in between (Redis fails such
 * an EXEC; the transaction's reads are as valid either way). An expired
 * key is deleted on the way, as by any command. Errors: WEFT_EMSGSIZE (a
 * key above max_key_len). Any thread.
 */
int kv_watch_version(kv_store *store, const void *key, size_t klen,
                     uint64_t *version);

/**
 * Holds the stripes of `n` keys for this thread, so a check and a change
 * on them are one step against every command (MSETNX, RENAMENX, COPY).
 * When this thread runs a transaction on `store` already (EXEC, or the
 * cluster gate's), that one holds them (the caller's keys are its
 * command's): returns false and locks nothing. Otherwise initialises `t`
 * with the keys' stripes, locks it and returns true: the caller unlocks
 * it with kv_txn_unlock.
 */
bool kv_txn_lock_keys(kv_txn *t, kv_store *store, size_t n, const kv_key *keys);

/**
 * SETRANGE: overwrites the value at `key` from byte `offset` with `len`
 * bytes of `data`, padding with zero bytes when the value is shorter (a
 * missing key counts as empty), keeping its TTL, and stores the new length
 * in `*new_len`. With `len` 0 nothing changes (`*new_len` is the current
 * length; a missing key is not made). Optimistic like kv_append. Errors:
 * WEFT_EMSGSIZE (offset + len above max_value_len, or the key above
 * max_key_len: nothing changed), WEFT_ENOMEM. Any thread.
 */
int kv_setrange(kv_store *store, const void *key, size_t klen, uint64_t offset,
                const void *data, size_t len, size_t *new_len);

/**
 * SETBIT: sets bit `offset` of the value at `key` (bit 0 is the most
 * significant bit of the first byte, as Redis) to `on`, growing the value
 * with zero bytes when shorter (a missing key counts as empty), keeping
 * its TTL; `*old` gets the bit before. Optimistic like kv_append. Errors:
 * WEFT_EMSGSIZE (the byte of `offset` is at or past max_value_len, or the
 * key above max_key_len: nothing changed), WEFT_ENOMEM. Any thread.
 */
int kv_setbit(kv_store *store, const void *key, size_t klen, uint64_t offset,
              bool on, bool *old);

/**
 * The Redis error text (without the "ERR " prefix) for an error a command
 * returned: WEFT_EINVAL -> "value is not an integer or out of range" (the
 * only EINVAL a well-formed command gets; the server rejects bad SET flags
 * while parsing, with "syntax error"), WEFT_ERANGE -> "increment or
 * decrement would overflow", WEFT_EMSGSIZE -> "string exceeds maximum
 * allowed size"; other codes give weft_strerror(). Static string. Any
 * thread.
 */
const char *kv_error_message(int err);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_SAMPLES_KV_STORE_H */
