/* SPDX-License-Identifier: Apache-2.0 */
/* The command-line front door (weft/cli.h) and the configuration printer
 * (weft_config_print) that --help shows. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <weft/cli.h>
#include <weft/config.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/transport_plugin.h>
#include <weft/version.h>

#include "config/config_internal.h"

/* ---- the configuration as an INI file ---- */

static bool wanted(const char *const *sections, const char *name) {
  if (sections == NULL)
    return true;
  for (size_t i = 0; sections[i] != NULL; i++)
    if (strcmp(sections[i], name) == 0)
      return true;
  return false;
}

/* "; <values>" then "key = value", the comment first so the file stays
 * valid for any INI reader. */
static void print_key(FILE *out, const char *name, const char *value,
                      const char *values) {
  fprintf(out, "; %s\n%s = %s\n", values, name, value);
}

static void print_weft_section(FILE *out, const weft_config *cfg,
                               const weft__section_def *s) {
  fprintf(out, "\n[%s]\n", s->name);
  for (size_t j = 0; j < s->n_keys; j++) {
    if (weft__config_unread(cfg, s->name, s->keys[j].name) != NULL)
      continue;
    char value[WEFT_CONFIG_URI_MAX], values[512];
    weft__config_value_text(cfg, &s->keys[j], value, sizeof value);
    weft__config_values_text(&s->keys[j], values, sizeof values);
    print_key(out, s->keys[j].name, value, values);
  }
}

/* A plugin's settings live in the plugin, not in `cfg`: their defaults. */
static void print_plugin_section(FILE *out, const weft_transport_ops *ops) {
  fprintf(out, "\n[transport.%s]\n", ops->name);
  print_key(out, "fallback", "none",
            "another transport's name, used where this one cannot run, or "
            "none");
  for (const weft_transport_key *k = ops->config_keys; k != NULL && k->name;
       k++)
    print_key(out, k->name, k->def, k->values);
}

static void print_app_keys(FILE *out, const weft_config *cfg,
                           const char *const *sections) {
  const char *shown = NULL; /* the section whose header is out */
  for (const weft_config_key *k = cfg->app_keys; k != NULL && k->section; k++) {
    if (!wanted(sections, k->section) ||
        weft__config_unread(cfg, k->section, k->name) != NULL)
      continue;
    if (shown == NULL || strcmp(shown, k->section) != 0)
      fprintf(out, "\n[%s]\n", k->section);
    shown = k->section;
    print_key(out, k->name, k->def, k->values);
  }
}

int weft_config_print(const weft_config *cfg, const char *const *sections,
                      FILE *out) {
  size_t n;
  const weft__section_def *s = weft__config_sections(&n);
  for (size_t i = 0; i < n; i++)
    if (wanted(sections, s[i].name))
      print_weft_section(out, cfg, &s[i]);
  if (wanted(sections, "transport")) {
    const weft_transport_ops *ops;
    for (size_t i = 0; (ops = weft_transport_at(i)) != NULL; i++)
      print_plugin_section(out, ops);
  }
  print_app_keys(out, cfg, sections);
  return ferror(out) ? WEFT_EIO : 0;
}

/* ---- the command line ---- */

int weft_cli_option(weft_cli *cli, int opt, const char *arg) {
  if (opt == 'c') {
    cli->file = arg;
    return 1;
  }
  if (opt != 'o')
    return 0;
  if (cli->n_overrides == WEFT_CLI_MAX_OVERRIDES) {
    fprintf(stderr, "%s: more than %d -o options\n", cli->prog,
            WEFT_CLI_MAX_OVERRIDES);
    return WEFT_ENOSPC;
  }
  cli->overrides[cli->n_overrides++] = arg;
  return 1;
}

int weft_cli_configure(weft_cli *cli, weft_config *cfg) {
  char err[1024] = "";
  int rc = 0;
  cfg->read_sections = cli->sections;
  cfg->unread_keys = cli->unread;
  weft__config_env_check(cfg);
  if (cli->file != NULL)
    rc = weft_config_load(cfg, cli->file, cli->app, cli->app_arg, err,
                          sizeof err);
  if (rc == 0)
    rc = weft_config_apply_env(cfg, NULL, cli->app, cli->app_arg, err,
                               sizeof err);
  for (int i = 0; rc == 0 && i < cli->n_overrides; i++)
    rc = weft_config_set_option(cfg, cli->overrides[i], cli->app, cli->app_arg,
                                err, sizeof err);
  if (rc == 0 && cli->n_overrides > 0)
    rc = weft_config_check(cfg, "-o", err, sizeof err);
  if (rc < 0)
    fprintf(stderr, "%s: %s\n", cli->prog, err);
  return rc;
}

