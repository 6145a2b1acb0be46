/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv without a command (cli_internal.h): on a terminal, redis-cli's
 * interactive mode with libedit's line editing and history (its readline
 * interface); otherwise one command per line from stdin. Both split a
 * line by redis-cli's rules (its sdssplitargs: quotes, escapes) and take
 * `help`, `help COMMAND`, `quit` and `exit`. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <editline/readline.h>

#include <weft/error.h>
#include <weft/resp.h>

#include "cli_internal.h"

/* History lines kept, as redis-cli's linenoise (its default). */
#define HISTORY_MAX 100

/* `a` is the word `s`, in any case. */
static bool word_is(const kv_arg *a, const char *s) {
  return a->len == strlen(s) && strncasecmp(a->ptr, s, a->len) == 0;
}

/* ---- redis-cli's splitting ---- */

int kv_cli_split(char *line, kv_arg **argv) {
  uint8_t *p = (uint8_t *)line;
  size_t len = strlen(line), n = 0, cap = 0;
  kv_arg *a = NULL;
  for (size_t i = 0;;) {
    while (i < len && isspace(p[i]))
      i++;
    if (i == len)
      break;
    size_t start = i, w = i;
    if (weft_resp_inline_arg(p, len, &i, &w) < 0) {
      free(a);
      return WEFT_EINVAL;
    }
    if (n == cap) {
      kv_arg *grown = realloc(a, (cap = cap ? 2 * cap : 8) * sizeof *a);
      if (grown == NULL) {
        free(a);
        return WEFT_ENOMEM;
      }
      a = grown;
    }
    a[n++] = (kv_arg){line + start, w - start};
  }
  *argv = a;
  return (int)n;
}

/* ---- help ---- */

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* `help`: how to use the prompt and the commands weft RPC carries. */
static void help_all(void) {
  const char *names[KV_CMD_COUNT_];
  size_t n = 0;
  for (int c = 1; c < KV_CMD_COUNT_; c++)
    if (kv_cmd_rpc(c))
      names[n++] = kv_cmd_name(c);
  qsort(names, n, sizeof *names, by_name);
  printf("weft-kv: weft-kv-server's commands over weft RPC, typed as for "
         "redis-cli.\n"
         "  \"help COMMAND\" for one (help GET); \"quit\", \"exit\" or "
         "Ctrl-D to leave.\n\nCommands:\n");
  size_t col = 0;
  for (size_t i = 0; i < n; i++) {
    size_t w = strlen(names[i]) + 1;
    if (col > 0 && col + w > 72) {
      putchar('\n');
      col = 0;
    }
    printf("%s%s", col == 0 ? "  " : " ", names[i]);
    col += w + (col == 0 ? 1 : 0);
  }
  printf("\n");
}

/* Prints a COMMAND DOCS entry's pairs: "  key: value". */
static void print_docs(const kv_reply *name, const kv_reply *docs) {
  printf("\n  %.*s\n", (int)name->len, (const char *)name->str);
  for (size_t i = 0; i + 1 < docs->len; i += 2) {
    const kv_reply *k = &docs->elem[i], *v = &docs->elem[i + 1];
    if ((k->tag == KV_TAG_BULK || k->tag == KV_TAG_SIMPLE) &&
        (v->tag == KV_TAG_BULK || v->tag == KV_TAG_SIMPLE))
      printf("  %.*s: %.*s\n", (int)k->len, (const char *)k->str, (int)v->len,
             (const char *)v->str);
  }
  printf("\n");
}

/* `help COMMAND`: the server's COMMAND DOCS for it. */
static void help_command(kv_cli *s, const kv_arg *name) {
  int cmd = kv_cmd_from_name(name->ptr, name->len);
  if (cmd == 0 || !kv_cmd_rpc(cmd)) {
    printf("  %.*s: no command of weft RPC (help lists them)\n", (int)name->len,
           (const char *)name->ptr);
    return;
  }
  if (kv_cli_connect(s, false) < 0)
    return;
  kv_arg args[2] = {{"DOCS", 4}, *name};
  kv_reply *r = NULL;
  int rc = s->cc != NULL
               ? kv_cluster_sync_call(s->cc, KV_CMD_COMMAND, 2, args,
                                      s->timeout_ns, &r)
               : kv_sync_call(s->c, KV_CMD_COMMAND, 2, args, s->timeout_ns, &r);
  if (rc < 0) {
    fprintf(stderr, "weft-kv: COMMAND DOCS failed: %s\n", weft_strerror(rc));
    kv_cli_disconnect(s);
    return;
  }
  /* [name, [summary, ..., since, ..., group, ...]] (a map in RESP3) */
  if (r->tag == KV_TAG_ARRAY && r->len == 2 && r->elem[1].tag == KV_TAG_ARRAY)
    print_docs(&r->elem[0], &r->elem[1]);
  else
    printf("  %s: the server has no documentation for it\n", kv_cmd_name(cmd));
  kv_reply_free(r);
}

/* ---- completion ---- */

/* libedit's generator: the state-th command whose name starts with
 * `text`, in lower case (as typed), malloc'd; NULL when done. */
