/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-server as a process of its own, for the tests that measure it
 * from outside (test_kv_hostile.c, test_kv_limits.c): started from
 * WEFT_KV_SERVER (set by tests/CMakeLists.txt) over WEFT_TEST_TRANSPORT
 * with RESP on a free loopback port, its stderr in a file the test can
 * read, its resident memory from /proc. */
#ifndef WEFT_TESTS_KV_PROCESS_H
#define WEFT_TESTS_KV_PROCESS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct kv_process {
  pid_t pid;
  int port;     /* RESP's */
  int rpc_port; /* weft RPC's, when `extra` set kv.rpc_listen; else 0 */
  char log[64]; /* the file its stderr goes to */
} kv_process;

/**
 * Starts weft-kv-server with one loop, RPC off and RESP on 127.0.0.1:0,
 * then the space-separated section.key=value settings of `extra` (each
 * passed as -o; at most 24), and waits for its listening lines. Under ASan
 * its quarantine is 0, so RSS measures weft, not freed blocks held back.
 */
kv_process kv_process_start(const char *extra);

/** SIGTERM, and checks it ended with status 0; removes the log file. */
void kv_process_stop(kv_process *p);

/** Lines of the server's log so far that contain `text`. */
int kv_process_log_count(const kv_process *p, const char *text);

#endif
