/* weft-kv-server: the KV service as a program.
 *
 *   weft-kv-server [-c FILE] [-o section.key=value ...]
 *
 * Listens on [kv] rpc_listen (weft RPC) and [kv] resp_listen (Redis
 * protocol), with the loops of [loop] and the transport of [transport].
 * SIGINT or SIGTERM stop it gracefully: the loops answer what they already
 * received, then close every connection.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

#include "server.h"

/* Splits "section.key=value" (the value may be empty; the section may hold
 * dots, the key may not). Returns the value, or NULL if malformed. */
static const char *split_option(const char *opt, char section[64],
                                char key[64]) {
  const char *eq = strchr(opt, '=');
  if (eq == NULL)
    return NULL;
  const char *dot = eq;
  while (dot > opt && *dot != '.')
    dot--;
  size_t slen = (size_t)(dot - opt), klen = (size_t)(eq - dot - 1);
  if (*dot != '.' || slen == 0 || slen >= 64 || klen == 0 || klen >= 64)
    return NULL;
  memcpy(section, opt, slen);
  section[slen] = '\0';
  memcpy(key, dot + 1, klen);
  key[klen] = '\0';
  return eq + 1;
}

static int load(int argc, char **argv, weft_config *cfg, kv_server_options *o) {
  char err[512] = "";
  weft_config_init(cfg);
  kv_server_options_init(o);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
      if (weft_config_load(cfg, argv[++i], kv_server_config_section, o, err,
                           sizeof err) < 0)
        goto bad;
    } else if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc) {
      snprintf(err, sizeof err, "usage: %s [-c FILE] [-o section.key=value]",
               argv[0]);
      goto bad;
    } else {
      i++;
    }
  }
  if (weft_config_apply_env(cfg, kv_server_config_keys,
                            kv_server_config_section, o, err, sizeof err) < 0)
    goto bad;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "-o") != 0)
      continue;
    char section[64], key[64];
    const char *value = split_option(argv[++i], section, key);
    if (value == NULL) {
      snprintf(err, sizeof err, "-o %s: expected section.key=value", argv[i]);
      goto bad;
    }
    if (weft_config_set(cfg, "-o", section, key, value,
                        kv_server_config_section, o, err, sizeof err) < 0)
      goto bad;
  }
  return 0;
bad:
  fprintf(stderr, "weft-kv-server: %s\n", err);
  return -1;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = sig; }

int main(int argc, char **argv) {
  weft_config cfg;
  kv_server_options opts;
  if (load(argc, argv, &cfg, &opts) < 0)
    return 2;
  weft_loop_group *group;
  int rc = weft_loop_group_new(&group, &cfg.loop);
  if (rc == 0 && (rc = weft_loop_group_start(group)) < 0)
    weft_loop_group_free(group);
  if (rc < 0) {
    fprintf(stderr, "weft-kv-server: loops: %s\n", weft_strerror(rc));
    return 1;
  }
  kv_server *srv;
  if ((rc = kv_server_bind(&srv, group, &cfg, &opts)) == 0) {
    char a[WEFT_CONFIG_URI_MAX + 32];
    for (int which = 0; which < 2; which++)
      if (kv_server_address(srv, which, a, sizeof a) == 0)
        fprintf(stderr, "weft-kv-server: %s on %s\n",
                which == 0 ? "rpc" : "resp", a);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    while (!stop)
      pause();
    fprintf(stderr, "weft-kv-server: stopping\n");
  }
  /* Loops first: they answer what they hold and close the channels; then
   * the store can go. */
  weft_loop_group_stop(group);
  int join = weft_loop_group_join(group);
  if (rc == 0)
    kv_server_close(srv);
  weft_loop_group_free(group);
  return rc < 0 || join < 0 ? 1 : 0;
}
