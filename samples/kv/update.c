/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/update.c: the store's read-modify-write commands whose new
 * value's size depends on the old one: APPEND, SETRANGE, SETBIT and
 * INCRBYFLOAT. They keep the store's rule (store_internal.h: allocate
 * before locking, free after unlocking) with an optimistic update: read
 * the old value under the lock, build the new one without it, and install
 * it only if the key still holds the very same blob (blobs are immutable
 * and the reference taken keeps the pointer from being reused); else read
 * again. Inside a transaction the first try always succeeds. */
#include "store_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

/* Redis' MAX_LONG_DOUBLE_CHARS: the longest number INCRBYFLOAT reads, and
 * room for the longest it writes. */
#define LONG_DOUBLE_CHARS (5 * 1024)

/* Builds the new value from the old one (NULL: the key is absent) into
 * *out (one reference), without a lock. Returns 0 or an error. */
typedef int (*update_fn)(void *arg, const kv_store *s, const kv_blob *old,
                         kv_blob **out);

/* Reads the live value of `key` (a reference, or NULL) under the lock. */
static kv_blob *update_read(kv_store *s, const void *key, size_t klen) {
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  kv_blob *old = e != NULL ? kv_blob_retain(e->val) : NULL;
  kv__key_unlock(s, &k);
  return old;
}

/* Installs `nb` if `key` still holds `old` (NULL: still absent, then
 * `spare` becomes its entry). Returns true when installed; *replaced gets
 * the store's reference to `old` to release after the unlock, and *spare
 * is NULL once used. */
static bool update_install(kv_store *s, kv_stripe *st, uint64_t h,
                           const void *key, size_t klen, const kv_blob *old,
                           kv_blob *nb, kv_entry **spare, kv_blob **replaced,
                           garbage *g) {
  kv_entry *e = kv__lookup_live(s, st, h, key, klen, g);
  if ((e != NULL ? e->val : NULL) != old)
    return false;
  if (e == NULL) {
    kv__entry_link(st, *spare, nb);
    *spare = NULL;
    return true;
  }
  *replaced = e->val; /* == old; TTL kept */
  e->val = nb;
  kv__entry_touch(st, e);
  kv__counter_add(&st->mem, nb->len);
  kv__counter_sub(&st->mem, old->len);
  return true;
}

/* The optimistic loop: returns 0 with a reference to the new value in
 * *result (may be NULL when not wanted), or fn's error. */
static int update(kv_store *s, const void *key, size_t klen, update_fn fn,
                  void *arg, kv_blob **result) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  uint64_t h = kv__key_hash(s, key, klen);
  kv_stripe *st = kv__stripe_of(s, h);
  for (;;) {
    kv_blob *old = update_read(s, key, klen), *nb = NULL;
    int err = fn(arg, s, old, &nb);
    kv_entry *spare = NULL;
    if (err == 0 && old == NULL &&
        (spare = kv__entry_new(h, key, klen)) == NULL)
      err = WEFT_ENOMEM;
    if (err != 0) {
      kv_blob_release(old);
      kv_blob_release(nb);
      return err;
    }
    garbage g = {NULL};
    kv_blob *replaced = NULL;
    kv__stripe_lock(s, st);
    bool done =
        update_install(s, st, h, key, klen, old, nb, &spare, &replaced, &g);
    if (done && result != NULL)
      *result = kv_blob_retain(nb);
    kv__stripe_unlock(s, st);
    kv__garbage_free(&g);
    free(spare);
    kv_blob_release(replaced);
    kv_blob_release(old);
    if (done)
      return 0;
    kv_blob_release(nb); /* the key changed meanwhile: again */
  }
}

/* update, then the new value's length in *new_len (APPEND, SETRANGE). */
static int update_len(kv_store *s, const void *key, size_t klen, update_fn fn,
                      void *arg, size_t *new_len) {
  kv_blob *v = NULL;
  int err = update(s, key, klen, fn, arg, &v);
  if (err == 0) {
    *new_len = v->len;
    kv_blob_release(v);
  }
  return err;
}

/* ---- SETRANGE and APPEND ---- */

typedef struct setrange_arg {
  uint64_t offset; /* where `data` goes; APPEND: the old value's end */
  bool append;
  const void *data;
  size_t len;
} setrange_arg;

static int setrange_build(void *arg, const kv_store *s, const kv_blob *old,
                          kv_blob **out) {
  const setrange_arg *a = arg;
  size_t have = old != NULL ? old->len : 0;
  uint64_t offset = a->append ? have : a->offset;
  if (offset > s->max_value_len || a->len > s->max_value_len - offset)
    return WEFT_EMSGSIZE;
  size_t end = (size_t)offset + a->len;
  kv_blob *b = kv__blob_alloc(end > have ? end : have);
  if (b == NULL)
    return WEFT_ENOMEM;
  if (have > 0)
    memcpy(b->data, old->data, have);
  if (offset > have)
    memset(b->data + have, 0, (size_t)offset - have);
  if (a->len > 0)
    memcpy(b->data + offset, a->data, a->len);
  *out = b;
  return 0;
}

