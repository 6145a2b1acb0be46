/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS engine's BIOs over weft_bufs (see tls_handler.c for the whole).
 *
 * OpenSSL's memory BIO costs two copies and two memsets per record here:
 * received ciphertext was copied into it (BUF_MEM_grow_clean zeroes every
 * growth first), and the records OpenSSL wrote were copied out of it into
 * the buffers handed down. These BIOs keep buffers instead:
 *
 *   read side   a FIFO of received buffers, kept as they came; small or
 *               mostly empty ones are copied into buffers of ours, filled
 *               before the next, so what is held stays near the bytes
 *               (a flood of tiny reads does not pin a pool block each);
 *               except one that the handler decrypts at once with
 *               nothing else held. OpenSSL reads from them.
 *   write side  OpenSSL's records are appended into pool buffers of up to
 *               WEFT_POOL_MAX_CLASS bytes that the handler takes whole.
 *
 * An empty read side answers "retry" (more later, not end of file), as
 * BIO_set_mem_eof_return(-1) did. BIO_number_written still counts the
 * ciphertext OpenSSL wrote (the BIO layer keeps it for every method). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>

#include <weft/buf.h>
#include <weft/error.h>

#include "handlers/tls_internal.h"

#define SMALL_IN 2048u   /* received buffers below this are copied, merged */
#define MERGE_CAP 16384u /* the capacity of a buffer small ones go into */
#define OUT_MIN 4096u    /* the smallest buffer records are written into */
#define OUT_MAX WEFT_POOL_MAX_CLASS

/* One BIO's buffers. */
typedef struct bufq {
  weft__tls_handler *s; /* for the pool (the channel's loop) */
  weft__tls_fifo bufs;  /* weft_buf *, oldest first */
  size_t bytes;         /* readable bytes in all of them */
  bool tail_ours;       /* the last buffer is ours to append to */
} bufq;

static BIO_METHOD *method;
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

static weft_buf *front(const bufq *q) {
  weft_buf **p = weft__tls_fifo_at(&q->bufs, 0);
  return p ? *p : NULL;
}

static weft_buf *back(const bufq *q) {
  weft_buf **p =
      q->bufs.len > 0 ? weft__tls_fifo_at(&q->bufs, q->bufs.len - 1) : NULL;
  return p ? *p : NULL;
}

static void drop_front(bufq *q) {
  weft_buf *b;
  if (weft__tls_fifo_pop(&q->bufs, &b))
    weft_buf_release(b);
  if (q->bufs.len == 0)
    q->tail_ours = false;
}

static void clear(bufq *q) {
  while (q->bufs.len > 0)
    drop_front(q);
  q->bytes = 0;
}

/* Appends `n` bytes into the last buffer if it is ours and has room, then
 * into new ones: of `min` bytes for fewer than that, else of the largest
 * class (records of 16 KiB fill 64 KiB buffers, and what spills over
 * starts the next one). Returns 0 or WEFT_ENOMEM. */
static int append_copy(bufq *q, const void *p, size_t n, size_t min) {
  const unsigned char *c = p;
  size_t cap = n < min ? min : OUT_MAX;
  while (n > 0) {
    weft_buf *t = q->tail_ours ? back(q) : NULL;
    if (t == NULL || weft_buf_writable(t) == 0) {
      t = weft_buf_alloc(weft__tls_pool(q->s), cap);
      if (t == NULL)
        return WEFT_ENOMEM;
      if (weft__tls_fifo_push(&q->bufs, &t) < 0) {
        weft_buf_release(t);
        return WEFT_ENOMEM;
      }
      q->tail_ours = true;
    }
    size_t k = weft_buf_writable(t) < n ? weft_buf_writable(t) : n;
    memcpy(weft_buf_wptr(t), c, k);
    t->writer_index += k;
    q->bytes += k;
    c += k;
    n -= k;
  }
  return 0;
}

/* OpenSSL reads received ciphertext. */
static int bio_read(BIO *bio, char *out, int len) {
  bufq *q = BIO_get_data(bio);
  BIO_clear_retry_flags(bio);
  if (q->bytes == 0) {
    BIO_set_retry_read(bio);
    return -1;
  }
  size_t want = len > 0 ? (size_t)len : 0, got = 0;
  weft_buf *b;
  while (got < want && (b = front(q)) != NULL) {
    size_t k = weft_buf_readable(b);
    if (k > want - got)
      k = want - got;
    memcpy(out + got, weft_buf_rptr(b), k);
    b->reader_index += k;
    got += k;
    q->bytes -= k;
    if (weft_buf_readable(b) == 0)
      drop_front(q);
  }
  return (int)got;
}

