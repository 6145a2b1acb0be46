/* SPDX-License-Identifier: Apache-2.0 */
/* weft_buf: indices, bounds, typed access, reference counts, slices, wrap. */
#include "harness.h"

#include <string.h>

#include <weft/buf.h>
#include <weft/msg.h>

/* A pool with leak detection on, so every test's final destroy is a real
 * leak check. */
static weft_pool *new_pool(void) {
  weft_pool_options opts;
  weft_pool_options_init(&opts);
  opts.leak_detect = 1;
  weft_pool *pool = NULL;
  ck_assert_int_eq(weft_pool_new(&pool, &opts), 0);
  ck_assert_ptr_nonnull(pool);
  return pool;
}

static void assert_bytes(const uint8_t *got, const uint8_t *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "byte %zu: got 0x%02x, want 0x%02x", i,
                  got[i], want[i]);
}

/* ------------------------------------------------------------------------ */
/* Indices and bounds                                                        */

START_TEST(buf_indices_fresh_alloc) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 100);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(b->capacity, 256);
  ck_assert_uint_eq(b->reader_index, 0);
  ck_assert_uint_eq(b->writer_index, 0);
  ck_assert_uint_eq(weft_buf_readable(b), 0);
  ck_assert_uint_eq(weft_buf_writable(b), 256);
  ck_assert_ptr_eq(weft_buf_rptr(b), b->base);
  ck_assert_ptr_eq(weft_buf_wptr(b), b->base);
  ck_assert_uint_eq(weft_buf_refcnt(b), 1);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_indices_write_then_read) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "hello world", 11), 0);
  ck_assert_uint_eq(b->writer_index, 11);
  ck_assert_uint_eq(weft_buf_readable(b), 11);
  ck_assert_uint_eq(weft_buf_writable(b), 64 - 11);
  char out[6] = {0};
  ck_assert_int_eq(weft_buf_read_bytes(b, out, 5), 0);
  ck_assert_str_eq(out, "hello");
  ck_assert_uint_eq(b->reader_index, 5);
  ck_assert_uint_eq(weft_buf_readable(b), 6);
  ck_assert_ptr_eq(weft_buf_rptr(b), b->base + 5);
  ck_assert_ptr_eq(weft_buf_wptr(b), b->base + 11);
  weft_buf_clear(b);
  ck_assert_uint_eq(b->reader_index, 0);
  ck_assert_uint_eq(b->writer_index, 0);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_write_bytes_enospc_when_full) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  uint8_t fill[64];
  memset(fill, 0xAA, sizeof fill);
  ck_assert_int_eq(weft_buf_write_bytes(b, fill, 60), 0);
  uint8_t more[8];
  memset(more, 0x55, sizeof more);
  ck_assert_int_eq(weft_buf_write_bytes(b, more, 5), WEFT_ENOSPC);
  /* Nothing written: index unchanged and the tail still holds no 0x55. */
  ck_assert_uint_eq(b->writer_index, 60);
  for (size_t i = 60; i < 64; i++)
    ck_assert_uint_ne(b->base[i], 0x55);
  ck_assert_int_eq(weft_buf_write_bytes(b, more, 4), 0);
  ck_assert_uint_eq(weft_buf_writable(b), 0);
  ck_assert_int_eq(weft_buf_write_bytes(b, more, 0), 0);
  ck_assert_int_eq(weft_buf_write_bytes(NULL, more, 1), WEFT_EINVAL);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_read_bytes_erange_when_short) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "abc", 3), 0);
  char out[4] = {'x', 'x', 'x', 'x'};
  ck_assert_int_eq(weft_buf_read_bytes(b, out, 4), WEFT_ERANGE);
  ck_assert_uint_eq(b->reader_index, 0);
  ck_assert_int_eq(out[0], 'x');
  ck_assert_int_eq(weft_buf_read_bytes(b, out, 3), 0);
  ck_assert_int_eq(memcmp(out, "abc", 3), 0);
  ck_assert_int_eq(weft_buf_read_bytes(b, out, 1), WEFT_ERANGE);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Typed access against hand-computed byte patterns                          */

