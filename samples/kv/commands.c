/* samples/kv/commands.c: the store's per-key commands (store.h): GET, SET,
 * INCRBY, DEL, EXISTS, MGET, MSET, SCAN with Redis' glob matching, and the
 * Redis error texts. Each hashes its keys, takes the stripe locks it needs,
 * works on the tables through table.c and expiry.c, and frees after the
 * unlock (the rule in store_internal.h). Not to be confused with command.c,
 * which checks a protocol request's arguments and then calls these.
 */
#include "store_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

#define SCAN_COUNT_DEFAULT 10u
#define I64_TEXT_MAX 20u /* "-9223372036854775808" */

/* ------------------------------------------------------------------------ */
/* GET, SET                                                                  */

int kv_get(kv_store *s, const void *key, size_t klen, kv_blob **out) {
  *out = NULL;
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  uint64_t h = kv__key_hash(s, key, klen);
  kv_stripe *st = kv__stripe_of(s, h);
  garbage g = {NULL};
  kv__stripe_lock(s, st);
  kv_entry *e = kv__lookup_live(s, st, h, key, klen, &g);
  if (e) {
    *out = kv_blob_retain(e->val);
    kv__counter_add(&st->hits, 1);
  } else {
    kv__counter_add(&st->misses, 1);
  }
  kv__stripe_unlock(s, st);
  kv__garbage_free(&g);
  return e != NULL;
}

/* The state one SET carries through the lock. */
typedef struct set_op {
  uint64_t hash;
  const void *key;
  size_t klen;
  kv_blob *blob;   /* in: the new value; out: what to release (old or own) */
  kv_entry *spare; /* preallocated entry for a new key, or NULL */
  unsigned flags;
  uint64_t at; /* deadline in ns, 0 = none */
} set_op;

/* SET under the stripe lock. Returns 1 stored / 0 not / error; on return
 * op->blob is the blob to release after the unlock (the old value, or the
 * unused new one, or NULL when a new entry took it). */
static int set_locked(kv_store *s, kv_stripe *st, set_op *op, garbage *g) {
  kv_entry *e = kv__lookup_live(s, st, op->hash, op->key, op->klen, g);
  if (((op->flags & KV_SET_NX) && e) || ((op->flags & KV_SET_XX) && !e))
    return 0;
  bool new_ttl = op->at != 0 && (e == NULL || e->exp_idx == NO_EXPIRE_IDX);
  if (new_ttl && kv__expires_reserve(st) != 0)
    return WEFT_ENOMEM;
  if (e == NULL) {
    e = op->spare ? op->spare : kv__entry_new(op->hash, op->key, op->klen);
    if (e == NULL)
      return WEFT_ENOMEM;
    op->spare = NULL;
    kv__entry_link(st, e, op->blob);
    op->blob = NULL;
  } else {
    kv_blob *old = e->val;
    e->val = op->blob;
    kv__counter_add(&st->mem, op->blob->len);
    kv__counter_sub(&st->mem, old->len);
    op->blob = old;
  }
  if (op->at != 0)
    kv__expire_set(st, e, op->at);
  else if (!(op->flags & KV_SET_KEEPTTL))
    kv__expire_clear(st, e);
  return 1;
}

int kv_set_blob(kv_store *s, const void *key, size_t klen, kv_blob *blob,
                const kv_set_options *opts) {
  set_op op = {.key = key, .klen = klen, .blob = blob};
  int ret;
  if (klen > s->max_key_len || blob->len > s->max_value_len) {
    ret = WEFT_EMSGSIZE;
    goto out;
  }
  ret = kv__set_deadline(s, opts, &op.at);
  if (ret != 0)
    goto out;
  op.flags = opts ? opts->flags : 0;
  op.hash = kv__key_hash(s, key, klen);
  kv_stripe *st = kv__stripe_of(s, op.hash);
  garbage g = {NULL};
  kv__stripe_lock(s, st);
  ret = set_locked(s, st, &op, &g);
  kv__stripe_unlock(s, st);
  kv__garbage_free(&g);
out:
  kv_blob_release(op.blob);
  return ret;
}

int kv_set(kv_store *s, const void *key, size_t klen, const void *val,
           size_t vlen, const kv_set_options *opts) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  kv_blob *b;
  int err = kv_blob_new(s, vlen, &b); /* refuses oversize before malloc */
  if (err != 0)
    return err;
  if (vlen)
    memcpy(b->data, val, vlen);
  return kv_set_blob(s, key, klen, b, opts);
}

