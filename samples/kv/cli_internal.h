/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/cli_internal.h: weft-kv's parts. cli.c parses the command
 * line, connects and runs one command, printing its reply as redis-cli;
 * cli_repl.c reads commands from a terminal (libedit: line editing,
 * history, help) or, one per line, from stdin that is not one, split by
 * redis-cli's quoting rules. Main thread only. */
#ifndef WEFT_SAMPLES_KV_CLI_INTERNAL_H
#define WEFT_SAMPLES_KV_CLI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/config.h>
#include <weft/loop.h>

#include "client.h"
#include "client_cluster.h"

/** A weft-kv session: where it connects, and the connection once made. */
typedef struct kv_cli {
  weft_loop_group *group;
  const char *uri;                     /* the endpoint, with its scheme */
  char addr[WEFT_CONFIG_URI_MAX + 32]; /* as the user names it: "host:port"
                                     for tcp, else with the scheme */
  kv_client_options co;                /* auth and TLS applied */
  bool cluster;                        /* --cluster */
  bool tls;                            /* --tls: WEFT_EPROTO is TLS's */
  int raw;                             /* -1 = by terminal, else --raw */
  unsigned long long timeout_ns;       /* per call; 0 = none */
  kv_client *c;                        /* NULL until connected */
  kv_cluster_client *cc;               /* the same, with --cluster */
} kv_cli;

/**
 * Connects unless connected, then (without --cluster) checks with a PING
 * that the server speaks weft RPC. Prints why it failed unless `quiet`.
 * Returns 0 or the error.
 */
int kv_cli_connect(kv_cli *s, bool quiet);

/** Closes the connection, if any; the next command connects again. */
void kv_cli_disconnect(kv_cli *s);

/**
 * Runs the command in argv[0] with the arguments after it and prints the
 * reply as redis-cli (raw when s->raw says so or stdout is not a
 * terminal). Returns 0 for a reply, 1 for an error reply, 2 when no
 * reply came (the call failed: printed, the connection closed), 3 for a
 * name that is no command of weft RPC (printed as an error reply).
 */
int kv_cli_send(kv_cli *s, size_t argc, const kv_arg *argv);

/**
 * Splits a line into words in place by redis-cli's rules (its
 * sdssplitargs, as weft_resp_inline_arg reads them): blanks separate
 * words; "double quotes" take \n \r \t \b \a \\ \" and \xHH escapes;
 * 'single quotes' take \' only; a closing quote must end the word.
 * Returns the number of words with `*argv` (malloc'd, the caller frees
 * it; NULL for none) pointing into `line`, whose bytes are unescaped
 * (words may hold NUL bytes), or WEFT_EINVAL for unbalanced quotes,
 * WEFT_ENOMEM.
 */
int kv_cli_split(char *line, kv_arg **argv);

/** Interactive mode on a terminal (libedit): returns the exit status. */
int kv_cli_repl(kv_cli *s);

/** Commands from stdin, one per line: returns the exit status. */
int kv_cli_stdin(kv_cli *s);

#endif