int weft_cli_help(const weft_cli *cli, const weft_config *cfg, FILE *out) {
  fprintf(out, "usage: %s %s\n\n%s\n\nOptions:\n", cli->prog, cli->synopsis,
          cli->about);
  fprintf(out,
          "  -c FILE                 read an INI config file (keys below)\n"
          "  -o section.key=value    set one key, after the file and the "
          "WEFT_* variables\n"
          "                          (the key follows the last dot: -o "
          "transport.ucx.tls=tcp)\n"
          "%s"
          "  -V, --version           the version of weft this program "
          "runs with\n",
          cli->help_long_only ? "  --help                  this text\n"
                              : "  -h, --help              this text\n");
  if (cli->flags != NULL)
    fprintf(out, "%s", cli->flags);
  fprintf(out,
          "\nConfiguration: every key %s reads, with its default, as an INI "
          "file.\nEach key can also be set as WEFT_<SECTION>_<KEY> in the "
          "environment\n(WEFT_LOOP_LOOPS=1, WEFT_TRANSPORT_UCX_TLS=tcp).\n",
          cli->prog);
  weft_config shown = *cfg; /* what the program reads, less unread keys */
  shown.read_sections = cli->sections;
  shown.unread_keys = cli->unread;
  int rc = weft_config_print(&shown, cli->sections, out);
  fprintf(out, "\nExamples:\n");
  const char *line = cli->examples;
  while (line != NULL && *line != '\0') {
    const char *nl = strchr(line, '\n');
    int len = nl != NULL ? (int)(nl - line) : (int)strlen(line);
    fprintf(out, "  %.*s\n", len, line);
    line = nl != NULL ? nl + 1 : NULL;
  }
  return rc == 0 && !ferror(out) ? 0 : WEFT_EIO;
}

int weft_cli_version(const weft_cli *cli, FILE *out) {
  fprintf(out,
          "%s (weft) %s\nCopyright The weft authors.\nLicensed under the "
          "Apache License, Version 2.0.\n",
          cli->prog, weft_version());
  return ferror(out) ? WEFT_EIO : 0;
}

void weft_cli_usage_error(const weft_cli *cli, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", cli->prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: %s %s\nTry '%s --help' for the options and keys.\n",
          cli->prog, cli->synopsis, cli->prog);
}

void weft_cli_bad_option(const weft_cli *cli, int opt, const char *text) {
  if (opt == ':')
    weft_cli_usage_error(cli, "option '%s' needs a value", text);
  else
    weft_cli_usage_error(cli, "unknown option '%s'", text);
}

int weft_cli_parse(weft_cli *cli, weft_config *cfg, int argc, char **argv) {
  static const struct option longs[] = {WEFT_CLI_LONG_OPTS, {NULL, 0, NULL, 0}};
  opterr = 0; /* refused options are reported here, in weft's form */
  int opt;
  while ((opt = getopt_long(argc, argv, ":" WEFT_CLI_OPTS, longs, NULL)) !=
         -1) {
    if (opt == 'h')
      return weft_cli_help(cli, cfg, stdout) == 0 ? 0 : -1;
    if (opt == 'V')
      return weft_cli_version(cli, stdout) == 0 ? 0 : -1;
    int rc = weft_cli_option(cli, opt, optarg);
    if (rc == 0)
      weft_cli_bad_option(cli, opt, argv[optind - 1]);
    if (rc <= 0)
      return -1;
  }
  return weft_cli_configure(cli, cfg) < 0 ? -1 : optind;
}

int weft_cli_loops_start(const weft_cli *cli, const weft_loop_options *opts,
                         sigset_t *stop, weft_loop_group **out) {
  if (stop != NULL) {
    sigemptyset(stop);
    sigaddset(stop, SIGINT);
    sigaddset(stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, stop, NULL);
  }
  int rc = weft_loop_group_new(out, opts);
  if (rc == 0 && (rc = weft_loop_group_start(*out)) < 0)
    weft_loop_group_free(*out);
  if (rc < 0)
    fprintf(stderr, "%s: loops: %s\n", cli->prog, weft_strerror(rc));
  return rc;
}

void weft_cli_log_loop_stats(const weft_cli *cli, weft_loop_group *group) {
  if (weft_log_get_level() < WEFT_LOG_DEBUG)
    return;
  for (int i = 0; i < weft_loop_group_size(group); i++) {
    weft_loop_stats st;
    char line[1024];
    weft_loop_stats_get(weft_loop_group_get(group, i), &st);
    weft_loop_stats_format(&st, line, sizeof line);
    fprintf(stderr, "%s: loop %d: %s\n", cli->prog, i, line);
  }
}

int weft_cli_wait_stop(const sigset_t *stop) {
  int sig;
  while (sigwait(stop, &sig) != 0)
    ;
  return sig;
}