START_TEST(buf_typed_write_be_byte_pattern) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_u8(b, 0xA5), 0);
  ck_assert_int_eq(weft_buf_write_u16be(b, 0x0102), 0);
  ck_assert_int_eq(weft_buf_write_u32be(b, 0x03040506u), 0);
  ck_assert_int_eq(weft_buf_write_u64be(b, 0x0708090A0B0C0D0Eull), 0);
  const uint8_t want[] = {0xA5, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                          0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E};
  ck_assert_uint_eq(b->writer_index, sizeof want);
  assert_bytes(b->base, want, sizeof want);
  ck_assert_uint_eq(weft_buf_read_u8(b), 0xA5);
  ck_assert_uint_eq(weft_buf_read_u16be(b), 0x0102);
  ck_assert_uint_eq(weft_buf_read_u32be(b), 0x03040506u);
  ck_assert_uint_eq(weft_buf_read_u64be(b), 0x0708090A0B0C0D0Eull);
  ck_assert_uint_eq(b->reader_index, sizeof want);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_typed_write_le_byte_pattern) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_u16le(b, 0x0102), 0);
  ck_assert_int_eq(weft_buf_write_u32le(b, 0x03040506u), 0);
  ck_assert_int_eq(weft_buf_write_u64le(b, 0x0708090A0B0C0D0Eull), 0);
  const uint8_t want[] = {0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0E,
                          0x0D, 0x0C, 0x0B, 0x0A, 0x09, 0x08, 0x07};
  ck_assert_uint_eq(b->writer_index, sizeof want);
  assert_bytes(b->base, want, sizeof want);
  ck_assert_uint_eq(weft_buf_read_u16le(b), 0x0102);
  ck_assert_uint_eq(weft_buf_read_u32le(b), 0x03040506u);
  ck_assert_uint_eq(weft_buf_read_u64le(b), 0x0708090A0B0C0D0Eull);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_typed_get_set_absolute_index) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  memset(b->base, 0, b->capacity);
  /* Odd offsets: the accessors must not need alignment. */
  weft_buf_set_u8(b, 1, 0x7F);
  weft_buf_set_u16be(b, 3, 0xBEEF);
  weft_buf_set_u16le(b, 5, 0xBEEF);
  weft_buf_set_u32be(b, 7, 0xDEADBEEFu);
  weft_buf_set_u32le(b, 11, 0xDEADBEEFu);
  weft_buf_set_u64be(b, 17, 0x1122334455667788ull);
  weft_buf_set_u64le(b, 25, 0x1122334455667788ull);
  const uint8_t want[] = {0x00, 0x7F, 0x00, 0xBE, 0xEF, 0xEF, 0xBE, 0xDE, 0xAD,
                          0xBE, 0xEF, 0xEF, 0xBE, 0xAD, 0xDE, 0x00, 0x00, 0x11,
                          0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x88, 0x77,
                          0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  assert_bytes(b->base, want, sizeof want);
  ck_assert_uint_eq(weft_buf_get_u8(b, 1), 0x7F);
  ck_assert_uint_eq(weft_buf_get_u16be(b, 3), 0xBEEF);
  ck_assert_uint_eq(weft_buf_get_u16le(b, 5), 0xBEEF);
  ck_assert_uint_eq(weft_buf_get_u32be(b, 7), 0xDEADBEEFu);
  ck_assert_uint_eq(weft_buf_get_u32le(b, 11), 0xDEADBEEFu);
  ck_assert_uint_eq(weft_buf_get_u64be(b, 17), 0x1122334455667788ull);
  ck_assert_uint_eq(weft_buf_get_u64le(b, 25), 0x1122334455667788ull);
  /* A big-endian read of little-endian bytes gives the swapped value. */
  ck_assert_uint_eq(weft_buf_get_u32be(b, 11), 0xEFBEADDEu);
  /* get/set never move the indices. */
  ck_assert_uint_eq(b->reader_index, 0);
  ck_assert_uint_eq(b->writer_index, 0);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_typed_write_enospc_when_full) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  b->writer_index = 61; /* 3 writable bytes */
  b->base[61] = 0x11;
  ck_assert_int_eq(weft_buf_write_u32be(b, 0xFFFFFFFFu), WEFT_ENOSPC);
  ck_assert_int_eq(weft_buf_write_u64le(b, 0), WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, 61);
  ck_assert_uint_eq(b->base[61], 0x11);
  ck_assert_int_eq(weft_buf_write_u16be(b, 0x2233), 0);
  ck_assert_int_eq(weft_buf_write_u8(b, 0x44), 0);
  ck_assert_int_eq(weft_buf_write_u8(b, 0x55), WEFT_ENOSPC);
  ck_assert_uint_eq(b->writer_index, 64);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Reference counts                                                          */

