/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_script.h: the input of a script-driven fuzz target
 * (fuzz_ucx_header, fuzz_ucx_recv), read front to back: bytes and
 * big-endian 32-bit values, 0 past its end (so every input is a whole
 * script). */
#ifndef WEFT_TESTS_FUZZ_FUZZ_SCRIPT_H
#define WEFT_TESTS_FUZZ_FUZZ_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

/* The input, read front to back. */
typedef struct script {
  const uint8_t *p;
  size_t left;
} script;

/* The script's next byte, 0 past its end. */
static inline uint8_t take8(script *s) {
  if (s->left == 0)
    return 0;
  s->left--;
  return *s->p++;
}

/* The script's next 4 bytes, big-endian. */
static inline uint32_t take32(script *s) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v = v << 8 | take8(s);
  return v;
}

#endif
