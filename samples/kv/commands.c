/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/commands.c: the store's per-key commands (store.h): GET, SET
 * (and its GET option), GETDEL, INCRBY, DEL, EXISTS, MGET, MSET, RENAME,
 * SCAN and KEYS with Redis' glob matching, and the Redis error texts. Each
 * hashes its keys, takes the stripe locks it needs, works on the tables through
 * table.c and expiry.c, and frees after the unlock (the rule in
 * store_internal.h). Not to be confused with command.c, which checks a protocol
 * request's arguments and then calls these.
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

/* kv_get, and kv_getdel with `del`: the value found is also deleted. */
static int get_value(kv_store *s, const void *key, size_t klen, bool del,
                     kv_blob **out) {
  *out = NULL;
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  if (e) {
    *out = kv_blob_retain(e->val);
    if (del)
      kv__key_delete(&k, e);
  }
  kv__counter_add(e ? &k.st->hits : &k.st->misses, 1);
  kv__key_unlock(s, &k);
  return e != NULL;
}

int kv_get(kv_store *s, const void *key, size_t klen, kv_blob **out) {
  return get_value(s, key, klen, false, out);
}

int kv_getdel(kv_store *s, const void *key, size_t klen, kv_blob **out) {
  return get_value(s, key, klen, true, out);
}

/* The state one SET carries through the lock. */
typedef struct set_op {
  uint64_t hash;
  const void *key;
  size_t klen;
  kv_blob *blob;   /* in: the new value; out: what to release (old or own) */
  kv_entry *spare; /* preallocated entry for a new key, or NULL */
  unsigned flags;
  uint64_t at;  /* deadline in ns, 0 = none */
  kv_blob *old; /* out, when want_old: a reference to the previous value */
  bool want_old;
} set_op;

/* SET under the stripe lock. Returns 1 stored / 0 not / error; on return
 * op->blob is the blob to release after the unlock (the old value, or the
 * unused new one, or NULL when a new entry took it). */