START_TEST(buf_refcount_retain_release) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_eq(weft_buf_retain(b), b);
  ck_assert_ptr_eq(weft_buf_retain(b), b);
  ck_assert_uint_eq(weft_buf_refcnt(b), 3);
  weft_buf_release(b);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_buf_refcnt(b), 1);
  weft_pool_stats st;
  weft_pool_stats_get(pool, &st);
  ck_assert_uint_eq(st.live, 1);
  weft_buf_release(b);
  weft_pool_stats_get(pool, &st);
  ck_assert_uint_eq(st.live, 0);
  weft_buf_release(NULL); /* ignored */
  ck_assert_ptr_null(weft_buf_retain(NULL));
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Slices                                                                    */

START_TEST(buf_slice_shares_memory) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "0123456789", 10), 0);
  weft_buf *s = weft_buf_slice(b, 2, 5);
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_eq(s->base, b->base + 2);
  ck_assert_uint_eq(s->capacity, 5);
  ck_assert_uint_eq(s->reader_index, 0);
  ck_assert_uint_eq(s->writer_index, 5);
  ck_assert_uint_eq(weft_buf_refcnt(s), 1);
  ck_assert_uint_eq(weft_buf_refcnt(b), 2);
  /* A write through the parent shows through the slice, and back. */
  weft_buf_set_u8(b, 3, 'X');
  ck_assert_uint_eq(weft_buf_get_u8(s, 1), 'X');
  weft_buf_set_u8(s, 4, 'Y');
  ck_assert_uint_eq(weft_buf_get_u8(b, 6), 'Y');
  weft_buf_release(s);
  ck_assert_uint_eq(weft_buf_refcnt(b), 1);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_slice_keeps_parent_after_parent_release) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "abcdefgh", 8), 0);
  weft_buf *s = weft_buf_slice(b, 4, 4);
  ck_assert_ptr_nonnull(s);
  weft_buf_release(b);
  /* The parent's block must not be back on the free list: a new
   * allocation of the same class gets other memory. */
  weft_buf *other = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(other);
  ck_assert_ptr_ne(other->base, s->base - 4);
  ck_assert_int_eq(memcmp(s->base, "efgh", 4), 0);
  weft_pool_stats st;
  weft_pool_stats_get(pool, &st);
  ck_assert_uint_eq(st.live, 3); /* parent, slice, other */
  weft_buf_release(s);
  weft_pool_stats_get(pool, &st);
  ck_assert_uint_eq(st.live, 1); /* the slice freed the parent */
  weft_buf_release(other);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_slice_of_slice_holds_root) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "0123456789", 10), 0);
  weft_buf *s1 = weft_buf_slice(b, 2, 6); /* "234567" */
  ck_assert_ptr_nonnull(s1);
  weft_buf *s2 = weft_buf_slice(s1, 1, 3); /* "345" */
  ck_assert_ptr_nonnull(s2);
  ck_assert_ptr_eq(s2->base, b->base + 3);
  ck_assert_int_eq(memcmp(s2->base, "345", 3), 0);
  /* s2 references the root, not s1. */
  ck_assert_uint_eq(weft_buf_refcnt(b), 3);
  ck_assert_uint_eq(weft_buf_refcnt(s1), 1);
  weft_buf_release(s1);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_buf_refcnt(s2), 1);
  ck_assert_int_eq(memcmp(s2->base, "345", 3), 0);
  weft_buf_release(s2);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_slice_out_of_range_null) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_null(weft_buf_slice(b, 60, 5));
  ck_assert_ptr_null(weft_buf_slice(b, 65, 0));
  ck_assert_ptr_null(weft_buf_slice(b, 1, SIZE_MAX)); /* offset+len wraps */
  ck_assert_ptr_null(weft_buf_slice(NULL, 0, 0));
  ck_assert_uint_eq(weft_buf_refcnt(b), 1);
  weft_buf *edge = weft_buf_slice(b, 60, 4); /* exactly to the end */
  ck_assert_ptr_nonnull(edge);
  weft_buf_release(edge);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(buf_read_slice_advances_reader) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_bytes(b, "headbody", 8), 0);
  b->reader_index = 4;
  weft_buf *s = weft_buf_read_slice(b, 3);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(b->reader_index, 7);
  ck_assert_uint_eq(weft_buf_readable(s), 3);
  ck_assert_int_eq(memcmp(weft_buf_rptr(s), "bod", 3), 0);
  /* Too few readable bytes: NULL and the index stays. */
  ck_assert_ptr_null(weft_buf_read_slice(b, 2));
  ck_assert_uint_eq(b->reader_index, 7);
  weft_buf_release(s);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Wrapped memory                                                            */

