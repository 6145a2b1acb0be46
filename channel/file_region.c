/* SPDX-License-Identifier: Apache-2.0 */
/* File regions (weft/file_region.h): the message, its pread fallback and
 * the process-wide counts of which path sent its bytes. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <weft/error.h>
#include <weft/file_region.h>

#include "channel/channel_internal.h"

static _Atomic uint64_t sent_bytes, read_bytes; /* relaxed: counters */

static void region_msg_release(void *msg) { weft_file_region_release(msg); }

const weft_msg_type weft_file_region_type = {"weft_file_region",
                                             region_msg_release};

int weft_file_region_new(weft_file_region **out, int fd, uint64_t position,
                         uint64_t count, unsigned flags) {
  *out = NULL;
  if (fd < 0 || (flags & ~WEFT_FILE_REGION_CLOSE_FD) != 0 ||
      position > INT64_MAX || count > INT64_MAX - position)
    return WEFT_EINVAL;
  weft_file_region *r = malloc(sizeof *r);
  if (r == NULL)
    return WEFT_ENOMEM;
  *r = (weft_file_region){.msg.type = &weft_file_region_type,
                          .fd = fd,
                          .position = position,
                          .count = count,
                          .close_fd = (flags & WEFT_FILE_REGION_CLOSE_FD) != 0};
  *out = r;
  return 0;
}

void weft_file_region_release(weft_file_region *r) {
  if (r == NULL)
    return;
  if (r->close_fd)
    close(r->fd);
  free(r);
}

int weft_file_region_read(weft_file_region *r, weft_pool *pool, size_t max,
                          weft_buf **out) {
  *out = NULL;
  uint64_t left = weft_file_region_left(r);
  size_t want = max < WEFT_POOL_MAX_CLASS ? max : WEFT_POOL_MAX_CLASS;
  if (left < want)
    want = (size_t)left;
  weft_buf *b = weft_buf_alloc(pool, want);
  if (b == NULL)
    return WEFT_ENOMEM;
  size_t got = 0;
  while (got < want) { /* pread may return less than asked: go on */
    ssize_t n = pread(r->fd, weft_buf_wptr(b) + got, want - got,
                      (off_t)(r->position + r->transferred + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n == 0 ? WEFT_EIO : -errno; /* 0: the file ends early */
      weft_buf_release(b);
      return err;
    }
    got += (size_t)n;
  }
  b->writer_index += got;
  r->transferred += got;
  atomic_fetch_add_explicit(&read_bytes, got, memory_order_relaxed);
  *out = b;
  return 0;
}

void weft__file_region_count_sent(uint64_t bytes) {
  atomic_fetch_add_explicit(&sent_bytes, bytes, memory_order_relaxed);
}

void weft_file_region_stats_get(weft_file_region_stats *out) {
  out->sent_bytes = atomic_load_explicit(&sent_bytes, memory_order_relaxed);
  out->read_bytes = atomic_load_explicit(&read_bytes, memory_order_relaxed);
}

const char *weft_file_region_failure(char *buf, size_t size,
                                     const weft_file_region *r,
                                     const char *what, int err) {
  bool shrank = err == WEFT_EIO;
  snprintf(buf, size,
           "file region of fd %d: %s at offset %llu: %s, %llu bytes of the "
           "region left%s",
           r->fd, what, (unsigned long long)(r->position + r->transferred),
           shrank ? "the file ended early" : weft_strerror(err),
           (unsigned long long)weft_file_region_left(r),
           shrank ? " (did it shrink?)" : "");
  return buf;
}