/* ------------------------------------------------------------------------ */
/* INCRBY                                                                    */

/* Redis' string2ll: optional '-', then digits without a leading zero (a
 * lone "0" aside), nothing else, at most 20 characters, within int64. */
static bool parse_i64(const unsigned char *p, size_t n, int64_t *out) {
  if (n == 0 || n > I64_TEXT_MAX)
    return false;
  if (n == 1 && p[0] == '0') {
    *out = 0;
    return true;
  }
  bool neg = p[0] == '-';
  size_t i = neg ? 1 : 0;
  if (i >= n || p[i] < '1' || p[i] > '9')
    return false;
  uint64_t v = 0;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return false;
    uint64_t d = (uint64_t)(p[i] - '0');
    if (v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
  }
  if (neg) {
    if (v > (uint64_t)INT64_MAX + 1)
      return false;
    *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  } else {
    if (v > (uint64_t)INT64_MAX)
      return false;
    *out = (int64_t)v;
  }
  return true;
}

/* The arithmetic under the lock: reads the old value from `e` (NULL = 0),
 * writes the sum into `nb`. */
static int incr_compute(const kv_entry *e, int64_t delta, kv_blob *nb,
                        int64_t *result) {
  int64_t old = 0;
  if (e && !parse_i64(e->val->data, e->val->len, &old))
    return WEFT_EINVAL;
  if (__builtin_add_overflow(old, delta, result))
    return WEFT_ERANGE;
  char text[I64_TEXT_MAX + 1];
  int n = snprintf(text, sizeof(text), "%lld", (long long)*result);
  memcpy(nb->data, text, (size_t)n);
  nb->len = (size_t)n;
  return 0;
}

int kv_incrby(kv_store *s, const void *key, size_t klen, int64_t delta,
              int64_t *result) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  /* The result is at most 20 characters: allocate before locking. */
  kv_blob *nb = kv__blob_alloc(I64_TEXT_MAX);
  if (nb == NULL)
    return WEFT_ENOMEM;
  uint64_t h = kv__key_hash(s, key, klen);
  kv_stripe *st = kv__stripe_of(s, h);
  garbage g = {NULL};
  int64_t sum = 0;
  kv__stripe_lock(s, st);
  kv_entry *e = kv__lookup_live(s, st, h, key, klen, &g);
  int err = incr_compute(e, delta, nb, &sum);
  if (err == 0 && e) {
    kv_blob *old = e->val;
    e->val = nb;
    kv__counter_add(&st->mem, nb->len);
    kv__counter_sub(&st->mem, old->len);
    nb = old; /* TTL kept, as Redis' INCR */
  } else if (err == 0) {
    kv_entry *ne = kv__entry_new(h, key, klen);
    if (ne) {
      kv__entry_link(st, ne, nb);
      nb = NULL;
    } else {
      err = WEFT_ENOMEM;
    }
  }
  kv__stripe_unlock(s, st);
  kv__garbage_free(&g);
  kv_blob_release(nb);
  if (err == 0)
    *result = sum;
  return err;
}

int kv_incr(kv_store *s, const void *key, size_t klen, int64_t *result) {
  return kv_incrby(s, key, klen, 1, result);
}

int kv_decr(kv_store *s, const void *key, size_t klen, int64_t *result) {
  return kv_incrby(s, key, klen, -1, result);
}

/* ------------------------------------------------------------------------ */
/* Multi-key commands: lock every stripe involved, in index order            */

typedef struct lock_set {
  uint64_t bits[KV_STRIPES_MAX / 64];
} lock_set;

static void lock_set_lock(kv_store *s, const lock_set *ls) {
  for (unsigned w = 0; w < (s->n_stripes + 63) / 64; w++)
    for (uint64_t m = ls->bits[w]; m; m &= m - 1)
      kv__stripe_lock(s, &s->stripes[w * 64 + (unsigned)__builtin_ctzll(m)]);
}

static void lock_set_unlock(kv_store *s, const lock_set *ls) {
  for (unsigned w = 0; w < (s->n_stripes + 63) / 64; w++)
    for (uint64_t m = ls->bits[w]; m; m &= m - 1)
      kv__stripe_unlock(s, &s->stripes[w * 64 + (unsigned)__builtin_ctzll(m)]);
}

