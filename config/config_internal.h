/* SPDX-License-Identifier: Apache-2.0 */
/* config/config_internal.h: the table of weft's own keys, shared by the
 * loader (config.c) and the help printer (cli.c). */
#ifndef WEFT_CONFIG_CONFIG_INTERNAL_H
#define WEFT_CONFIG_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/config.h>

typedef enum weft__key_kind {
  KIND_INT,    /* int */
  KIND_I64,    /* int64_t */
  KIND_SIZE,   /* size_t */
  KIND_BOOL,   /* bool */
  KIND_FLAG,   /* int, 0 or 1 */
  KIND_SCHEME, /* char[16]: a transport name */
  KIND_URI     /* char[WEFT_CONFIG_URI_MAX]: [scheme://]host:port */
} weft__key_kind;

typedef struct weft__key_def {
  const char *name;
  weft__key_kind kind;
  size_t off;         /* offset in weft_config */
  long long min, max; /* integers only */
  bool zero_is_unset; /* integers: 0 in the file is -1 in the struct */
  const char *hint;   /* integers: units and special values; booleans: what
                         the key switches (shown by --help) */
} weft__key_def;

typedef struct weft__section_def {
  const char *name;
  const weft__key_def *keys;
  size_t n_keys;
} weft__section_def;

/** weft's own sections, in the order files and --help show them; `*n` gets
 * how many. */
const weft__section_def *weft__config_sections(size_t *n);

/** The current value of `k` in `cfg` as a config file would spell it. */
void weft__config_value_text(const weft_config *cfg, const weft__key_def *k,
                             char *buf, size_t len);

/** The valid values of `k`, a phrase ("an integer from 0 to 1024
 * (number of event loops; 0 = one per CPU less one, at least 1)"). */
void weft__config_values_text(const weft__key_def *k, char *buf, size_t len);

/** What the program reads instead of section.key when cfg->unread_keys
 * lists it (the text after '='), else NULL. */
const char *weft__config_unread(const weft_config *cfg, const char *section,
                                const char *key);

/** Warns (weft_log) of each WEFT_* environment variable that names no
 * setting of weft's, of a registered transport's or of cfg->app_keys, with
 * the closest name; variables weft reads elsewhere are not warned of. */
void weft__config_env_check(const weft_config *cfg);

/** The closest of several candidates to a misspelled word (suggest.c). */
typedef struct weft__suggest {
  const char *word; /* as typed */
  const char *best; /* the closest candidate so far, or NULL */
  size_t dist;      /* its distance */
} weft__suggest;

/** Starts a suggestion for `word`. */
void weft__suggest_init(weft__suggest *s, const char *word);
/** Considers `candidate` (kept by pointer: it must outlive `s`). */
void weft__suggest_try(weft__suggest *s, const char *candidate);
/** The closest candidate within a few edits, or NULL. */
const char *weft__suggest_best(const weft__suggest *s);

#endif
