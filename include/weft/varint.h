/* SPDX-License-Identifier: Apache-2.0 */
/* weft/varint.h: unsigned LEB128 variable-length integers (protobuf's varint)
 * and ZigZag for signed values.
 *
 * A u64 takes 1 to 10 bytes, 7 bits per byte, least significant group
 * first; the high bit of each byte says "more follows". The decoder refuses
 * encodings longer than 10 bytes or above UINT64_MAX (WEFT_EBADFRAME), and
 * accepts non-minimal encodings (trailing 0x80 groups) as protobuf does.
 * Pure functions: any thread, no allocation.
 */
#ifndef WEFT_VARINT_H
#define WEFT_VARINT_H

#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Longest encoding of a u64, in bytes. */
#define WEFT_VARINT_MAX_BYTES 10

/** Bytes the encoding of `v` takes (1..10). */
size_t weft_varint_size(uint64_t v);

/**
 * Encodes `v` at `dst` (room for `cap` bytes). Returns the bytes written,
 * or WEFT_ENOSPC (nothing written) when it does not fit.
 */
int weft_varint_encode(uint8_t *dst, size_t cap, uint64_t v);

/**
 * Decodes one varint from the `len` bytes at `src`. Returns the bytes
 * consumed (1..10) with the value in `*out`; 0 when `src` ends inside the
 * varint (feed more bytes and call again from the same start);
 * WEFT_EBADFRAME when it is longer than 10 bytes or overflows 64 bits.
 */
int weft_varint_decode(const uint8_t *src, size_t len, uint64_t *out);

/** Appends `v` to `b`. Returns 0 or WEFT_ENOSPC (nothing written). */
int weft_buf_write_varint(weft_buf *b, uint64_t v);

/**
 * Reads a varint at `b`'s reader index and advances past it. Returns the
 * bytes consumed, 0 when incomplete (index unchanged), or WEFT_EBADFRAME.
 */
int weft_buf_read_varint(weft_buf *b, uint64_t *out);

/** ZigZag mapping of a signed value to an unsigned one (0,-1,1,-2 -> 0,1,2,3).
 */
static inline uint64_t weft_zigzag_encode(int64_t v) {
  return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/** The inverse of weft_zigzag_encode(). */
static inline int64_t weft_zigzag_decode(uint64_t v) {
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

#ifdef __cplusplus
}
#endif
#endif /* WEFT_VARINT_H */
