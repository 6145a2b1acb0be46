/* SPDX-License-Identifier: Apache-2.0 */
/* The input loop of the fuzz targets that drive an embedded channel. */
#ifndef WEFT_TESTS_FUZZ_FEED_H
#define WEFT_TESTS_FUZZ_FEED_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <weft/weft.h>

/* Feeds `size` bytes into `e` in reads of 1 to 64 bytes cut by `seed` (so
 * the fuzzer explores split points as well as contents), releasing what
 * reached the tail and what was flushed out after each read; stops when
 * the channel closed. */
static inline void fuzz_feed(weft_embedded *e, const uint8_t *data, size_t size,
                             unsigned seed) {
  size_t off = 0;
  while (off < size) {
    seed = seed * 1103515245u + 12345u;
    size_t n = 1 + (seed >> 16) % 64;
    if (n > size - off)
      n = size - off;
    if (weft_embedded_write_inbound_bytes(e, data + off, n) != 0)
      break; /* closed on an error */
    off += n;
    void *m;
    while ((m = weft_embedded_read_inbound(e)) != NULL)
      weft_msg_release(m);
    while ((m = weft_embedded_read_outbound(e)) != NULL)
      weft_msg_release(m);
  }
}

static void fuzz_quiet(weft_log_level level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

/* One fuzz input: its first byte seeds the cuts and reaches `init` as its
 * argument (a const uint8_t *); the rest is fed to an embedded channel
 * built by `init` (a byte stream when `stream`). Logs are silenced (every
 * bad input is logged); a leaked buffer aborts: a finding. */
static inline int fuzz_run(const uint8_t *data, size_t size,
                           weft_channel_init_cb init, bool stream) {
  if (size == 0)
    return 0;
  weft_log_set_handler(fuzz_quiet, NULL);
  weft_embedded *e;
  if (weft_embedded_new(&e, init, (void *)data) != 0)
    abort();
  weft_embedded_set_stream(e, stream);
  fuzz_feed(e, data + 1, size - 1, data[0] | 1u);
  if (weft_embedded_free(e) != 0)
    abort(); /* leaked buffers */
  return 0;
}

#endif /* WEFT_TESTS_FUZZ_FEED_H */
