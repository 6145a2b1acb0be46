/* SPDX-License-Identifier: Apache-2.0 */
/* Unsigned LEB128 varints. */
#include <weft/error.h>
#include <weft/varint.h>

size_t weft_varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

int weft_varint_encode(uint8_t *dst, size_t cap, uint64_t v) {
  size_t n = weft_varint_size(v);
  if (n > cap)
    return WEFT_ENOSPC;
  for (size_t i = 0; i + 1 < n; i++) {
    dst[i] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  dst[n - 1] = (uint8_t)v;
  return (int)n;
}

int weft_varint_decode(const uint8_t *src, size_t len, uint64_t *out) {
  uint64_t v = 0;
  for (size_t i = 0; i < WEFT_VARINT_MAX_BYTES; i++) {
    if (i == len)
      return 0;
    uint64_t group = src[i] & 0x7f;
    /* The tenth byte holds bit 63 only. */
    if (i == WEFT_VARINT_MAX_BYTES - 1 && group > 1)
      return WEFT_EBADFRAME;
    v |= group << (7 * i);
    if ((src[i] & 0x80) == 0) {
      *out = v;
      return (int)i + 1;
    }
  }
  return WEFT_EBADFRAME;
}

int weft_buf_write_varint(weft_buf *b, uint64_t v) {
  int n = weft_varint_encode(weft_buf_wptr(b), weft_buf_writable(b), v);
  if (n < 0)
    return n;
  b->writer_index += (size_t)n;
  return 0;
}

int weft_buf_read_varint(weft_buf *b, uint64_t *out) {
  int n = weft_varint_decode(weft_buf_rptr(b), weft_buf_readable(b), out);
  if (n > 0)
    b->reader_index += (size_t)n;
  return n;
}