static int set_locked(kv_store *s, kv_stripe *st, set_op *op, garbage *g) {
  kv_entry *e = kv__lookup_live(s, st, op->hash, op->key, op->klen, g);
  if (op->want_old && e)
    op->old = kv_blob_retain(e->val);
  if (((op->flags & KV_SET_NX) && e) || ((op->flags & KV_SET_XX) && !e))
    return 0;
  if (op->flags & KV_SET_EXPIRED) { /* stored and expired at once */
    if (e) {
      kv__entry_unlink(st, kv__table_link_of(&st->table, e), g);
      kv__table_maybe_resize(&st->table);
    }
    return 1; /* op->blob, unused, is released */
  }
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
    kv__entry_touch(st, e);
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

/* kv_set_blob and kv_set_get: `old` NULL when the old value is not
 * wanted. */
static int set_blob(kv_store *s, const void *key, size_t klen, kv_blob *blob,
                    const kv_set_options *opts, kv_blob **old) {
  set_op op = {.key = key, .klen = klen, .blob = blob, .want_old = old != NULL};
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
  if (old != NULL)
    *old = op.old;
  else
    kv_blob_release(op.old);
  if (ret < 0 && old != NULL) {
    kv_blob_release(*old);
    *old = NULL;
  }
  return ret;
}

int kv_set_blob(kv_store *s, const void *key, size_t klen, kv_blob *blob,
                const kv_set_options *opts) {
  return set_blob(s, key, klen, blob, opts, NULL);
}

int kv_set_get(kv_store *s, const void *key, size_t klen, kv_blob *blob,
               const kv_set_options *opts, kv_blob **old) {
  *old = NULL;
  return set_blob(s, key, klen, blob, opts, old);
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
    kv__entry_touch(st, e);
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
    kv__lock_set_add(s, ls, hashes[i]);
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
  kv__lock_set_lock(s, &ls);
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
  kv__lock_set_unlock(s, &ls);
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
  kv__lock_set_lock(s, &ls);
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
  kv__lock_set_unlock(s, &ls);
  kv__garbage_free(&g);
out:
  mset_prep_free(&p, n);
  return err;
}

/* ------------------------------------------------------------------------ */
/* RENAME                                                                    */

/* Moves entry `e` (of `from`) to key `op->key` in `to` under both locks:
 * its value and TTL go to the existing destination entry, or to the spare
 * one. Returns 0 or WEFT_ENOMEM (nothing changed). */
static int rename_locked(kv_store *s, kv_stripe *from, kv_entry *e,
                         kv_stripe *to, set_op *op, garbage *g) {
  kv_entry *d = kv__lookup_live(s, to, op->hash, op->key, op->klen, g);
  bool needs_slot =
      e->expire_at != 0 && (d == NULL || d->exp_idx == NO_EXPIRE_IDX);
  if (needs_slot && kv__expires_reserve(to) != 0)
    return WEFT_ENOMEM;
  uint64_t at = e->expire_at;
  kv_blob *v = e->val;
  kv__entry_unlink(from, kv__table_link_of(&from->table, e), g);
  kv__table_maybe_resize(&from->table);
  e->val = NULL; /* moved: the garbage list must not release it */
  if (d == NULL) {
    d = op->spare;
    op->spare = NULL;
    kv__entry_link(to, d, v);
  } else {
    op->blob = d->val; /* the value it replaces, released after unlock */
    d->val = v;
    kv__entry_touch(to, d);
    kv__counter_add(&to->mem, v->len);
    kv__counter_sub(&to->mem, op->blob->len);
  }
  if (at != 0)
    kv__expire_set(to, d, at);
  else
    kv__expire_clear(to, d);
  return 0;
}

int kv_rename(kv_store *s, const void *src, size_t slen, const void *dst,
              size_t dlen) {
  if (slen > s->max_key_len || dlen > s->max_key_len)
    return WEFT_EMSGSIZE;
  uint64_t hs = kv__key_hash(s, src, slen);
  set_op op = {.hash = kv__key_hash(s, dst, dlen), .key = dst, .klen = dlen};
  op.spare = kv__entry_new(op.hash, dst, dlen);
  if (op.spare == NULL)
    return WEFT_ENOMEM;
  lock_set ls = {{0}};
  kv__lock_set_add(s, &ls, hs);
  kv__lock_set_add(s, &ls, op.hash);
  kv_stripe *from = kv__stripe_of(s, hs), *to = kv__stripe_of(s, op.hash);
  garbage g = {NULL};
  int ret = 0;
  kv__lock_set_lock(s, &ls);
  kv_entry *e = kv__lookup_live(s, from, hs, src, slen, &g);
  if (e != NULL && slen == dlen && memcmp(src, dst, slen) == 0)
    ret = 1; /* renamed to itself: nothing to do */
  else if (e != NULL)
    ret = rename_locked(s, from, e, to, &op, &g) == 0 ? 1 : WEFT_ENOMEM;
  kv__lock_set_unlock(s, &ls);
  kv__garbage_free(&g);
  kv_blob_release(op.blob);
  free(op.spare);
  return ret;
}

/* ------------------------------------------------------------------------ */
/* Glob matching (Redis' stringmatchlen syntax)                              */

/* The pattern is compiled into a nondeterministic automaton whose states
 * are "the first j elements matched" (j = 0 .. n; consecutive stars are
 * one element) and run bit-parallel, one bit per state: every key byte
 * costs one pass over ceil((n + 1) / 64) words, whatever the pattern, so
 * the work is bytes x words and never backtracks (Redis' stringmatchlen
 * recurses on every '*' and is exponential without its nesting cap). */
typedef struct glob_nfa {
  size_t n;          /* elements */
  size_t words;      /* 64-bit words per state set: (n + 1 + 63) / 64 */
  uint64_t *star;    /* words: bit j when element j is '*' */
  uint64_t *state;   /* words: scratch for glob_exec */
  uint64_t accept[]; /* 256 * words: bit j of row c when element j (not a
                        star) matches byte c */
} glob_nfa;

/* A set of byte values, one bit each. */
typedef struct byte_set {
  uint64_t bits[4];
} byte_set;

/* Adds byte `c` to `s`. */
static void set_add(byte_set *s, unsigned c) {
  s->bits[c / 64] |= 1ull << (c % 64);
}

/* Adds the bytes `lo` to `hi` (inclusive) to `s`. */
static void set_add_range(byte_set *s, unsigned lo, unsigned hi) {
  for (unsigned c = lo; c <= hi; c++)
    set_add(s, c);
}

/* The class after '[' at pat[i]: its bytes into `s`; returns the index past
 * the closing ']' (an unterminated class ends with the pattern). Redis'
 * rules: a leading '^' negates, "\x" is x, "a-z" a range either way round. */
static size_t parse_class(const unsigned char *pat, size_t plen, size_t i,
                          byte_set *s) {
  bool neg = i < plen && pat[i] == '^';
  if (neg)
    i++;
  while (i < plen && pat[i] != ']') {
    if (pat[i] == '\\' && i + 1 < plen) {
      set_add(s, pat[i + 1]);
      i += 2;
    } else if (i + 2 < plen && pat[i + 1] == '-') {
      unsigned lo = pat[i], hi = pat[i + 2];
      set_add_range(s, lo < hi ? lo : hi, lo < hi ? hi : lo);
      i += 3;
    } else {
      set_add(s, pat[i]);
      i++;
    }
  }
  if (neg)
    for (int w = 0; w < 4; w++)
      s->bits[w] = ~s->bits[w];
  return i < plen ? i + 1 : plen;
}

/* The element at pat[i]: returns the index past it and sets *star, or fills
 * `s` (when not NULL) with the bytes it matches. A run of stars is one. */
static size_t parse_element(const unsigned char *pat, size_t plen, size_t i,
                            bool *star, byte_set *s) {
  byte_set scratch;
  if (s == NULL)
    s = &scratch;
  *s = (byte_set){{0}};
  *star = pat[i] == '*';
  if (*star) {
    while (i < plen && pat[i] == '*')
      i++;
    return i;
  }
  switch (pat[i]) {
  case '?':
    *s = (byte_set){{~0ull, ~0ull, ~0ull, ~0ull}};
    return i + 1;
  case '[':
    return parse_class(pat, plen, i + 1, s);
  case '\\':
    if (i + 1 < plen) {
      set_add(s, pat[i + 1]);
      return i + 2;
    }
    break; /* a trailing backslash is literal */
  default:
    break;
  }
  set_add(s, pat[i]);
  return i + 1;
}

/* Compiles `pattern` into *out (the caller frees it with glob_free).
 * Bounded work: one pass to count the elements, one to fill the rows, at
 * most 256 bit sets per element. Returns 0 or WEFT_ENOMEM. */
static int glob_compile(glob_nfa **out, const void *pattern, size_t plen) {
  const unsigned char *pat = pattern;
  size_t n = 0;
  bool star;
  for (size_t i = 0; i < plen; n++)
    i = parse_element(pat, plen, i, &star, NULL);
  size_t words = (n + 1 + 63) / 64;
  if (words > (SIZE_MAX - sizeof(glob_nfa)) / (258 * sizeof(uint64_t)))
    return WEFT_ENOMEM;
  glob_nfa *g = calloc(1, sizeof(*g) + 258 * words * sizeof(uint64_t));
  if (g == NULL)
    return WEFT_ENOMEM;
  g->n = n;
  g->words = words;
  g->star = g->accept + 256 * words;
  g->state = g->star + words;
  size_t j = 0;
  for (size_t i = 0; i < plen; j++) {
    byte_set s;
    i = parse_element(pat, plen, i, &star, &s);
    uint64_t bit = 1ull << (j % 64);
    if (star) {
      g->star[j / 64] |= bit;
      continue;
    }
    for (unsigned c = 0; c < 256; c++)
      if ((s.bits[c / 64] >> (c % 64)) & 1)
        g->accept[c * words + j / 64] |= bit;
  }
  *out = g;
  return 0;
}

/* Frees a compiled pattern; NULL is a no-op. */
static void glob_free(glob_nfa *g) { free(g); }

/* The work glob_exec does on a string of `slen` bytes, in the units of
 * KV_SCAN_WORK_MAX: (bytes + 1) x words, at most. */
static size_t glob_cost(const glob_nfa *g, size_t slen) {
  return slen < SIZE_MAX / g->words ? (slen + 1) * g->words : SIZE_MAX;
}

/* True for a pattern of stars only: it matches every string. */
static bool glob_matches_all(const glob_nfa *g) {
  return g->n == 1 && (g->star[0] & 1);
}

/* Runs the automaton over `str`: true when the whole string matches. Uses
 * g->state, so one compiled pattern serves one thread at a time. */
static bool glob_exec(glob_nfa *g, const void *str, size_t slen) {
  const unsigned char *s = str;
  const uint64_t *star = g->star;
  uint64_t *d = g->state;
  size_t words = g->words, hi = 0; /* words above hi hold no state */
  memset(d, 0, words * sizeof(*d));
  d[0] = 1 | ((star[0] & 1) << 1); /* state 0, and 1 when element 0 is '*' */
  for (size_t i = 0; i < slen; i++) {
    const uint64_t *a = g->accept + (size_t)s[i] * words;
    /* A byte moves a state up by one, its star closure by one more: at
     * most two bits, so only the word above hi can gain any. */
    size_t top = hi + 1 < words ? hi + 1 : hi;
    uint64_t px = 0, pe = 0, any = 0; /* the word below's x and e */
    for (size_t w = 0; w <= top; w++) {
      uint64_t dw = d[w], sw = star[w];
      uint64_t x = dw & a[w]; /* states whose element takes this byte */
      uint64_t nd = (x << 1) | (px >> 63) | (dw & sw);
      uint64_t e = nd & sw; /* a star may also match nothing */
      nd |= (e << 1) | (pe >> 63);
      px = x;
      pe = e;
      d[w] = nd;
      any |= nd;
    }
    if (any == 0)
      return false;
    if (d[top] != 0)
      hi = top;
  }
  return (d[g->n / 64] >> (g->n % 64)) & 1;
}

bool kv_glob_match(const void *pattern, size_t plen, const void *str,
                   size_t slen) {
  glob_nfa *g;
  if (glob_compile(&g, pattern, plen) != 0)
    return false;
  bool m = glob_exec(g, str, slen);
  glob_free(g);
  return m;
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
  kv_blob **k = kv_array_reserve(res->keys, res->n, &res->cap, sizeof *k);
  if (k == NULL)
    return WEFT_ENOMEM;
  res->keys = k;
  kv_blob *b = kv__blob_alloc(e->klen);
  if (b == NULL)
    return WEFT_ENOMEM;
  if (e->klen)
    memcpy(b->data, e->key, e->klen);
  res->keys[res->n++] = b;
  return 0;
}

/* The work one key adds to a SCAN call (KV_SCAN_WORK_MAX's units): its
 * bytes, times the pattern's words when there is one to match. */
static size_t scan_cost(const glob_nfa *g, size_t klen) {
  return g != NULL ? glob_cost(g, klen) : klen + 1;
}

/* Copies the live keys of bucket `c` into `res` and adds the work they cost
 * (copy, then match against `g`, NULL for none) to *work. */
static int scan_bucket(kv_store *s, kv_stripe *st, uint64_t c,
                       kv_scan_result *res, const glob_nfa *g, size_t *work) {
  for (kv_entry *e = st->table.buckets[c & st->table.mask]; e; e = e->next) {
    if (kv__entry_expired(s, e))
      continue;
    if (result_push(res, e) != 0)
      return WEFT_ENOMEM;
    *work += scan_cost(g, e->klen);
  }
  return 0;
}

/* Drops the keys from index `from` on that do not match `g`. Runs without
 * a lock: matching never blocks other threads. */
static void scan_filter(kv_scan_result *res, size_t from, glob_nfa *g) {
  size_t w = from;
  for (size_t i = from; i < res->n; i++) {
    kv_blob *k = res->keys[i];
    if (glob_exec(g, k->data, k->len))
      res->keys[w++] = k;
    else
      kv_blob_release(k);
  }
  res->n = w;
}

/* The pattern compiled for one SCAN call: *out NULL when there is nothing
 * to filter (no pattern, or only stars). Returns 0, WEFT_EMSGSIZE for a
 * pattern longer than KV_SCAN_PATTERN_MAX, or WEFT_ENOMEM. */
static int scan_pattern(const void *pattern, size_t plen, glob_nfa **out) {
  *out = NULL;
  if (pattern == NULL)
    return 0;
  if (plen > KV_SCAN_PATTERN_MAX)
    return WEFT_EMSGSIZE;
  int err = glob_compile(out, pattern, plen);
  if (err == 0 && glob_matches_all(*out)) {
    glob_free(*out);
    *out = NULL;
  }
  return err;
}

int kv_scan(kv_store *s, uint64_t cursor, size_t count, const void *pattern,
            size_t plen, kv_scan_result *res, uint64_t *next) {
  glob_nfa *g;
  int err = scan_pattern(pattern, plen, &g);
  if (err != 0) {
    *next = cursor;
    return err;
  }
  /* The cursor's low bits name the stripe, the rest is that stripe's
   * bucket cursor (Redis 7's kvstore does the same over its dicts). The
   * bucket cursor never exceeds the table size, so the shift loses
   * nothing. */
  size_t si = (size_t)(cursor & (s->n_stripes - 1));
  uint64_t c = s->stripe_bits ? cursor >> s->stripe_bits : cursor;
  if (count == 0)
    count = SCAN_COUNT_DEFAULT;
  if (count > KV_SCAN_COUNT_MAX)
    count = KV_SCAN_COUNT_MAX;
  /* Three bounds, each checked after a whole bucket (so every call makes
   * progress): `count` keys, count * 10 buckets (Redis' rule for empty
   * ones), and KV_SCAN_WORK_MAX of copying and matching. */
  size_t from = res->n, visits = count * 10, work = 0;
  while (si < s->n_stripes && err == 0) {
    kv_stripe *st = &s->stripes[si];
    kv__stripe_lock(s, st);
    do {
      err = scan_bucket(s, st, c, res, g, &work);
      if (err == 0)
        c = cursor_next(c, st->table.mask);
    } while (err == 0 && c != 0 && res->n - from < count && --visits > 0 &&
             work < KV_SCAN_WORK_MAX);
    kv__stripe_unlock(s, st);
    if (err == 0 && c == 0)
      si++; /* this stripe is done; the next starts at bucket cursor 0 */
    if (res->n - from >= count || visits == 0 || work >= KV_SCAN_WORK_MAX)
      break;
  }
  *next = si == s->n_stripes ? 0 : (c << s->stripe_bits) | si;
  if (g != NULL)
    scan_filter(res, from, g);
  glob_free(g);
  return err;
}

/* ------------------------------------------------------------------------ */
/* KEYS                                                                      */

/* Copies the live keys of stripe `st` (locked by the caller) into `res`,
 * adding each one's cost (scan_cost) to *work and counting it in *seen;
 * WEFT_ETOOLONG past KV_SCAN_WORK_MAX or KV_KEYS_MAX keys. */
static int keys_copy(kv_store *s, kv_stripe *st, kv_scan_result *res,
                     const glob_nfa *g, size_t *work, size_t *seen) {
  for (uint64_t b = 0; b <= st->table.mask; b++) {
    for (kv_entry *e = st->table.buckets[b]; e; e = e->next) {
      if (kv__entry_expired(s, e))
        continue;
      *work += scan_cost(g, e->klen);
      if (*work > KV_SCAN_WORK_MAX || ++*seen > KV_KEYS_MAX)
        return WEFT_ETOOLONG;
      if (result_push(res, e) != 0)
        return WEFT_ENOMEM;
    }
  }
  return 0;
}

int kv_keys_begin(kv_keys_iter *it, const void *pattern, size_t plen,
                  const kv_scan_result *res) {
  memset(it, 0, sizeof *it);
  it->from = res->n;
  return scan_pattern(pattern, plen, &it->pattern);
}

/* One stripe locked at a time, as SCAN (issue 27): with every stripe
 * locked for the whole walk, each command of every other loop that
 * touched the store waited for the KEYS, and one client pipelining KEYS
 * made another loop's client wait a whole KEYS per command, seconds for a
 * pipeline. Inside EXEC the transaction holds every stripe already
 * (kv__stripe_lock takes none), so there KEYS stays one snapshot. Each
 * stripe's matches are filtered after its unlock, so only the matching
 * keys are held. */
int kv_keys_step(kv_store *s, kv_keys_iter *it, size_t keys,
                 kv_scan_result *res) {
  size_t until = it->seen + keys;
  int rc = 0;
  while (it->stripe < s->n_stripes && it->seen < until) {
    kv_stripe *st = &s->stripes[it->stripe++];
    size_t here = res->n;
    kv__stripe_lock(s, st);
    rc = keys_copy(s, st, res, it->pattern, &it->work, &it->seen);
    kv__stripe_unlock(s, st);
    if (rc != 0)
      break;
    if (it->pattern != NULL)
      scan_filter(res, here, it->pattern);
  }
  if (rc != 0) {
    while (res->n > it->from)
      kv_blob_release(res->keys[--res->n]);
    it->stripe = s->n_stripes; /* over */
    return rc;
  }
  return it->stripe < s->n_stripes;
}

void kv_keys_end(kv_keys_iter *it) {
  glob_free(it->pattern);
  it->pattern = NULL;
}

int kv_keys(kv_store *s, const void *pattern, size_t plen,
            kv_scan_result *res) {
  kv_keys_iter it;
  int err = kv_keys_begin(&it, pattern, plen, res);
  if (err != 0)
    return err;
  while ((err = kv_keys_step(s, &it, SIZE_MAX / 2, res)) == 1)
    ;
  kv_keys_end(&it);
  return err;
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
