/* SPDX-License-Identifier: Apache-2.0 */
/* weft/cli.h: one command-line front door for every weft program.
 *
 * Every program takes the same four options, parsed the same way, and
 * answers --help and --version the same way:
 *
 *   -c FILE              an INI config file (config.h)
 *   -o section.key=value one key, after the file and the WEFT_* variables;
 *                        the key is what follows the last dot before '='
 *                        (-o transport.ucx.tls=tcp)
 *   -h, --help           usage, every key the program reads with its
 *                        default and valid values, two examples; exit 0
 *   -V, --version        "<prog> (weft) MAJOR.MINOR.PATCH" and the
 *                        license; exit 0
 *                        (--help only for a program that sets
 *                        `help_long_only` to keep -h for itself, as
 *                        weft-kv keeps it for redis-cli's -h HOST)
 *
 * A program keeps its own getopt loop for its own flags and hands -c and
 * -o to the helper:
 *
 *   weft_cli cli = {.prog = "weft-echo", .synopsis = "[options] server",
 *                   .about = "...", .examples = "weft-echo demo\n..."};
 *   weft_config cfg;
 *   weft_config_init(&cfg);               // then the program's defaults
 *   opterr = 0;                           // weft_cli reports
 *   while ((opt = getopt_long(argc, argv, ":" WEFT_CLI_OPTS "x:", longs,
 *                             NULL)) != -1) {
 *     if (opt == 'h')
 *       return weft_cli_help(&cli, &cfg, stdout), 0;
 *     if (opt == 'V')
 *       return weft_cli_version(&cli, stdout), 0;
 *     if (weft_cli_option(&cli, opt, optarg) != 0)
 *       continue;                          // -c or -o, taken
 *     if (opt == 'x') ...                  // the program's own flags
 *     else
 *       return weft_cli_bad_option(&cli, opt, argv[optind - 1]), 2;
 *   }
 *   if (weft_cli_configure(&cli, &cfg) < 0)
 *     return 2;                            // the message is printed
 *
 * Errors are printed as "<prog>: <message>", where a config error names
 * its origin ("weft.ini:3: ...", "WEFT_LOOP_LOOPS: ...", "-o spec: ...")
 * and the valid values, so every program reports a bad key the same way.
 *
 * Threads: the main thread, before any loop starts (plugin settings are
 * process-wide).
 */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
/* sigset_t: POSIX defines it here too, where strict ISO C (-std=c17,
 * no feature macro) still sees it; <signal.h> then does not declare it. */
#include <sys/select.h>

#include <weft/config.h>
#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The getopt letters of weft's options: put them in the program's
 *  optstring, and WEFT_CLI_LONG_OPTS in its long options. weft_cli_option
 *  takes 'c' and 'o'; the program answers 'h' (weft_cli_help) and 'V'
 *  (weft_cli_version). */
#define WEFT_CLI_OPTS WEFT_CLI_OPTS_NO_H "h"

/** WEFT_CLI_OPTS without -h, for a program that sets `help_long_only`
 *  and gives -h a meaning of its own: its long options then map "help" to
 *  a value that is not 'h' (weft-kv: -h HOST, as redis-cli). */
#define WEFT_CLI_OPTS_NO_H "c:o:V"

/** The long options of weft's options, two `struct option` entries
 *  (<getopt.h>) for the program's table: --help ('h') and --version
 *  ('V'). */
#define WEFT_CLI_LONG_OPTS                                                     \
  {"help", no_argument, NULL, 'h'}, { "version", no_argument, NULL, 'V' }

/** -o flags one command line may carry. */
#define WEFT_CLI_MAX_OVERRIDES 64

/** A program's command line. Set the public fields; zero the rest. */
typedef struct weft_cli {
  /* public */
  const char *prog;            /* name in messages: "weft-kv-server" */
  const char *synopsis;        /* what follows the name in the usage line:
                                  "[options] COMMAND [ARG ...]" */
  const char *about;           /* what the program does, a paragraph */
  const char *flags;           /* the program's own flags, one per line as
                                  "  --name VALUE   what it does", or NULL */
  const char *examples;        /* at least two command lines, one per line */
  const char *const *sections; /* the sections the program reads, weft's
                                  ("loop", "transport", "server",
                                  "client") and its own ("kv"), for
                                  --help and to refuse (-o) or warn of
                                  (file, environment) a key of another
                                  section; NULL-terminated; NULL = all */
  const char *const *unread;   /* keys of those sections the program does
                                  not use, "section.key=what it reads
                                  instead", NULL-terminated, or NULL
                                  (weft_config.unread_keys) */
  weft_config_section_cb app;  /* the application's sections, or NULL */
  void *app_arg;               /* app's argument */
  bool help_long_only;         /* -h is the program's own (its optstring
                                  uses WEFT_CLI_OPTS_NO_H): --help lists
                                  only --help, and the program documents
                                  its -h in `flags` */
  /* private: what weft_cli_option collected */
  const char *file;
  const char *overrides[WEFT_CLI_MAX_OVERRIDES];
  int n_overrides;
} weft_cli;

