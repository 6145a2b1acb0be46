/* SPDX-License-Identifier: Apache-2.0 */
/* A node's state file (cluster.h: kv_cluster_state_load and _save), as
 * Redis keeps nodes.conf: the slot map this node knows, every node's
 * config epoch, the current epoch and this node's migrations, so that a
 * restarted node serves the map it served before it stopped, not the one
 * of its [cluster] lines, which a CLUSTER SETSLOT NODE since may have
 * changed (it would then answer MOVED to a node that answers MOVED back).
 *
 * The format is Redis': one CLUSTER NODES line per node, then a "vars"
 * line:
 *
 *   ID HOST:PORT@RPCPORT myself,master - 0 0 EPOCH connected 0-5460 [7->-ID]
 *   vars currentEpoch 6 lastVoteEpoch 0
 *
 * The addresses are informational (the [cluster] lines' win); lines start
 * with '#' for comments.
 */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/error.h>

#define LINE_FORM                                                              \
  "expected 'ID HOST:PORT@RPCPORT FLAGS - PING PONG EPOCH connected "          \
  "[SLOTS...]' (a CLUSTER NODES line) or 'vars currentEpoch N "                \
  "lastVoteEpoch N'"

/* What the file says, before it is merged into the cluster. */
typedef struct loaded {
  uint8_t owner[KV_CLUSTER_SLOTS];
  uint8_t migrating[KV_CLUSTER_SLOTS];
  uint8_t importing[KV_CLUSTER_SLOTS];
  uint64_t epoch[KV_CLUSTER_NODES_MAX];
  bool seen[KV_CLUSTER_NODES_MAX];
  uint64_t current;
} loaded;

/* The state of one load: the file's name and line for errors. */
typedef struct reader {
  const kv_cluster *c;
  loaded *l;
  const char *path;
  unsigned line;
  char *err;
  size_t err_len;
} reader;

static int bad(reader *r, const char *what, const char *word) {
  snprintf(r->err, r->err_len, "%s:%u: %s%s%s; %s", r->path, r->line, what,
           word != NULL ? ": " : "", word != NULL ? word : "", LINE_FORM);
  return WEFT_EBADCONF;
}

/* A decimal below `max` (inclusive) in all of `s`. */
static bool parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  if (*s < '0' || *s > '9')
    return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max)
    return false;
  *out = v;
  return true;
}

/* A node id word, known to the [cluster] lines, or -1 after the error. */
static int node_word(reader *r, const char *w) {
  int n = strlen(w) == KV_CLUSTER_ID_LEN
              ? kv_cluster_find_node(r->c, w, KV_CLUSTER_ID_LEN)
              : -1;
  if (n < 0)
    bad(r,
        "a node id that no [cluster] node line has (the file of another "
        "cluster? remove it to start from the [cluster] lines)",
        w);
  return n;
}

/* "[S->-ID]" or "[S-<-ID]": a migration mark of this node. */
static int parse_mark(reader *r, char *w, bool mine) {
  size_t len = strlen(w);
  char *arrow = strstr(w, "->-");
  if (arrow == NULL)
    arrow = strstr(w, "-<-");
  if (!mine || arrow == NULL || w[len - 1] != ']')
    return bad(r,
               "a migration mark [SLOT->-ID] or [SLOT-<-ID] on another "
               "line than this node's",
               w);
  bool out = arrow[1] == '>';
  w[len - 1] = '\0';
  *arrow = '\0';
  uint64_t s;
  if (!parse_u64(w + 1, KV_CLUSTER_SLOTS - 1, &s))
    return bad(r, "a slot from 0 to 16383 in a migration mark", w + 1);
  int n = node_word(r, arrow + 3);
  if (n < 0)
    return WEFT_EBADCONF;
  (out ? r->l->migrating : r->l->importing)[s] = (uint8_t)n;
  return 0;
}

/* "A-B" or "A": slots of node `n`, each claimed once in the file. */
static int parse_range(reader *r, char *w, int n) {
  char *dash = strchr(w, '-');
  uint64_t a, b;
  if (dash != NULL)
    *dash = '\0';
  if (!parse_u64(w, KV_CLUSTER_SLOTS - 1, &a) ||
      !parse_u64(dash != NULL ? dash + 1 : w, KV_CLUSTER_SLOTS - 1, &b) ||
      a > b)
    return bad(r, "a slot range FIRST-LAST or a slot, from 0 to 16383", w);
  for (uint64_t s = a; s <= b; s++) {
    if (r->l->owner[s] != KV_CLUSTER_NO_NODE) {
      char what[96];
      snprintf(what, sizeof what, "slot %llu is claimed twice",
               (unsigned long long)s);
      return bad(r, what, NULL);
    }
    r->l->owner[s] = (uint8_t)n;
  }
  return 0;
}