/* Validates `n` keys and hashes them into `hashes`; fills `ls`. */
static int keys_prepare(kv_store *s, size_t n, const kv_key *keys,
                        uint64_t *hashes, lock_set *ls) {
  if (n > INT_MAX)
    return WEFT_EINVAL;
  memset(ls, 0, sizeof(*ls));
  for (size_t i = 0; i < n; i++) {
    if (keys[i].len > s->max_key_len)
      return WEFT_EMSGSIZE;
    hashes[i] = kv__key_hash(s, keys[i].ptr, keys[i].len);
    size_t si = kv__stripe_index(s, hashes[i]);
    ls->bits[si / 64] |= 1ull << (si % 64);
  }
  return 0;
}

/* Hashes on the stack for the usual few keys, on the heap for many. */
#define HASHES_ON_STACK 32
static uint64_t *hashes_alloc(size_t n, uint64_t *stack) {
  if (n <= HASHES_ON_STACK)
    return stack;
  return malloc(n * sizeof(uint64_t));
}
static void hashes_free(uint64_t *h, uint64_t *stack) {
  if (h != stack)
    free(h);
}

enum multi_op { MULTI_DEL, MULTI_EXISTS, MULTI_GET };

static int multi_key(kv_store *s, size_t n, const kv_key *keys,
                     enum multi_op op, kv_blob **out) {
  uint64_t stack[HASHES_ON_STACK];
  uint64_t *hashes = hashes_alloc(n, stack);
  if (hashes == NULL)
    return WEFT_ENOMEM;
  lock_set ls;
  int ret = keys_prepare(s, n, keys, hashes, &ls);
  if (ret != 0)
    goto out;
  garbage g = {NULL};
  lock_set_lock(s, &ls);
  for (size_t i = 0; i < n; i++) {
    kv_stripe *st = kv__stripe_of(s, hashes[i]);
    kv_entry *e =
        kv__lookup_live(s, st, hashes[i], keys[i].ptr, keys[i].len, &g);
    if (op == MULTI_GET) {
      out[i] = e ? kv_blob_retain(e->val) : NULL;
      kv__counter_add(e ? &st->hits : &st->misses, 1);
    } else if (e && op == MULTI_DEL) {
      kv__entry_unlink(st, kv__table_link_of(&st->table, e), &g);
      kv__table_maybe_resize(&st->table);
    }
    ret += e != NULL;
  }
  lock_set_unlock(s, &ls);
  kv__garbage_free(&g);
out:
  hashes_free(hashes, stack);
  return ret;
}

int kv_del(kv_store *s, size_t n, const kv_key *keys) {
  return multi_key(s, n, keys, MULTI_DEL, NULL);
}

int kv_exists(kv_store *s, size_t n, const kv_key *keys) {
  return multi_key(s, n, keys, MULTI_EXISTS, NULL);
}

int kv_mget(kv_store *s, size_t n, const kv_key *keys, kv_blob **out) {
  for (size_t i = 0; i < n; i++)
    out[i] = NULL;
  return multi_key(s, n, keys, MULTI_GET, out);
}

/* MSET's allocations, all made before locking. */
typedef struct mset_prep {
  uint64_t *hashes;
  kv_blob **blobs;
  kv_entry **spares;
} mset_prep;

static void mset_prep_free(mset_prep *p, size_t n) {
  for (size_t i = 0; p->blobs && i < n; i++)
    kv_blob_release(p->blobs[i]);
  for (size_t i = 0; p->spares && i < n; i++)
    free(p->spares[i]);
  free(p->hashes);
  free(p->blobs);
  free(p->spares);
}

static int mset_prepare(kv_store *s, size_t n, const kv_key *keys,
                        const kv_key *vals, mset_prep *p, lock_set *ls) {
  for (size_t i = 0; i < n; i++)
    if (vals[i].len > s->max_value_len || keys[i].len > s->max_key_len)
      return WEFT_EMSGSIZE;
  p->hashes = malloc(n * sizeof(*p->hashes) + 1);
  p->blobs = calloc(n + 1, sizeof(*p->blobs));
  p->spares = calloc(n + 1, sizeof(*p->spares));
  if (!p->hashes || !p->blobs || !p->spares)
    return WEFT_ENOMEM;
  int err = keys_prepare(s, n, keys, p->hashes, ls);
  if (err != 0)
    return err;
  for (size_t i = 0; i < n; i++) {
    p->blobs[i] = kv__blob_alloc(vals[i].len);
    p->spares[i] = kv__entry_new(p->hashes[i], keys[i].ptr, keys[i].len);
    if (!p->blobs[i] || !p->spares[i])
      return WEFT_ENOMEM;
    if (vals[i].len)
      memcpy(p->blobs[i]->data, vals[i].ptr, vals[i].len);
  }
  return 0;
}

