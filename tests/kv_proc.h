/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server as a child process, for the tests that measure it from
 * outside with plain sockets (test_kv_hostile, test_kv_fairness): the
 * program is WEFT_KV_SERVER (set by tests/CMakeLists.txt), the transport
 * WEFT_TEST_TRANSPORT (tcp or uring). Test thread; failures fail the
 * check. */
#ifndef WEFT_TESTS_KV_PROC_H
#define WEFT_TESTS_KV_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/** A running server: its pid and RESP port. */
typedef struct kv_proc {
  pid_t pid;
  int port;
} kv_proc;

/**
 * Starts weft-kv-server with one loop, no RPC listener and RESP on a free
 * loopback port (read from its "resp on" line), plus `extra`: keys as
 * "section.key=value" separated by spaces, each passed with -o (at most
 * 3). `no_quarantine`: ASan frees at once in the server (quarantine 0),
 * so that its RSS measures weft, not ASan's quarantine; ignored without
 * ASan.
 */
kv_proc kv_proc_start(const char *extra, bool no_quarantine);

/** SIGTERM, then waits: the server must exit with status 0. */
void kv_proc_stop(kv_proc *s);

/** A blocking TCP connection to 127.0.0.1:`port`. */
int kv_proc_connect(int port);

#endif