static char *command_name(const char *text, int state) {
  static int next;
  if (state == 0)
    next = 1;
  size_t n = strlen(text);
  while (next < KV_CMD_COUNT_) {
    int c = next++;
    const char *name = kv_cmd_name(c);
    if (!kv_cmd_rpc(c) || strncasecmp(name, text, n) != 0)
      continue;
    char *copy = strdup(name);
    for (char *p = copy; p != NULL && *p != '\0'; p++)
      *p = (char)tolower((unsigned char)*p);
    return copy;
  }
  return NULL;
}

/* Tab completes the command name (the first word), as redis-cli's;
 * nothing after it (not libedit's default, file names). */
static char **complete(const char *text, int start, int end) {
  (void)end;
  rl_attempted_completion_over = 1;
  return start == 0 ? rl_completion_matches(text, command_name) : NULL;
}

/* ---- the loops ---- */

enum line_outcome { LINE_DONE, LINE_FAILED, LINE_QUIT };

/* One line: the commands of the prompt, or one for the server. */
static enum line_outcome run_line(kv_cli *s, char *line) {
  kv_arg *argv = NULL;
  int argc = kv_cli_split(line, &argv);
  if (argc == WEFT_EINVAL) {
    printf("Invalid argument(s)\n"); /* redis-cli's words */
    return LINE_DONE;
  }
  if (argc < 0) {
    fprintf(stderr, "weft-kv: out of memory\n");
    return LINE_FAILED;
  }
  enum line_outcome out = LINE_DONE;
  if (argc == 0) {
    /* a blank line */
  } else if (argc == 1 &&
             (word_is(&argv[0], "quit") || word_is(&argv[0], "exit"))) {
    out = LINE_QUIT;
  } else if (word_is(&argv[0], "help")) {
    if (argc == 1)
      help_all();
    for (int i = 1; i < argc; i++)
      help_command(s, &argv[i]);
  } else if (kv_cli_send(s, (size_t)argc, argv) == 2) {
    out = LINE_FAILED;
  }
  free(argv);
  fflush(stdout);
  return out;
}

int kv_cli_stdin(kv_cli *s) {
  if (kv_cli_connect(s, false) < 0)
    return 1;
  char *line = NULL;
  size_t cap = 0;
  int status = 0;
  while (getline(&line, &cap, stdin) >= 0) {
    enum line_outcome out = run_line(s, line);
    if (out == LINE_QUIT)
      break;
    if (out == LINE_FAILED)
      status = 1;
  }
  free(line);
  return status;
}

/* Lines with a password stay out of the history file, as redis-cli
 * keeps them out: AUTH, and HELLO or MIGRATE with AUTH/AUTH2. */
static bool sensitive(const char *line) {
  kv_arg *argv = NULL;
  char *copy = strdup(line); /* split in place: the history keeps `line` */
  int argc = copy != NULL ? kv_cli_split(copy, &argv) : WEFT_ENOMEM;
  bool secret = false;
  if (argc > 0) {
    secret = word_is(&argv[0], "auth");
    if (word_is(&argv[0], "hello") || word_is(&argv[0], "migrate"))
      for (int i = 1; i < argc; i++)
        secret |= word_is(&argv[i], "auth") || word_is(&argv[i], "auth2");
  }
  free(argv);
  free(copy);
  return secret || argc < 0;
}

/* ~/.weft_kv_history, or WEFT_KV_HISTFILE (as REDISCLI_HISTFILE; "" or
 * /dev/null: none). Returns NULL for none, else a malloc'd path. */
static char *history_path(void) {
  const char *env = getenv("WEFT_KV_HISTFILE");
  if (env != NULL)
    return *env != '\0' && strcmp(env, "/dev/null") != 0 ? strdup(env) : NULL;
  const char *home = getenv("HOME");
  if (home == NULL || *home == '\0')
    return NULL;
  size_t n = strlen(home) + sizeof "/.weft_kv_history";
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/.weft_kv_history", home);
  return p;
}

int kv_cli_repl(kv_cli *s) {
  rl_readline_name = "weft-kv"; /* for ~/.editrc's conditionals */
  rl_attempted_completion_function = complete;
  using_history();
  stifle_history(HISTORY_MAX);
  char *hist = history_path();
  if (hist != NULL)
    read_history(hist);
  kv_cli_connect(s, false); /* failing, the prompt says not connected */
  char prompt[sizeof s->addr + 8];
  for (;;) {
    bool up = s->c != NULL || s->cc != NULL;
    snprintf(prompt, sizeof prompt, "%s> ", up ? s->addr : "not connected");
    char *line = readline(prompt);
    if (line == NULL)
      break; /* Ctrl-D */
    if (line[strspn(line, " \t")] != '\0' && !sensitive(line)) {
      add_history(line);
      if (hist != NULL)
        write_history(hist); /* now, as redis-cli: a crash keeps it */
    }
    enum line_outcome out = run_line(s, line);
    free(line);
    if (out == LINE_QUIT)
      break;
  }
  free(hist);
  return 0;
}