int kv_append(kv_store *s, const void *key, size_t klen, const void *data,
              size_t len, size_t *new_len) {
  setrange_arg a = {.append = true, .data = data, .len = len};
  return update_len(s, key, klen, setrange_build, &a, new_len);
}

int kv_setrange(kv_store *s, const void *key, size_t klen, uint64_t offset,
                const void *data, size_t len, size_t *new_len) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  if (len == 0) { /* Redis: no change, and no key made */
    kv_blob *v;
    int rc = kv_get(s, key, klen, &v);
    if (rc < 0)
      return rc;
    *new_len = v != NULL ? v->len : 0;
    kv_blob_release(v);
    return 0;
  }
  setrange_arg a = {.offset = offset, .data = data, .len = len};
  return update_len(s, key, klen, setrange_build, &a, new_len);
}

/* ---- SETBIT ---- */

typedef struct setbit_arg {
  uint64_t offset; /* in bits */
  bool on;
  bool old; /* out: the bit before */
} setbit_arg;

static int setbit_build(void *arg, const kv_store *s, const kv_blob *old,
                        kv_blob **out) {
  setbit_arg *a = arg;
  size_t have = old != NULL ? old->len : 0;
  uint64_t byte = a->offset >> 3;
  if (byte >= s->max_value_len)
    return WEFT_EMSGSIZE;
  size_t len = byte + 1 > have ? (size_t)byte + 1 : have;
  kv_blob *b = kv__blob_alloc(len);
  if (b == NULL)
    return WEFT_ENOMEM;
  if (have > 0)
    memcpy(b->data, old->data, have);
  memset(b->data + have, 0, len - have);
  unsigned char mask = (unsigned char)(0x80u >> (a->offset & 7));
  a->old = (b->data[byte] & mask) != 0; /* bit 0 is the first byte's MSB */
  b->data[byte] = a->on ? b->data[byte] | mask : b->data[byte] & ~mask;
  *out = b;
  return 0;
}

int kv_setbit(kv_store *s, const void *key, size_t klen, uint64_t offset,
              bool on, bool *old) {
  setbit_arg a = {offset, on, false};
  int err = update(s, key, klen, setbit_build, &a, NULL);
  if (err == 0)
    *old = a.old;
  return err;
}

/* ---- INCRBYFLOAT ---- */

bool kv_parse_long_double(const void *text, size_t len, long double *out) {
  char buf[LONG_DOUBLE_CHARS];
  if (len == 0 || len >= sizeof buf || memchr(text, '\0', len) != NULL)
    return false; /* a NUL would end strtold's number early: not one */
  memcpy(buf, text, len);
  buf[len] = '\0';
  char *end;
  errno = 0;
  long double v = strtold(buf, &end);
  /* Redis' string2ld: an overflow to infinity or an underflow to zero is
   * refused; "inf" itself is a number (the sum then is not). */
  if (isspace((unsigned char)buf[0]) || *end != '\0' || isnan(v) ||
      (errno == ERANGE &&
       (v == HUGE_VALL || v == -HUGE_VALL || fpclassify(v) == FP_ZERO)) ||
      errno == EINVAL)
    return false;
  *out = v;
  return true;
}

/* Redis' ld2string(LD_STR_HUMAN): "%.17Lf", trailing zeros (and a
 * trailing point) removed, "-0" written as "0". Returns the length. */
static size_t format_long_double(char *buf, size_t cap, long double v) {
  int n = snprintf(buf, cap, "%.17Lf", v);
  if (n < 0 || (size_t)n >= cap)
    return 0;
  size_t l = (size_t)n;
  if (memchr(buf, '.', l) != NULL) {
    while (buf[l - 1] == '0')
      l--;
    if (buf[l - 1] == '.')
      l--;
  }
  if (l == 2 && buf[0] == '-' && buf[1] == '0') {
    buf[0] = '0';
    l = 1;
  }
  return l;
}

static int incrbyfloat_build(void *arg, const kv_store *s, const kv_blob *old,
                             kv_blob **out) {
  long double v = 0;
  if (old != NULL && !kv_parse_long_double(old->data, old->len, &v))
    return WEFT_EINVAL;
  v += *(const long double *)arg;
  if (isnan(v) || isinf(v))
    return WEFT_ERANGE;
  char text[LONG_DOUBLE_CHARS];
  size_t n = format_long_double(text, sizeof text, v);
  if (n == 0)
    return WEFT_ERANGE; /* cannot happen for a finite long double */
  if (n > s->max_value_len)
    return WEFT_EMSGSIZE;
  kv_blob *b = kv__blob_alloc(n);
  if (b == NULL)
    return WEFT_ENOMEM;
  memcpy(b->data, text, n);
  *out = b;
  return 0;
}

int kv_incrbyfloat(kv_store *s, const void *key, size_t klen, long double incr,
                   kv_blob **result) {
  *result = NULL;
  return update(s, key, klen, incrbyfloat_build, &incr, result);
}
