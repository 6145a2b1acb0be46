/* SPDX-License-Identifier: Apache-2.0 */
/* weft/error.h: error codes.
 *
 * Every weft function that can fail returns a negative error code (0 or a
 * positive count on success). System errors keep their errno value, negated
 * (WEFT_ECONNREFUSED == -ECONNREFUSED), so a code read from errno converts with
 * a minus sign. weft's own codes live below -4000 so they never collide with
 * errno. There is no "last error" state anywhere.
 *
 * One X-macro table generates the enum, weft_strerror() and weft_err_name()
 * (libuv's UV_ERRNO_MAP is the model).
 */
#ifndef WEFT_ERROR_H
#define WEFT_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* System errors: XX(name, message). The value is -name. */
#define WEFT_ERRNO_MAP(XX)                                                     \
  XX(EPERM, "operation not permitted")                                         \
  XX(ENOENT, "no such file or directory")                                      \
  XX(EINTR, "interrupted system call")                                         \
  XX(EIO, "i/o error")                                                         \
  XX(EBADF, "bad file descriptor")                                             \
  XX(EAGAIN, "resource temporarily unavailable")                               \
  XX(ENOMEM, "not enough memory")                                              \
  XX(EACCES, "permission denied")                                              \
  XX(EBUSY, "resource busy or locked")                                         \
  XX(EEXIST, "already exists")                                                 \
  XX(ENODEV, "no such device")                                                 \
  XX(EINVAL, "invalid argument")                                               \
  XX(EMFILE, "too many open files")                                            \
  XX(ENOSPC, "no space left")                                                  \
  XX(EPIPE, "broken pipe")                                                     \
  XX(ERANGE, "result out of range")                                            \
  XX(ENOSYS, "function not implemented")                                       \
  XX(EPROTO, "protocol error")                                                 \
  XX(EMSGSIZE, "message too long")                                             \
  XX(ENOTSUP, "operation not supported")                                       \
  XX(EAFNOSUPPORT, "address family not supported")                             \
  XX(EADDRINUSE, "address already in use")                                     \
  XX(EADDRNOTAVAIL, "address not available")                                   \
  XX(ENETUNREACH, "network is unreachable")                                    \
  XX(ECONNABORTED, "connection aborted")                                       \
  XX(ECONNRESET, "connection reset by peer")                                   \
  XX(ENOBUFS, "no buffer space available")                                     \
  XX(EISCONN, "socket is already connected")                                   \
  XX(ENOTCONN, "socket is not connected")                                      \
  XX(ETIMEDOUT, "connection timed out")                                        \
  XX(ECONNREFUSED, "connection refused")                                       \
  XX(EHOSTUNREACH, "host is unreachable")                                      \
  XX(EALREADY, "operation already in progress")                                \
  XX(EINPROGRESS, "operation in progress")                                     \
  XX(ECANCELED, "operation canceled")

/* weft's own errors: XX(name, value, message). */
#define WEFT_OWN_ERR_MAP(XX)                                                   \
  XX(ECLOSED, -4001, "channel or loop is closed")                              \
  XX(EBADCONF, -4002, "invalid configuration")                                 \
  XX(ETOOLONG, -4003, "frame longer than the configured maximum")              \
  XX(EBADFRAME, -4004, "malformed frame")                                      \
  XX(ENOTRANSPORT, -4005, "transport not available on this host")              \
  XX(ESTATE, -4006, "operation not allowed in the current state")              \
  XX(ELEAK, -4007, "buffers still referenced at shutdown")

/** Error codes. Always negative; 0 means success. */
typedef enum weft_errno {
#define WEFT__SYS_ERR(name, msg) WEFT_##name = -(name),
  WEFT_ERRNO_MAP(WEFT__SYS_ERR)
#undef WEFT__SYS_ERR
#define WEFT__OWN_ERR(name, val, msg) WEFT_##name = (val),
      WEFT_OWN_ERR_MAP(WEFT__OWN_ERR)
#undef WEFT__OWN_ERR
} weft_errno;

/**
 * A human-readable message for a weft error code ("connection refused").
 * Returns a static string; unknown codes give "unknown error". Any thread.
 */
const char *weft_strerror(int err);

/**
 * The symbolic name of a weft error code ("ECONNREFUSED"). Returns a static
 * string; unknown codes give "UNKNOWN". Any thread.
 */
const char *weft_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_ERROR_H */