struct wrap_record {
  int calls;
  void *base;
  size_t capacity;
};

static void record_free(void *base, size_t capacity, void *arg) {
  struct wrap_record *r = arg;
  r->calls++;
  r->base = base;
  r->capacity = capacity;
}

START_TEST(buf_wrap_free_cb_once_at_last_release) {
  weft_pool *pool = new_pool();
  uint8_t mem[100] = "payload";
  struct wrap_record rec = {0};
  weft_buf *b = weft_buf_wrap(pool, mem, sizeof mem, 7, record_free, &rec);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_eq(b->base, mem);
  ck_assert_uint_eq(b->capacity, 100);
  ck_assert_uint_eq(b->reader_index, 0);
  ck_assert_uint_eq(b->writer_index, 7);
  weft_buf_retain(b);
  weft_buf *s = weft_buf_slice(b, 0, 3);
  ck_assert_ptr_nonnull(s);
  weft_buf_release(b);
  weft_buf_release(b);
  ck_assert_int_eq(rec.calls, 0); /* the slice still holds it */
  weft_buf_release(s);
  ck_assert_int_eq(rec.calls, 1);
  ck_assert_ptr_eq(rec.base, mem);
  ck_assert_uint_eq(rec.capacity, 100);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(rec.calls, 1);
}
END_TEST

START_TEST(buf_wrap_bad_arguments_null) {
  weft_pool *pool = new_pool();
  uint8_t mem[16];
  ck_assert_ptr_null(weft_buf_wrap(pool, mem, sizeof mem, 17, NULL, NULL));
  ck_assert_ptr_null(weft_buf_wrap(pool, NULL, 16, 0, NULL, NULL));
  ck_assert_ptr_null(weft_buf_wrap(NULL, mem, sizeof mem, 0, NULL, NULL));
  /* A NULL free_cb is allowed: nothing to call. */
  weft_buf *b = weft_buf_wrap(pool, mem, sizeof mem, 0, NULL, NULL);
  ck_assert_ptr_nonnull(b);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Buffers as pipeline messages                                              */

START_TEST(buf_msg_type_every_kind) {
  weft_pool *pool = new_pool();
  uint8_t ext[16];
  weft_buf *bufs[4];
  bufs[0] = weft_buf_alloc(pool, 64);
  bufs[1] = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS + 1);
  bufs[2] = weft_buf_wrap(pool, ext, sizeof ext, 0, NULL, NULL);
  bufs[3] = weft_buf_slice(bufs[0], 0, 8);
  for (int i = 0; i < 4; i++) {
    ck_assert_ptr_nonnull(bufs[i]);
    ck_assert_msg(weft_msg_is(bufs[i], &weft_buf_msg_type), "kind %d", i);
    ck_assert_str_eq(weft_msg_type_name(bufs[i]), "weft_buf");
  }
  /* weft_msg_release drops one reference, as weft_buf_release does. */
  weft_buf_retain(bufs[0]);
  weft_msg_release(bufs[0]);
  ck_assert_uint_eq(weft_buf_refcnt(bufs[0]), 2); /* caller + slice */
  for (int i = 3; i >= 0; i--)
    weft_msg_release(bufs[i]);
  /* A reused block is still a message. */
  weft_buf *again = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(again);
  ck_assert(weft_msg_is(again, &weft_buf_msg_type));
  weft_buf_release(again);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("buf");
  th_add_case(s, "indices", 0, buf_indices_fresh_alloc,
              buf_indices_write_then_read, buf_write_bytes_enospc_when_full,
              buf_read_bytes_erange_when_short, NULL);

  th_add_case(s, "typed", 0, buf_typed_write_be_byte_pattern,
              buf_typed_write_le_byte_pattern, buf_typed_get_set_absolute_index,
              buf_typed_write_enospc_when_full, NULL);

  th_add_case(s, "refcount", 0, buf_refcount_retain_release,
              buf_slice_shares_memory,
              buf_slice_keeps_parent_after_parent_release,
              buf_slice_of_slice_holds_root, buf_slice_out_of_range_null,
              buf_read_slice_advances_reader, NULL);

  th_add_case(s, "wrap", 0, buf_wrap_free_cb_once_at_last_release,
              buf_wrap_bad_arguments_null, buf_msg_type_every_kind, NULL);
  return s;
}
