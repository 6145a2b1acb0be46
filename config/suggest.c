/* SPDX-License-Identifier: Apache-2.0 */
/* "Did you mean ...?" for a misspelled section or key: the candidate with
 * the fewest edits (Levenshtein distance: insertions, deletions and
 * substitutions of one character), if that is small for the word's
 * length. */
#include <string.h>

#include "config/config_internal.h"

/* Edits from `a` to `b`; words longer than 63 characters are never
 * suggested for. */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63)
    return (size_t)-1;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t sub = diag + (a[i - 1] != b[j - 1]);
      size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      diag = up;
    }
  }
  return row[lb];
}

void weft__suggest_init(weft__suggest *s, const char *word) {
  *s = (weft__suggest){.word = word, .dist = (size_t)-1};
}

void weft__suggest_try(weft__suggest *s, const char *candidate) {
  size_t d = distance(s->word, candidate);
  /* At most one edit per three characters, so "lops" finds "loops" but
   * "x" finds nothing. */
  size_t limit = strlen(s->word) / 3 + 1;
  if (d > 0 && d <= limit && d < s->dist) {
    s->dist = d;
    s->best = candidate;
  }
}

const char *weft__suggest_best(const weft__suggest *s) { return s->best; }