int kv_mset(kv_store *s, size_t n, const kv_key *keys, const kv_key *vals) {
  mset_prep p = {NULL, NULL, NULL};
  lock_set ls;
  int err = mset_prepare(s, n, keys, vals, &p, &ls);
  if (err != 0)
    goto out;
  garbage g = {NULL};
  lock_set_lock(s, &ls);
  for (size_t i = 0; i < n; i++) {
    set_op op = {.hash = p.hashes[i],
                 .key = keys[i].ptr,
                 .klen = keys[i].len,
                 .blob = p.blobs[i],
                 .spare = p.spares[i]};
    /* Cannot fail: the entry is preallocated and no TTL is set. */
    set_locked(s, kv__stripe_of(s, op.hash), &op, &g);
    p.blobs[i] = op.blob; /* the old value, released below */
    p.spares[i] = op.spare;
  }
  lock_set_unlock(s, &ls);
  kv__garbage_free(&g);
out:
  mset_prep_free(&p, n);
  return err;
}

/* ------------------------------------------------------------------------ */
/* SCAN                                                                      */

static uint64_t rev64(uint64_t v) {
  v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
  v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
  v = ((v >> 4) & 0x0F0F0F0F0F0F0F0Full) | ((v & 0x0F0F0F0F0F0F0F0Full) << 4);
  return __builtin_bswap64(v);
}

/* Redis' dictScan cursor step: increment the reversed cursor, so the
 * buckets a grown or shrunk table splits or merges are visited together
 * and none is skipped. */
static uint64_t cursor_next(uint64_t c, uint64_t mask) {
  c |= ~mask;
  c = rev64(c);
  c++;
  return rev64(c);
}

void kv_scan_result_clear(kv_scan_result *res) {
  for (size_t i = 0; i < res->n; i++)
    kv_blob_release(res->keys[i]);
  free(res->keys);
  res->keys = NULL;
  res->n = res->cap = 0;
}

static int result_push(kv_scan_result *res, const kv_entry *e) {
  if (res->n == res->cap) {
    size_t cap = res->cap ? res->cap * 2 : 16;
    kv_blob **k = realloc(res->keys, cap * sizeof(*k));
    if (k == NULL)
      return WEFT_ENOMEM;
    res->keys = k;
    res->cap = cap;
  }
  kv_blob *b = kv__blob_alloc(e->klen);
  if (b == NULL)
    return WEFT_ENOMEM;
  if (e->klen)
    memcpy(b->data, e->key, e->klen);
  res->keys[res->n++] = b;
  return 0;
}

/* Copies the live keys of bucket `c` into `res`. */
static int scan_bucket(kv_store *s, kv_stripe *st, uint64_t c,
                       kv_scan_result *res) {
  for (kv_entry *e = st->table.buckets[c & st->table.mask]; e; e = e->next)
    if (!kv__entry_expired(s, e) && result_push(res, e) != 0)
      return WEFT_ENOMEM;
  return 0;
}

/* Drops the keys from index `from` on that do not match `pattern`. Runs
 * without a lock: a slow pattern never blocks other threads. */
static void scan_filter(kv_scan_result *res, size_t from, const void *pattern,
                        size_t plen) {
  size_t w = from;
  for (size_t i = from; i < res->n; i++) {
    kv_blob *k = res->keys[i];
    if (kv_glob_match(pattern, plen, k->data, k->len))
      res->keys[w++] = k;
    else
      kv_blob_release(k);
  }
  res->n = w;
}