/* OpenSSL writes records. */
static int bio_write(BIO *bio, const char *in, int len) {
  bufq *q = BIO_get_data(bio);
  BIO_clear_retry_flags(bio);
  if (len <= 0)
    return 0;
  return append_copy(q, in, (size_t)len, OUT_MIN) < 0 ? -1 : len;
}

/* OpenSSL asks ~6 of these per record (kTLS, pending, flush...): the
 * queue is looked up only for the two that need it. */
static long bio_ctrl(BIO *bio, int cmd, long num, void *ptr) {
  (void)num, (void)ptr;
  switch (cmd) {
  case BIO_CTRL_PENDING:
    return (long)((bufq *)BIO_get_data(bio))->bytes;
  case BIO_CTRL_RESET:
    clear(BIO_get_data(bio));
    return 1;
  case BIO_CTRL_FLUSH: /* the handler hands records down itself */
    return 1;
  case BIO_CTRL_EOF:
    return 0; /* never the end: more may come */
  default:
    return 0;
  }
}

static int bio_destroy(BIO *bio) {
  bufq *q = BIO_get_data(bio);
  if (q != NULL) {
    clear(q);
    free(q->bufs.slots);
    free(q);
    BIO_set_data(bio, NULL);
  }
  return 1;
}

static void make_method(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                               "weft_buf queue");
  if (m == NULL || BIO_meth_set_read(m, bio_read) != 1 ||
      BIO_meth_set_write(m, bio_write) != 1 ||
      BIO_meth_set_ctrl(m, bio_ctrl) != 1 ||
      BIO_meth_set_destroy(m, bio_destroy) != 1) {
    BIO_meth_free(m);
    return;
  }
  method = m;
}

BIO *weft__tls_bio_new(weft__tls_handler *s) {
  pthread_once(&method_once, make_method);
  if (method == NULL)
    return NULL;
  bufq *q = calloc(1, sizeof *q);
  BIO *bio = q ? BIO_new(method) : NULL;
  if (bio == NULL) {
    free(q);
    return NULL;
  }
  q->s = s;
  q->bufs.elem = sizeof(weft_buf *);
  BIO_set_data(bio, q);
  BIO_set_init(bio, 1);
  return bio;
}

int weft__tls_bio_put(BIO *bio, weft_buf *b, bool read_now) {
  bufq *q = BIO_get_data(bio);
  size_t n = weft_buf_readable(b);
  int rc = 0;
  if (n == 0) {
    weft_buf_release(b);
  } else if ((n < SMALL_IN || n < b->capacity / 4) &&
             !(read_now && q->bufs.len == 0)) {
    /* Kept, it would pin up to 4x its bytes: a peer trickling small
     * segments while the channel does not read would hold pool blocks
     * far beyond WEFT_TLS_MAX_BUFFERED_BYTES. When the handler decrypts
     * at once and holds nothing else (a 16 B round trip's records), it
     * is read where it came (OpenSSL takes even a partial record into
     * its own buffer): no allocation and copy per receive, and at most
     * one small buffer is ever kept, since the next one is copied. */
    rc = append_copy(q, weft_buf_rptr(b), n, MERGE_CAP);
    weft_buf_release(b);
  } else if (weft__tls_fifo_push(&q->bufs, &b) < 0) {
    weft_buf_release(b);
    rc = WEFT_ENOMEM;
  } else {
    q->bytes += n;
    q->tail_ours = false; /* the transport's: never written into */
  }
  return rc;
}

size_t weft__tls_bio_pending(BIO *bio) {
  const bufq *q = BIO_get_data(bio);
  return q->bytes;
}

weft_buf *weft__tls_bio_take(BIO *bio, bool partial) {
  bufq *q = BIO_get_data(bio);
  weft_buf *b = front(q);
  if (b == NULL || (!partial && q->bufs.len == 1 && q->tail_ours &&
                    weft_buf_writable(b) > 0))
    return NULL;
  weft__tls_fifo_pop(&q->bufs, &b);
  if (q->bufs.len == 0)
    q->tail_ours = false;
  q->bytes -= weft_buf_readable(b);
  return b;
}