/**
 * Takes one option from the program's getopt loop: 'c' (remembers the
 * file) and 'o' (remembers the flag; applied in order by
 * weft_cli_configure). Returns 1 when it took the option, 0 when `opt` is
 * not one of its letters (the program's own, or 'h' and 'V', which the
 * program answers with weft_cli_help and weft_cli_version), or WEFT_ENOSPC
 * after printing why (more than WEFT_CLI_MAX_OVERRIDES -o flags).
 */
int weft_cli_option(weft_cli *cli, int opt, const char *arg);

/**
 * Applies the configuration in order of precedence, lowest first: the file
 * from -c, the WEFT_* environment (weft_config_apply_env, for weft's keys,
 * the transports' and cfg->app_keys), then each -o in command-line order,
 * then checks the relations between keys. A key of a section the program
 * does not read, or one of its `unread` keys, is an error with -o and is
 * ignored with an info line (weft_log) from the file or the environment,
 * which a server and its clients may share; a WEFT_* variable that names
 * no setting (a misspelling) is warned of with the closest name, except
 * WEFT_LOG_LEVEL, WEFT_LEAK_DETECT, WEFT_BENCH_LOOP_STATS and WEFT_TEST_*.
 * Stops at the first error, which it prints as "<prog>: <message>" to stderr.
 * Returns 0, or the error (WEFT_EBADCONF, or the file's open error).
 */
int weft_cli_configure(weft_cli *cli, weft_config *cfg);

/**
 * Writes the help: the usage line, `about`, the options (weft's four and
 * the program's `flags`), every configuration key the program reads with
 * its value in `cfg` (pass the defaults) and its valid values
 * (weft_config_print), and the examples. Returns 0 or WEFT_EIO.
 */
int weft_cli_help(const weft_cli *cli, const weft_config *cfg, FILE *out);

/**
 * Writes the version, as GNU programs do (help2man reads it for the man
 * page): "<prog> (weft) MAJOR.MINOR.PATCH", the library's (weft_version()),
 * then the copyright and license lines. Returns 0 or WEFT_EIO.
 */
int weft_cli_version(const weft_cli *cli, FILE *out);

/**
 * Reports a command-line mistake the program found itself: prints
 * "<prog>: <message>", the usage line and "Try '<prog> --help'." to
 * stderr. The caller then exits with status 2.
 */
void weft_cli_usage_error(const weft_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * The whole front door for a program without flags of its own: parses
 * -c, -o, -h/--help and -V/--version from `argv` (getopt_long; GNU's
 * argument order, so options may follow positional arguments), then
 * weft_cli_configure. Returns the index in `argv` of the first positional
 * argument (argc when there is none) to run; 0 when --help or --version
 * was answered (exit 0); or -1 after
 * printing the error (exit 2). `cfg` holds the program's defaults on entry.
 */
int weft_cli_parse(weft_cli *cli, weft_config *cfg, int argc, char **argv);

/**
 * Reports an option getopt refused, as weft_cli_usage_error does: `opt` is
 * what getopt returned (':' for a missing value, with the optstring
 * starting with ':'; anything else is an unknown option) and `text` the
 * argument as typed (argv[optind - 1]).
 */
void weft_cli_bad_option(const weft_cli *cli, int opt, const char *text);

/**
 * Makes and starts the program's loops: weft_loop_group_new with `opts`
 * (cfg.loop, as configured), then weft_loop_group_start. A server that
 * stops on SIGINT or SIGTERM passes `stop`: both are then blocked in the
 * calling thread first, so that every loop thread inherits the mask and
 * the signal waits for weft_cli_wait_stop (a handler with pause() would
 * miss a signal the kernel delivers to a loop thread), and `*stop` is set
 * to them; NULL leaves the signals alone. Returns 0 with `*out` the
 * running group, which the caller stops, joins and frees; or the weft
 * error of either step, having printed "<prog>: loops: <error>" to stderr
 * and freed what it made (`*out` is then undefined). Main thread.
 */
int weft_cli_loops_start(const weft_cli *cli, const weft_loop_options *opts,
                         sigset_t *stop, weft_loop_group **out);

/**
 * Waits (sigwait) until one of the blocked signals in `stop` is pending
 * and takes it; returns its number. Main thread, after
 * weft_cli_loops_start with `stop`.
 */
int weft_cli_wait_stop(const sigset_t *stop);

/**
 * At WEFT_LOG_LEVEL=debug only (an operator's stop needs no such lines),
 * prints each loop's selector counters to stderr, one line per loop:
 * "<prog>: loop <i>: " and weft_loop_stats_format's pairs. For benchmark
 * logs: the busy-poll window's hits, misses and spin time, the sleeps and
 * wake-ups of a run. Call it before weft_loop_group_stop, so the counters
 * are the run's and not the shutdown's. Main thread.
 */
void weft_cli_log_loop_stats(const weft_cli *cli, weft_loop_group *group);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CLI_H */