int kv_scan(kv_store *s, uint64_t cursor, size_t count, const void *pattern,
            size_t plen, kv_scan_result *res, uint64_t *next) {
  /* The cursor's low bits name the stripe, the rest is that stripe's
   * bucket cursor (Redis 7's kvstore does the same over its dicts). The
   * bucket cursor never exceeds the table size, so the shift loses
   * nothing. */
  size_t si = (size_t)(cursor & (s->n_stripes - 1));
  uint64_t c = s->stripe_bits ? cursor >> s->stripe_bits : cursor;
  if (count == 0)
    count = SCAN_COUNT_DEFAULT;
  if (count > SIZE_MAX / 10)
    count = SIZE_MAX / 10;
  size_t from = res->n, visits = count * 10;
  int err = 0;
  while (si < s->n_stripes && err == 0) {
    kv_stripe *st = &s->stripes[si];
    kv__stripe_lock(s, st);
    do {
      err = scan_bucket(s, st, c, res);
      if (err == 0)
        c = cursor_next(c, st->table.mask);
    } while (err == 0 && c != 0 && res->n - from < count && --visits > 0);
    kv__stripe_unlock(s, st);
    if (err == 0 && c == 0)
      si++; /* this stripe is done; the next starts at bucket cursor 0 */
    if (res->n - from >= count || visits == 0)
      break;
  }
  *next = si == s->n_stripes ? 0 : (c << s->stripe_bits) | si;
  if (pattern)
    scan_filter(res, from, pattern, plen);
  return err;
}

/* ------------------------------------------------------------------------ */
/* Glob matching (Redis' stringmatchlen syntax)                              */

/* Matches `ch` against the class starting after '[' at pat[*p]; moves *p
 * past the closing ']' (an unterminated class ends with the pattern). */
static bool class_match(const unsigned char *pat, size_t plen, size_t *p,
                        unsigned char ch) {
  size_t i = *p;
  bool neg = i < plen && pat[i] == '^', match = false;
  if (neg)
    i++;
  while (i < plen && pat[i] != ']') {
    if (pat[i] == '\\' && i + 1 < plen) {
      match |= pat[i + 1] == ch;
      i += 2;
    } else if (i + 2 < plen && pat[i + 1] == '-') {
      unsigned char lo = pat[i], hi = pat[i + 2];
      if (lo > hi) {
        unsigned char t = lo;
        lo = hi;
        hi = t;
      }
      match |= ch >= lo && ch <= hi;
      i += 3;
    } else {
      match |= pat[i] == ch;
      i++;
    }
  }
  *p = i < plen ? i + 1 : plen;
  return match != neg;
}

/* One pattern element against one character: advances *p on a match. */
static bool element_match(const unsigned char *pat, size_t plen, size_t *p,
                          unsigned char ch) {
  size_t i = *p;
  switch (pat[i]) {
  case '?':
    *p = i + 1;
    return true;
  case '[':
    *p = i + 1;
    return class_match(pat, plen, p, ch);
  case '\\':
    if (i + 1 < plen) {
      *p = i + 2;
      return pat[i + 1] == ch;
    }
    break; /* a trailing backslash is literal */
  default:
    break;
  }
  *p = i + 1;
  return pat[i] == ch;
}

bool kv_glob_match(const void *pattern, size_t plen, const void *str,
                   size_t slen) {
  const unsigned char *pat = pattern, *s = str;
  /* Every element but '*' consumes exactly one character, so remembering
   * only the last '*' and retrying it one character further is complete:
   * O(plen * slen) at worst, never exponential. */
  size_t p = 0, i = 0, star_p = SIZE_MAX, star_i = 0;
  while (i < slen) {
    if (p < plen && pat[p] == '*') {
      while (p < plen && pat[p] == '*')
        p++;
      star_p = p;
      star_i = i;
      continue;
    }
    size_t np = p;
    if (p < plen && element_match(pat, plen, &np, s[i])) {
      p = np;
      i++;
      continue;
    }
    if (star_p == SIZE_MAX)
      return false;
    p = star_p;
    i = ++star_i;
  }
  while (p < plen && pat[p] == '*')
    p++;
  return p == plen;
}

/* ------------------------------------------------------------------------ */
/* Error texts                                                               */

const char *kv_error_message(int err) {
  switch (err) {
  case WEFT_EINVAL:
    return "value is not an integer or out of range";
  case WEFT_ERANGE:
    return "increment or decrement would overflow";
  case WEFT_EMSGSIZE:
    return "string exceeds maximum allowed size";
  default:
    return weft_strerror(err);
  }
}