/* Whether the comma-separated flags include "myself". */
static bool has_myself(const char *flags) {
  size_t n = strlen("myself");
  for (const char *p = flags; (p = strstr(p, "myself")) != NULL; p += n)
    if ((p == flags || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
      return true;
  return false;
}

#define SEP " \t\r\n"

/* One node line: its first eight words in `w`, the slots after them
 * still to be split from `*save`. */
static int parse_node_line(reader *r, char **w, size_t nw, char **save) {
  if (nw < 8)
    return bad(r, "too few words", NULL);
  int n = node_word(r, w[0]);
  if (n < 0)
    return WEFT_EBADCONF;
  if (r->l->seen[n])
    return bad(r, "a second line for node", w[0]);
  bool mine = has_myself(w[2]);
  if (mine != ((unsigned)n == r->c->myself)) {
    char what[160];
    snprintf(what, sizeof what,
             "not node %s's state file: the 'myself' flag is on another "
             "node's line than %s's ([cluster] myself)",
             r->c->nodes[r->c->myself].name, r->c->nodes[r->c->myself].name);
    return bad(r, what, NULL);
  }
  if (!parse_u64(w[6], UINT64_MAX - 1, &r->l->epoch[n]))
    return bad(r, "the config epoch (word 7) is not a number", w[6]);
  r->l->seen[n] = true;
  for (char *t; (t = strtok_r(NULL, SEP, save)) != NULL;) {
    int rc = t[0] == '[' ? parse_mark(r, t, mine) : parse_range(r, t, n);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* "vars currentEpoch N lastVoteEpoch N" (lastVoteEpoch: there are no
 * elections here, it is read and ignored). */
static int parse_vars(reader *r, char **w, size_t nw, char **save) {
  uint64_t v;
  if (nw % 2 == 0 || strtok_r(NULL, SEP, save) != NULL)
    return bad(r, "vars wants at most three NAME VALUE pairs", NULL);
  for (size_t i = 1; i + 1 < nw; i += 2) {
    if (!parse_u64(w[i + 1], UINT64_MAX - 1, &v))
      return bad(r, "a vars value is not a number", w[i + 1]);
    if (strcmp(w[i], "currentEpoch") == 0)
      r->l->current = v;
    else if (strcmp(w[i], "lastVoteEpoch") != 0)
      return bad(r, "an unknown vars name", w[i]);
  }
  return 0;
}

/* One line: its first eight words split here, the rest by the parser of
 * its kind. */
static int parse_line(reader *r, char *line) {
  char *w[8], *save = NULL;
  size_t nw = 0;
  for (char *t = line; nw < 8 && (t = strtok_r(t, SEP, &save)) != NULL;
       t = NULL)
    w[nw++] = t;
  if (nw == 0 || w[0][0] == '#')
    return 0;
  if (strcmp(w[0], "vars") == 0)
    return parse_vars(r, w, nw, &save);
  return parse_node_line(r, w, nw, &save);
}

/* Reads the whole file into `l`. */
static int read_file(reader *r, FILE *f) {
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  while (rc == 0 && getline(&line, &cap, f) >= 0) {
    r->line++;
    rc = parse_line(r, line);
  }
  if (rc == 0 && ferror(f)) {
    rc = -errno;
    snprintf(r->err, r->err_len, "%s:%u: %s", r->path, r->line + 1,
             strerror(errno));
  }
  free(line);
  return rc;
}

/* Takes what the file says into `c`: its epochs, the claims of nodes
 * whose epoch is above the [cluster] lines' current epoch, this node's
 * marks where they still make sense (MIGRATING on a slot it owns,
 * IMPORTING on one it does not: an edited line can have moved the slot,
 * and a stale mark would show as an open slot in CLUSTER NODES). */
static void merge(kv_cluster *c, const loaded *l) {
  uint64_t lines_epoch = atomic_load(&c->epoch), current = l->current;
  for (size_t i = 0; i < c->n_nodes; i++) {
    if (l->seen[i] && l->epoch[i] > atomic_load(&c->node_epoch[i]))
      atomic_store(&c->node_epoch[i], l->epoch[i]);
    if (atomic_load(&c->node_epoch[i]) > current)
      current = atomic_load(&c->node_epoch[i]);
  }
  if (current > lines_epoch)
    atomic_store(&c->epoch, current);
  for (size_t s = 0; s < KV_CLUSTER_SLOTS; s++) {
    uint8_t f = l->owner[s];
    if (f != KV_CLUSTER_NO_NODE && l->epoch[f] > lines_epoch)
      atomic_store(&c->owner[s], f);
    bool mine = atomic_load(&c->owner[s]) == c->myself;
    atomic_store(&c->migrating[s], mine ? l->migrating[s] : KV_CLUSTER_NO_NODE);
    atomic_store(&c->importing[s], mine ? KV_CLUSTER_NO_NODE : l->importing[s]);
  }
}

int kv_cluster_state_load(kv_cluster *c, char *err, size_t err_len) {
  if (c->config_file[0] == '\0')
    return 0;
  FILE *f = fopen(c->config_file, "re");
  if (f == NULL) {
    if (errno == ENOENT)
      return 0; /* the first start: the [cluster] lines are the map */
    int rc = -errno;
    snprintf(err, err_len, "%s: %s", c->config_file, strerror(errno));
    return rc;
  }
  loaded *l = malloc(sizeof *l);
  if (l == NULL) {
    fclose(f);
    snprintf(err, err_len, "%s: out of memory", c->config_file);
    return WEFT_ENOMEM;
  }
  memset(l->owner, KV_CLUSTER_NO_NODE, sizeof l->owner);
  memset(l->migrating, KV_CLUSTER_NO_NODE, sizeof l->migrating);
  memset(l->importing, KV_CLUSTER_NO_NODE, sizeof l->importing);
  memset(l->epoch, 0, sizeof l->epoch);
  memset(l->seen, 0, sizeof l->seen);
  l->current = 0;
  reader r = {
      .c = c, .l = l, .path = c->config_file, .err = err, .err_len = err_len};
  int rc = read_file(&r, f);
  fclose(f);
  if (rc == 0 && !l->seen[c->myself]) {
    r.line++;
    rc =
        bad(&r, "no line for this node (the one with the 'myself' flag)", NULL);
  }
  if (rc == 0)
    merge(c, l);
  free(l);
  return rc;
}

/* ---- save ---- */

/* The state as the file holds it. */
static void write_state(FILE *f, const kv_cluster *c) {
  fprintf(f,
          "# weft-kv-server cluster state of node %s: written by the "
          "server at every CLUSTER SETSLOT (samples/kv/README.md, "
          "\"Cluster\")\n",
          c->nodes[c->myself].name);
  for (size_t i = 0; i < c->n_nodes; i++)
    kv_cluster_node_line(f, c, i, 0);
  fprintf(f, "vars currentEpoch %llu lastVoteEpoch 0\n",
          (unsigned long long)atomic_load(&c->epoch));
}

/* fsync of the directory of `path`, so the rename is durable. */
static int sync_dir(const char *path) {
  char copy[KV_CLUSTER_PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

/* Writes the temporary file and syncs it; the step that failed in `*step`. */
static int write_tmp(const kv_cluster *c, const char *tmp, const char **step) {
  *step = "open";
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  write_state(f, c);
  *step = "write";
  int rc = fflush(f) == 0 ? 0 : -errno;
  if (rc == 0) {
    *step = "fsync";
    rc = fsync(fd) == 0 ? 0 : -errno;
  }
  if (fclose(f) != 0 && rc == 0) {
    *step = "close";
    rc = -errno;
  }
  return rc;
}

int kv_cluster_state_save(kv_cluster *c, char *err, size_t err_len) {
  if (c->config_file[0] == '\0')
    return 0;
  char tmp[KV_CLUSTER_PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", c->config_file);
  pthread_mutex_lock(&c->save_lock);
  const char *step;
  int rc = write_tmp(c, tmp, &step);
  if (rc == 0) {
    step = "rename";
    rc = rename(tmp, c->config_file) == 0 ? 0 : -errno;
  }
  if (rc == 0) {
    step = "fsync of the directory";
    rc = sync_dir(c->config_file);
  } else {
    unlink(tmp);
  }
  atomic_store(&c->save_failed, rc != 0);
  pthread_mutex_unlock(&c->save_lock);
  if (rc != 0)
    snprintf(err, err_len, "%s: %s: %s", c->config_file, step,
             weft_strerror(rc));
  return rc;
}
