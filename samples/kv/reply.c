/* SPDX-License-Identifier: Apache-2.0 */
/* Replies of the KV client (client.h): a reply payload is a tree of
 * values (varint lengths, client.h's encoding); kv_reply_parse lays it
 * out in the caller's nodes, kv_reply_dup copies one into a single
 * allocation, kv_reply_error_code maps the server's error text to weft
 * error codes. No state: any thread. */
#include "client.h"

#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/varint.h>

typedef struct parser {
  const uint8_t *p;
  size_t left;
  kv_reply *nodes; /* NULL: only count */
  size_t max, used;
} parser;

static int parse_len(parser *ps, uint64_t *len) {
  int n = weft_varint_decode(ps->p, ps->left, len);
  if (n <= 0)
    return WEFT_EBADFRAME;
  ps->p += n;
  ps->left -= (size_t)n;
  return 0;
}

static int parse_array(parser *ps, kv_reply *r, int depth);

/* One value into `r` (NULL when counting). */
static int parse_value(parser *ps, kv_reply *r, int depth) {
  if (ps->left < 1)
    return WEFT_EBADFRAME;
  kv_reply v = {.tag = *ps->p};
  ps->p++, ps->left--;
  uint64_t len;
  switch (v.tag) {
  case KV_TAG_NULL:
    break;
  case KV_TAG_INTEGER:
    if (ps->left < 8)
      return WEFT_EBADFRAME;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
      u = u << 8 | ps->p[i];
    v.integer = (int64_t)u;
    ps->p += 8, ps->left -= 8;
    break;
  case KV_TAG_SIMPLE:
  case KV_TAG_ERROR:
  case KV_TAG_BULK:
    if (parse_len(ps, &len) < 0 || len > ps->left)
      return WEFT_EBADFRAME;
    v.str = ps->p;
    v.len = (size_t)len;
    ps->p += len, ps->left -= (size_t)len;
    break;
  case KV_TAG_ARRAY:
    return parse_array(ps, r, depth);
  default:
    return WEFT_EBADFRAME;
  }
  if (r != NULL)
    *r = v;
  return 0;
}

/* An array's elements take the next `count` nodes, so they are contiguous;
 * nested arrays take theirs after. */
static int parse_array(parser *ps, kv_reply *r, int depth) {
  uint64_t count;
  /* Every element takes at least its tag byte: a larger count is a lie. */
  if (depth >= KV_REPLY_MAX_DEPTH || parse_len(ps, &count) < 0 ||
      count > ps->left)
    return WEFT_EBADFRAME;
  kv_reply *elem = NULL;
  if (ps->nodes != NULL) {
    if (count > ps->max - ps->used)
      return WEFT_ENOSPC;
    elem = ps->nodes + ps->used;
  }
  ps->used += (size_t)count;
  for (uint64_t i = 0; i < count; i++) {
    int rc = parse_value(ps, elem != NULL ? &elem[i] : NULL, depth + 1);
    if (rc < 0)
      return rc;
  }
  if (r != NULL)
    *r = (kv_reply){.tag = KV_TAG_ARRAY,
                    .len = (size_t)count,
                    .elem = count > 0 ? elem : NULL};
  return 0;
}

static int parse_root(const weft_buf *payload, kv_reply *nodes, size_t max) {
  if (payload == NULL)
    return WEFT_EBADFRAME;
  parser ps = {.p = weft_buf_rptr(payload),
               .left = weft_buf_readable(payload),
               .nodes = nodes,
               .max = max,
               .used = 1};
  if (nodes != NULL && max < 1)
    return WEFT_ENOSPC;
  int rc = parse_value(&ps, nodes, 0);
  if (rc < 0)
    return rc;
  if (ps.left != 0)
    return WEFT_EBADFRAME; /* one value per reply */
  /* A count is bounded by the payload's bytes, which the codec bounds. */
  return ps.used > INT32_MAX ? WEFT_EBADFRAME : (int)ps.used;
}

int kv_reply_count(const weft_buf *payload) {
  return parse_root(payload, NULL, 0);
}

int kv_reply_parse(const weft_buf *payload, kv_reply *nodes, size_t max_nodes) {
  return parse_root(payload, nodes, max_nodes);
}

static void dup_size(const kv_reply *r, size_t *nodes, size_t *bytes) {
  if (r->tag == KV_TAG_ARRAY) {
    *nodes += r->len;
    for (size_t i = 0; i < r->len; i++)
      dup_size(&r->elem[i], nodes, bytes);
  } else {
    *bytes += r->len;
  }
}

typedef struct dup_state {
  kv_reply *nodes; /* next free node */
  uint8_t *bytes;  /* next free byte */
} dup_state;

static void dup_into(const kv_reply *r, kv_reply *to, dup_state *d) {
  *to = *r;
  if (r->tag == KV_TAG_ARRAY) {
    kv_reply *elem = d->nodes;
    d->nodes += r->len;
    to->elem = r->len > 0 ? elem : NULL;
    for (size_t i = 0; i < r->len; i++)
      dup_into(&r->elem[i], &elem[i], d);
  } else if (r->str != NULL) {
    if (r->len > 0)
      memcpy(d->bytes, r->str, r->len);
    to->str = d->bytes;
    d->bytes += r->len;
  }
}

kv_reply *kv_reply_dup(const kv_reply *r) {
  size_t nodes = 1, bytes = 0;
  dup_size(r, &nodes, &bytes);
  kv_reply *copy = malloc(nodes * sizeof *copy + bytes + 1);
  if (copy == NULL)
    return NULL;
  dup_state d = {.nodes = copy + 1, .bytes = (uint8_t *)(copy + nodes)};
  dup_into(r, copy, &d);
  return copy;
}

void kv_reply_free(kv_reply *r) { free(r); }

static bool reply_says(const kv_reply *r, const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; i + n <= r->len; i++)
    if (memcmp(r->str + i, text, n) == 0)
      return true;
  return false;
}

int kv_reply_error_code(const kv_reply *r) {
  if (!kv_reply_is_error(r))
    return 0;
  static const char *const denied[] = {"NOAUTH ", "WRONGPASS ", "DENIED "};
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
    if (r->len >= strlen(denied[i]) &&
        memcmp(r->str, denied[i], strlen(denied[i])) == 0)
      return WEFT_EACCES;
  static const int codes[] = {WEFT_EINVAL, WEFT_ERANGE, WEFT_EMSGSIZE};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (reply_says(r, kv_error_message(codes[i])))
      return codes[i];
  return reply_says(r, "syntax error") ? WEFT_EINVAL : WEFT_EPROTO;
}
