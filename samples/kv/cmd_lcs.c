/* SPDX-License-Identifier: Apache-2.0 */
/* LCS (command_internal.h): the longest common subsequence of two string
 * values, Redis 7's command and replies: the subsequence, its length
 * (LEN), or its matching ranges (IDX, with MINMATCHLEN and WITHMATCHLEN).
 * The classic dynamic-programming table, one uint32 per pair of
 * prefixes, then a walk back from its corner; bounded by
 * KV_LCS_MAX_CELLS (Redis bounds it by memory only). */
#include "command_internal.h"

#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

/** The largest table LCS builds: (len1 + 1) x (len2 + 1) cells of 4
 *  bytes, 64 MiB. */
#define KV_LCS_MAX_CELLS (16u * 1024 * 1024)

/* LCS's options. */
typedef struct lcs_opts {
  bool len, idx, withmatchlen;
  int64_t minmatchlen;
} lcs_opts;

/* One range of IDX's answer: [a0, a1] of the first value matches
 * [b0, b1] of the second. */
typedef struct lcs_range {
  size_t a0, a1, b0, b1;
} lcs_range;

/* Parses the options after the two keys. False after an error reply. */
static bool lcs_parse(const kv_call *c, lcs_opts *o) {
  *o = (lcs_opts){0};
  for (size_t i = 2; i < c->argc; i++) {
    if (kv_arg_is(&c->argv[i], "LEN"))
      o->len = true;
    else if (kv_arg_is(&c->argv[i], "IDX"))
      o->idx = true;
    else if (kv_arg_is(&c->argv[i], "WITHMATCHLEN"))
      o->withmatchlen = true;
    else if (kv_arg_is(&c->argv[i], "MINMATCHLEN") && i + 1 < c->argc) {
      if (!kv_parse_i64(&c->argv[++i], &o->minmatchlen)) {
        kv_reply_not_integer(c);
        return false;
      }
      if (o->minmatchlen < 0)
        o->minmatchlen = 0;
    } else {
      kv_reply_syntax(c);
      return false;
    }
  }
  if (o->len && o->idx) {
    c->ops->error(c->w, "ERR If you want both the length and indexes, "
                        "please just use IDX.");
    return false;
  }
  return true;
}

/* The table: t[i * (bn + 1) + j] is the LCS length of a[0..i) and
 * b[0..j). */
static void lcs_fill(uint32_t *t, const unsigned char *a, size_t an,
                     const unsigned char *b, size_t bn) {
  size_t w = bn + 1;
  for (size_t i = 0; i <= an; i++)
    for (size_t j = 0; j <= bn; j++) {
      uint32_t up = i > 0 ? t[(i - 1) * w + j] : 0;
      uint32_t left = j > 0 ? t[i * w + j - 1] : 0;
      t[i * w + j] = i == 0 || j == 0       ? 0
                     : a[i - 1] == b[j - 1] ? t[(i - 1) * w + j - 1] + 1
                     : up > left            ? up
                                            : left;
    }
}

/* Walks back from the table's corner: the subsequence into `out` (its
 * length bytes) and the maximal runs of matches into `ranges` (from the
 * end of the values to their start, as Redis lists them); returns how
 * many runs. */
static size_t lcs_walk(const uint32_t *t, const unsigned char *a, size_t an,
                       const unsigned char *b, size_t bn, unsigned char *out,
                       lcs_range *ranges) {
  size_t w = bn + 1, i = an, j = bn, k = t[an * w + bn], n = 0;
  bool open = false;
  while (i > 0 && j > 0) {
    if (a[i - 1] == b[j - 1]) {
      out[--k] = a[i - 1];
      if (!open)
        ranges[n] = (lcs_range){i - 1, i - 1, j - 1, j - 1}, open = true;
      else
        ranges[n].a0 = i - 1, ranges[n].b0 = j - 1; /* the run goes on */
      i--, j--;
      if (i == 0 || j == 0)
        n++, open = false;
    } else {
      if (t[(i - 1) * w + j] > t[i * w + j - 1])
        i--;
      else
        j--;
      if (open)
        n++, open = false;
    }
  }
  return n;
}

/* IDX's answer: "matches" (the runs of at least MINMATCHLEN, each
 * [[a0, a1], [b0, b1]] and with WITHMATCHLEN its length) and "len". */
static void lcs_reply_idx(const kv_call *c, const lcs_opts *o,
                          const lcs_range *r, size_t n, size_t len) {
  size_t shown = 0;
  for (size_t i = 0; i < n; i++)
    shown += (int64_t)(r[i].a1 - r[i].a0 + 1) >= o->minmatchlen;
  c->ops->map(c->w, 2);
  kv_reply_cstr(c, "matches");
  c->ops->array(c->w, shown);
  for (size_t i = 0; i < n; i++) {
    int64_t run = (int64_t)(r[i].a1 - r[i].a0 + 1);
    if (run < o->minmatchlen)
      continue;
    c->ops->array(c->w, o->withmatchlen ? 3 : 2);
    c->ops->array(c->w, 2);
    c->ops->integer(c->w, (int64_t)r[i].a0);
    c->ops->integer(c->w, (int64_t)r[i].a1);
    c->ops->array(c->w, 2);
    c->ops->integer(c->w, (int64_t)r[i].b0);
    c->ops->integer(c->w, (int64_t)r[i].b1);
    if (o->withmatchlen)
      c->ops->integer(c->w, run);
  }
  kv_reply_cstr(c, "len");
  c->ops->integer(c->w, (int64_t)len);
}

/* Both values (a missing key is empty), then the table and the walk. */
static void lcs_run(const kv_call *c, const lcs_opts *o, const kv_blob *ab,
                    const kv_blob *bb) {
  const unsigned char *a = ab ? ab->data : (const unsigned char *)"";
  const unsigned char *b = bb ? bb->data : (const unsigned char *)"";
  size_t an = ab ? ab->len : 0, bn = bb ? bb->len : 0;
  if ((uint64_t)(an + 1) * (bn + 1) > KV_LCS_MAX_CELLS)
    return c->ops->error(c->w, "ERR LCS of values this long would take more "
                               "than 64 MiB of memory (weft's bound)");
  uint32_t *t = malloc((an + 1) * (bn + 1) * sizeof *t);
  unsigned char *out = malloc(an + 1);
  lcs_range *ranges = malloc((an + 1) * sizeof *ranges);
  if (t == NULL || out == NULL || ranges == NULL) {
    free(t), free(out), free(ranges);
    return kv_reply_store_error(c, WEFT_ENOMEM);
  }
  lcs_fill(t, a, an, b, bn);
  size_t len = t[an * (bn + 1) + bn];
  size_t n = lcs_walk(t, a, an, b, bn, out, ranges);
  if (o->len)
    c->ops->integer(c->w, (int64_t)len);
  else if (o->idx)
    lcs_reply_idx(c, o, ranges, n, len);
  else
    c->ops->bulk(c->w, out, len, NULL);
  free(t), free(out), free(ranges);
}

/* LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]. */
void kv_cmd_lcs(const kv_call *c) {
  lcs_opts o;
  if (!lcs_parse(c, &o))
    return;
  kv_blob *v[2] = {NULL, NULL};
  int rc = kv_mget(c->store, 2, c->argv, v); /* one snapshot of both */
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  lcs_run(c, &o, v[0], v[1]);
  kv_blob_release(v[0]);
  kv_blob_release(v[1]);
}
