/* SPDX-License-Identifier: Apache-2.0 */
/* A server program run as a process of its own, for the tests that measure
 * it from outside (its resident memory, its log):
 * samples/kv/tests/test_kv_hostile.c, tests/test_programs_hostile.c. */
#ifndef WEFT_TESTS_SERVER_PROC_H
#define WEFT_TESTS_SERVER_PROC_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct sp_server {
  pid_t pid;
  int port;  /* from the line naming its address */
  FILE *log; /* its stderr, read on by sp_log_wait */
} sp_server;

/**
 * Starts `argv` (argv[0] the program's path, NULL-terminated) with its
 * stderr on a pipe, and reads that until a line contains `marker`
 * followed by an address: the port is the number after the line's last
 * ':'. Under ASan the server's frees go back at once (quarantine 0), so
 * that its RSS measures weft, not ASan. Fails the check if no such line
 * comes before the program's stderr ends.
 */
sp_server sp_start(const char *const *argv, const char *marker);

/** SIGTERM, then waits; fails the check unless it exited with 0. */
void sp_stop(sp_server *s);

/**
 * Reads `s`'s log until a line contains `needle` (true) or `ms`
 * milliseconds pass or the log ends (false); with `ms` 0, only the lines
 * already there. Lines read are echoed to the test's stderr.
 */
bool sp_log_wait(sp_server *s, const char *needle, int ms);

#endif
