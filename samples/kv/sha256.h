/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/sha256.h: SHA-256 (FIPS 180-4), for the KV server's password
 * checks (auth.h): passwords are kept and compared as digests, so a
 * comparison takes the same time whatever their lengths. A small portable
 * implementation: weft links no crypto library. */
#ifndef WEFT_SAMPLES_KV_SHA256_H
#define WEFT_SAMPLES_KV_SHA256_H

#include <stddef.h>
#include <stdint.h>

/** Bytes of a digest. */
#define KV_SHA256_BYTES 32

/** Writes the SHA-256 digest of `len` bytes at `data` into `out`. */
void kv_sha256(const void *data, size_t len, uint8_t out[KV_SHA256_BYTES]);

#endif
