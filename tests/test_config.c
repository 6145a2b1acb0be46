/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration: the INI file, WEFT_* variables, application sections and
 * the exact text of every kind of error. Each test writes its file into its
 * own mkdtemp directory, removed again by the fixture. */
#include "harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/config.h>
#include <weft/error.h>
#include <weft/transport_plugin.h>

static char dir[64];
static char path[128]; /* the file the test wrote, as passed to load */
static char err[1024];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/weft-test-config-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/weft.ini", dir);
  err[0] = '\0';
}

static void teardown(void) {
  unlink(path);
  rmdir(dir);
}

static void write_ini(const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

/* Loads `text` without an application callback and expects `rc`. */
static int load_text(weft_config *cfg, const char *text) {
  write_ini(text);
  return weft_config_load(cfg, path, NULL, NULL, err, sizeof err);
}

/* Asserts that the error message is exactly "<path>:<line>: <rest>". */
static void assert_err_at(int line, const char *rest) {
  char want[1024];
  snprintf(want, sizeof want, "%s:%d: %s", path, line, rest);
  ck_assert_str_eq(err, want);
}

/* As assert_err_at, for a message that goes on after `rest` with the
 * registered transports (which depend on the build). */
static void assert_err_starts_at(int line, const char *rest) {
  char want[1024];
  snprintf(want, sizeof want,
           "%s:%d: %s; transport.<name> for a transport's own keys "
           "(registered: tcp",
           path, line, rest);
  ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);
}

/* ---- defaults and valid files ---- */

START_TEST(config_init_defaults) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_str_eq(c.transport, "tcp");
  ck_assert_int_eq(c.loop.busy_poll_us, WEFT_BUSY_POLL_US_DEFAULT);
  ck_assert_uint_eq(c.loop.pool_retain_bytes, 4u << 20);
  ck_assert_int_eq(c.channel.tcp_nodelay, 1);
  ck_assert_int_eq(c.channel.so_sndbuf, -1);
  ck_assert_int_eq(c.channel.write_low_watermark, 32768);
  ck_assert_int_eq(c.channel.write_high_watermark, 65536);
  ck_assert_int_eq(c.channel.connect_timeout_ms, 10000);
  ck_assert_str_eq(c.listen, "0.0.0.0:7000");
  ck_assert_int_eq(c.backlog, 511);
  ck_assert_str_eq(c.connect, "127.0.0.1:7000");
}
END_TEST

START_TEST(config_load_every_key) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "; weft test\n"
                                 "[loop]\n"
                                 "loops = 3\n"
                                 "busy_poll_us = -1  ; never block\n"
                                 "pin = off\n"
                                 "poll_budget = 16\n"
                                 "pool_retain_bytes = 0\n"
                                 "[transport]\n"
                                 "name = uring\n"
                                 "tcp_nodelay = no\n"
                                 "so_sndbuf = 4096\n"
                                 "so_rcvbuf = 8192\n"
                                 "so_keepalive = yes\n"
                                 "write_low_watermark = 1000\n"
                                 "write_high_watermark = 5000000000\n"
                                 "connect_timeout_ms = 0\n"
                                 "[server]\n"
                                 "listen = uring://[::]:7100\n"
                                 "backlog = 64\n"
                                 "[client]\n"
                                 "connect = 10.0.0.1:7100\n"),
                   0);
  ck_assert_str_eq(err, "");
  ck_assert_int_eq(c.loop.n_loops, 3);
  ck_assert_int_eq(c.loop.busy_poll_us, -1);
  ck_assert(!c.loop.pin);
  ck_assert_int_eq(c.loop.poll_budget, 16);
  ck_assert_uint_eq(c.loop.pool_retain_bytes, 0);
  ck_assert_str_eq(c.transport, "uring");
  ck_assert_int_eq(c.channel.tcp_nodelay, 0);
  ck_assert_int_eq(c.channel.so_sndbuf, 4096);
  ck_assert_int_eq(c.channel.so_rcvbuf, 8192);
  ck_assert_int_eq(c.channel.so_keepalive, 1);
  ck_assert_int_eq(c.channel.write_low_watermark, 1000);
  ck_assert_int_eq(c.channel.write_high_watermark, 5000000000LL);
  ck_assert_int_eq(c.channel.connect_timeout_ms, 0);
  ck_assert_str_eq(c.listen, "uring://[::]:7100");
  ck_assert_int_eq(c.backlog, 64);
  ck_assert_str_eq(c.connect, "10.0.0.1:7100");
}
END_TEST

START_TEST(config_load_keeps_keys_not_in_file) {
  weft_config c;
  weft_config_init(&c);
  c.backlog = 7;
  ck_assert_int_eq(load_text(&c, "[loop]\nloops = 2\n"), 0);
  ck_assert_int_eq(c.loop.n_loops, 2);
  ck_assert_int_eq(c.backlog, 7);
}
END_TEST

START_TEST(config_load_bool_spellings) {
  static const char *const yes[] = {"true", "yes", "on", "1", "TRUE", "On"};
  static const char *const no[] = {"false", "no", "off", "0", "False"};
  weft_config c;
  char text[64];
  weft_config_init(&c);
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    c.loop.pin = false;
    snprintf(text, sizeof text, "[loop]\npin = %s\n", yes[i]);
    ck_assert_int_eq(load_text(&c, text), 0);
    ck_assert(c.loop.pin);
  }
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    c.loop.pin = true;
    snprintf(text, sizeof text, "[loop]\npin = %s\n", no[i]);
    ck_assert_int_eq(load_text(&c, text), 0);
    ck_assert(!c.loop.pin);
  }
}
END_TEST

START_TEST(config_load_sockbuf_zero_is_kernel_default) {
  weft_config c;
  weft_config_init(&c);
  c.channel.so_sndbuf = 4096;
  ck_assert_int_eq(load_text(&c, "[transport]\nso_sndbuf = 0\n"), 0);
  ck_assert_int_eq(c.channel.so_sndbuf, -1);
}
END_TEST

/* ---- errors in the file ---- */

START_TEST(config_load_refused_unknown_section) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\nloops = 2\n[lop]\nloops = 1\n"),
                   WEFT_EBADCONF);
  assert_err_starts_at(4, "unknown section [lop] (did you mean loop?); "
                          "valid sections: loop, "
                          "transport, server, client");
  ck_assert_int_eq(c.loop.n_loops, 0); /* nothing applied on error */
}
END_TEST

START_TEST(config_load_refused_unknown_key) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\n\nkye = 1\n"), WEFT_EBADCONF);
  assert_err_at(3, "[loop] unknown key 'kye'; valid keys: loops, "
                   "busy_poll_us, busy_poll_adaptive, pin, poll_budget, "
                   "pool_retain_bytes");
}
END_TEST

START_TEST(config_load_refused_key_outside_section) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "loops = 1\n"), WEFT_EBADCONF);
  assert_err_starts_at(1,
                       "key 'loops' outside any section; valid sections: loop, "
                       "transport, server, client");
}
END_TEST

START_TEST(config_load_refused_bad_integer) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\nloops = 1\nbusy_poll_us = fast\n"),
                   WEFT_EBADCONF);
  assert_err_at(3, "[loop] busy_poll_us = \"fast\": expected an integer >= "
                   "-1 (microseconds; 0 = always block, -1 = never block)");
  static const char *const bad[] = {"12abc", "1.5", "0x10", "- 1", "+"};
  char text[64];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "[server]\nbacklog = %s\n", bad[i]);
    ck_assert_int_eq(load_text(&c, text), WEFT_EBADCONF);
    ck_assert_ptr_nonnull(strstr(err, ":2: [server] backlog = \""));
    ck_assert_ptr_nonnull(strstr(err, "expected an integer >= 1"));
  }
  ck_assert_int_eq(c.backlog, 511);
}
END_TEST

START_TEST(config_load_refused_bad_bool) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[transport]\ntcp_nodelay = maybe\n"),
                   WEFT_EBADCONF);
  assert_err_at(2, "[transport] tcp_nodelay = \"maybe\": expected a boolean "
                   "(valid values: true, false, yes, no, on, off, 1, 0)");
  ck_assert_int_eq(c.channel.tcp_nodelay, 1);
}
END_TEST

START_TEST(config_load_refused_out_of_range) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\nloops = 1025\n"), WEFT_EBADCONF);
  assert_err_at(
      2, "[loop] loops = \"1025\": expected an integer from 0 to "
         "1024 (number of event loops; 0 = one per CPU less one, at least 1)");
  ck_assert_int_eq(load_text(&c, "[loop]\npoll_budget = 0\n"), WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "from 1 to 65536"));
  ck_assert_int_eq(load_text(&c, "[loop]\nbusy_poll_us = -2\n"), WEFT_EBADCONF);
  ck_assert_int_eq(load_text(&c, "[loop]\nbusy_poll_us = 2147483648\n"),
                   WEFT_EBADCONF);
  ck_assert_int_eq(load_text(&c, "[transport]\nwrite_high_watermark = "
                                 "9223372036854775808\n"),
                   WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "write_high_watermark = \"9223"));
  ck_assert_int_eq(load_text(&c, "[loop]\npool_retain_bytes = -1\n"),
                   WEFT_EBADCONF);
  assert_err_at(2, "[loop] pool_retain_bytes = \"-1\": expected an integer "
                   ">= 0 (bytes of empty buffer slabs each loop keeps; the "
                   "rest goes back to the system)");
}
END_TEST

START_TEST(config_load_refused_bad_transport_name) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[transport]\nname = U-ring\n"),
                   WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, ":2: [transport] name = \"U-ring\": "
                                    "expected a transport name"));
  ck_assert_ptr_nonnull(strstr(err, "tcp, uring, verbs, ucx"));
  ck_assert_int_eq(load_text(&c, "[transport]\nname = abcdefghijklmnop\n"),
                   WEFT_EBADCONF);
  ck_assert_str_eq(c.transport, "tcp");
}
END_TEST

START_TEST(config_load_refused_bad_endpoint) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[server]\nlisten = 0.0.0.0\n"),
                   WEFT_EBADCONF);
  assert_err_at(2, "[server] listen = \"0.0.0.0\": missing port; expected "
                   "host:port or scheme://host:port, e.g. 0.0.0.0:7000 or "
                   "tcp://0.0.0.0:7000");
  ck_assert_int_eq(load_text(&c, "[client]\nconnect = tcp://::1:7\n"),
                   WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "brackets"));
}
END_TEST

START_TEST(config_load_refused_low_above_high) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[transport]\nwrite_low_watermark = "
                                 "70000\n"),
                   WEFT_EBADCONF);
  char want[512];
  snprintf(want, sizeof want,
           "%s: [transport] write_low_watermark = 70000 is above "
           "write_high_watermark = 65536; write_low_watermark must be <= "
           "write_high_watermark",
           path);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(c.channel.write_low_watermark, 32768);
  ck_assert_int_eq(load_text(&c, "[transport]\nwrite_low_watermark = 70000\n"
                                 "write_high_watermark = 70000\n"),
                   0);
}
END_TEST

START_TEST(config_load_refused_missing_file) {
  weft_config c;
  char missing[160];
  weft_config_init(&c);
  snprintf(missing, sizeof missing, "%s/nope.ini", dir);
  ck_assert_int_eq(weft_config_load(&c, missing, NULL, NULL, err, sizeof err),
                   WEFT_ENOENT);
  ck_assert_ptr_nonnull(strstr(err, missing));
  ck_assert_ptr_nonnull(strstr(err, "no such file"));
}
END_TEST

START_TEST(config_load_refused_syntax_error) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\nloops = 2\njust words\n"),
                   WEFT_EBADCONF);
  assert_err_at(3, "syntax error: expected [section], key = value, or a "
                   "comment");
  ck_assert_int_eq(c.loop.n_loops, 0);
}
END_TEST

START_TEST(config_load_refused_long_line) {
  weft_config c;
  char text[400];
  weft_config_init(&c);
  snprintf(text, sizeof text, "[client]\n\nconnect = tcp://%0250d:1\n", 0);
  ck_assert_int_eq(load_text(&c, text), WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, ":3: line longer than"));
  ck_assert_str_eq(c.connect, "127.0.0.1:7000");
}
END_TEST

/* ---- application sections ---- */

typedef struct app_state {
  long capacity;
  char tls[32];
  int calls;
} app_state;

static int app_cb(void *arg, const char *section, const char *key,
                  const char *value, char *why, size_t why_len) {
  app_state *st = arg;
  st->calls++;
  if (strcmp(section, "kv") == 0 && strcmp(key, "capacity") == 0) {
    char *end;
    st->capacity = strtol(value, &end, 10);
    if (*end == '\0')
      return 0;
    snprintf(why, why_len,
             "expected a number of entries (valid values: "
             "1 or more)");
    return WEFT_EINVAL;
  }
  if (strcmp(section, "app.sub") == 0 && strcmp(key, "tls") == 0) {
    snprintf(st->tls, sizeof st->tls, "%s", value);
    return 0;
  }
  return WEFT_ENOENT;
}

/* A plugin of the test's own, so [transport.<name>] is checked without
 * depending on which plugins this build has. */
static int plug_depth;

static int plug_set(const char *key, const char *value, char *why,
                    size_t why_len) {
  (void)key;
  if (strcmp(value, "1") != 0 && strcmp(value, "2") != 0) {
    snprintf(why, why_len, "1 or 2");
    return WEFT_EINVAL;
  }
  plug_depth = value[0] - '0';
  return 0;
}

static const weft_transport_key plug_keys[] = {{"depth", "1", "1 or 2"},
                                               {NULL, NULL, NULL}};
static const weft_transport_ops plug = {
    .name = "cfgplug", .config_keys = plug_keys, .config_set = plug_set};

START_TEST(config_load_plugin_section_reaches_plugin) {
  weft_config c;
  weft_config_init(&c);
  weft_transport_register(&plug); /* once per process; EEXIST after */
  ck_assert_int_eq(load_text(&c, "[transport.cfgplug]\ndepth = 2\n"), 0);
  ck_assert_int_eq(plug_depth, 2);
  ck_assert_int_eq(load_text(&c, "[transport.cfgplug]\ndepth = 3\n"),
                   WEFT_EBADCONF);
  assert_err_at(2, "[transport.cfgplug] depth = \"3\": 1 or 2");
  ck_assert_int_eq(load_text(&c, "\n[transport.cfgplug]\ndeep = 1\n"),
                   WEFT_EBADCONF);
  assert_err_at(3, "[transport.cfgplug] unknown key 'deep'; valid keys: "
                   "fallback, depth");
  ck_assert_int_eq(load_text(&c, "[transport.nosuch]\ndepth = 1\n"),
                   WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "unknown transport 'nosuch'; registered: "
                                    "tcp"));
}
END_TEST

START_TEST(config_set_option_splits_at_last_dot) {
  weft_config c;
  weft_config_init(&c);
  weft_transport_register(&plug);
  ck_assert_int_eq(
      weft_config_set_option(&c, "loop.loops=3", NULL, NULL, err, sizeof err),
      0);
  ck_assert_int_eq(c.loop.n_loops, 3);
  ck_assert_int_eq(weft_config_set_option(&c, "transport.cfgplug.depth=1", NULL,
                                          NULL, err, sizeof err),
                   0);
  ck_assert_int_eq(plug_depth, 1);
  ck_assert_int_eq(weft_config_set_option(&c, "server.listen=tcp://[::1]:7",
                                          NULL, NULL, err, sizeof err),
                   0);
  ck_assert_str_eq(c.listen, "tcp://[::1]:7");
  ck_assert_int_eq(
      weft_config_set_option(&c, "loop.loops", NULL, NULL, err, sizeof err),
      WEFT_EBADCONF);
  ck_assert_ptr_nonnull(
      strstr(err, "-o loop.loops: expected section.key=value"));
  ck_assert_int_eq(
      weft_config_set_option(&c, "loops=1", NULL, NULL, err, sizeof err),
      WEFT_EBADCONF);
  ck_assert_int_eq(
      weft_config_set_option(&c, "loop.pin=maybe", NULL, NULL, err, sizeof err),
      WEFT_EBADCONF);
  ck_assert_str_eq(err, "-o loop.pin=maybe: [loop] pin = \"maybe\": expected "
                        "a boolean (valid values: true, false, yes, no, on, "
                        "off, 1, 0)");
}
END_TEST

static const weft_config_key app_keys[] = {
    {"kv", "capacity", "100", "entries, 1 or more"},
    {"app.sub", "tls", "", "any text"},
    {NULL, NULL, NULL, NULL}};

START_TEST(config_app_keys_name_valid_keys_and_sections) {
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  c.app_keys = app_keys;
  ck_assert_int_eq(
      weft_config_set_option(&c, "kv.capacity=5", app_cb, &st, err, sizeof err),
      0);
  ck_assert_int_eq(st.capacity, 5);
  ck_assert_int_eq(
      weft_config_set_option(&c, "kv.capactiy=5", app_cb, &st, err, sizeof err),
      WEFT_EBADCONF);
  ck_assert_str_eq(err,
                   "-o kv.capactiy=5: [kv] unknown key 'capactiy' (did you "
                   "mean capacity?); valid keys: capacity");
  ck_assert_int_eq(
      weft_config_set_option(&c, "nosuch.key=1", app_cb, &st, err, sizeof err),
      WEFT_EBADCONF);
  const char *want = "-o nosuch.key=1: unknown section [nosuch]; valid "
                     "sections: loop, transport, server, client, kv, app.sub; "
                     "transport.<name>";
  ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);
  ck_assert_int_eq(st.calls, 1); /* the callback never saw the bad ones */
}
END_TEST

START_TEST(config_print_writes_a_file_that_loads_back) {
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  c.app_keys = app_keys;
  c.loop.n_loops = 3;
  c.loop.pool_retain_bytes = (size_t)5 << 30; /* more than an int holds */
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(weft_config_print(&c, NULL, f), 0);
  ck_assert_int_eq(fclose(f), 0);
  weft_config back;
  weft_config_init(&back);
  back.app_keys = app_keys;
  ck_assert_msg(weft_config_load(&back, path, app_cb, &st, err, sizeof err) ==
                    0,
                "%s", err);
  ck_assert_int_eq(back.loop.n_loops, 3);
  ck_assert_uint_eq(back.loop.pool_retain_bytes, (size_t)5 << 30);
  ck_assert_int_eq(st.capacity, 100);
  ck_assert_int_eq(back.channel.so_sndbuf, -1); /* printed as 0 */
}
END_TEST

/* --help prints the keys with weft_config_print: a boolean's line says
 * what it switches, and [loop] pin when pinning pays; pinning is off by
 * default. */
START_TEST(config_print_says_when_pinning_pays) {
  weft_config c;
  weft_config_init(&c);
  ck_assert(!c.loop.pin);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(weft_config_print(&c, NULL, f), 0);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_ptr_nonnull(strstr(text, "0); pin loop i to CPU i of the affinity "
                                     "mask; pays only on CPUs the process "
                                     "has to itself"));
  ck_assert_ptr_nonnull(strstr(text, "\npin = false\n"));
  free(text);
}
END_TEST

START_TEST(config_load_app_section_handled) {
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  write_ini("[kv]\ncapacity = 1000\n[app.sub]\ntls = rc,sm\n"
            "[loop]\nloops = 4\n");
  ck_assert_int_eq(weft_config_load(&c, path, app_cb, &st, err, sizeof err), 0);
  ck_assert_int_eq(st.capacity, 1000);
  ck_assert_str_eq(st.tls, "rc,sm");
  ck_assert_int_eq(c.loop.n_loops, 4);
  ck_assert_int_eq(st.calls, 2); /* weft's own keys never reach the app */
}
END_TEST

START_TEST(config_load_refused_app_unknown_key) {
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  write_ini("[kv]\ncapacity = 10\ncapactiy = 10\n");
  ck_assert_int_eq(weft_config_load(&c, path, app_cb, &st, err, sizeof err),
                   WEFT_EBADCONF);
  assert_err_starts_at(
      3, "[kv] unknown key 'capactiy' (the application does not "
         "know it); weft's own sections: loop, transport, server, "
         "client");
}
END_TEST

START_TEST(config_load_refused_app_bad_value) {
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  write_ini("[kv]\ncapacity = lots\n");
  ck_assert_int_eq(weft_config_load(&c, path, app_cb, &st, err, sizeof err),
                   WEFT_EBADCONF);
  assert_err_at(2, "[kv] capacity = \"lots\": expected a number of entries "
                   "(valid values: 1 or more)");
}
END_TEST

START_TEST(config_load_refused_app_section_without_app) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[kv]\ncapacity = 10\n"), WEFT_EBADCONF);
  assert_err_starts_at(2,
                       "unknown section [kv]; valid sections: loop, transport, "
                       "server, client");
}
END_TEST

/* ---- the environment ---- */

START_TEST(config_env_overrides_file) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(load_text(&c, "[loop]\nbusy_poll_us = 50\n"
                                 "[transport]\nname = tcp\n"),
                   0);
  setenv("WEFT_LOOP_BUSY_POLL_US", "0", 1);
  setenv("WEFT_TRANSPORT_NAME", "uring", 1);
  setenv("WEFT_SERVER_LISTEN", "[::1]:9", 1);
  ck_assert_int_eq(weft_config_apply_env(&c, NULL, NULL, NULL, err, sizeof err),
                   0);
  unsetenv("WEFT_LOOP_BUSY_POLL_US");
  unsetenv("WEFT_TRANSPORT_NAME");
  unsetenv("WEFT_SERVER_LISTEN");
  ck_assert_int_eq(c.loop.busy_poll_us, 0);
  ck_assert_str_eq(c.transport, "uring");
  ck_assert_str_eq(c.listen, "[::1]:9");
}
END_TEST

START_TEST(config_env_refused_bad_value_names_variable) {
  weft_config c;
  weft_config_init(&c);
  setenv("WEFT_LOOP_LOOPS", "3", 1);
  setenv("WEFT_LOOP_PIN", "maybe", 1);
  int rc = weft_config_apply_env(&c, NULL, NULL, NULL, err, sizeof err);
  unsetenv("WEFT_LOOP_LOOPS");
  unsetenv("WEFT_LOOP_PIN");
  ck_assert_int_eq(rc, WEFT_EBADCONF);
  ck_assert_str_eq(err, "WEFT_LOOP_PIN: [loop] pin = \"maybe\": expected a "
                        "boolean (valid values: true, false, yes, no, on, "
                        "off, 1, 0)");
  ck_assert_int_eq(c.loop.n_loops, 0); /* all or nothing */
}
END_TEST

START_TEST(config_env_refused_low_above_high) {
  weft_config c;
  weft_config_init(&c);
  setenv("WEFT_TRANSPORT_WRITE_HIGH_WATERMARK", "1000", 1);
  int rc = weft_config_apply_env(&c, NULL, NULL, NULL, err, sizeof err);
  unsetenv("WEFT_TRANSPORT_WRITE_HIGH_WATERMARK");
  ck_assert_int_eq(rc, WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "write_low_watermark = 32768 is above "
                                    "write_high_watermark = 1000"));
  ck_assert_int_eq(c.channel.write_high_watermark, 65536);
}
END_TEST

START_TEST(config_env_app_keys) {
  static const char *const keys[] = {"kv.capacity", "app.sub.tls", NULL};
  weft_config c;
  app_state st = {0};
  weft_config_init(&c);
  setenv("WEFT_KV_CAPACITY", "77", 1);
  setenv("WEFT_APP_SUB_TLS", "tcp", 1);
  int rc = weft_config_apply_env(&c, keys, app_cb, &st, err, sizeof err);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(st.capacity, 77);
  ck_assert_str_eq(st.tls, "tcp");
  setenv("WEFT_KV_CAPACITY", "x", 1);
  rc = weft_config_apply_env(&c, keys, app_cb, &st, err, sizeof err);
  unsetenv("WEFT_KV_CAPACITY");
  unsetenv("WEFT_APP_SUB_TLS");
  ck_assert_int_eq(rc, WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "WEFT_KV_CAPACITY: [kv] capacity = "));
}
END_TEST

/* ---- single keys and endpoints ---- */

START_TEST(config_set_prefixes_where) {
  weft_config c;
  weft_config_init(&c);
  ck_assert_int_eq(weft_config_set(&c, "--loops", "loop", "loops", "8", NULL,
                                   NULL, err, sizeof err),
                   0);
  ck_assert_int_eq(c.loop.n_loops, 8);
  ck_assert_int_eq(weft_config_set(&c, "--loops", "loop", "loops", "x", NULL,
                                   NULL, err, sizeof err),
                   WEFT_EBADCONF);
  ck_assert_ptr_eq(strstr(err, "--loops: [loop] loops = \"x\""), err);
  ck_assert_int_eq(
      weft_config_set(&c, NULL, "loop", "loops", "x", NULL, NULL, NULL, 0),
      WEFT_EBADCONF);
}
END_TEST

START_TEST(config_endpoint_adds_scheme) {
  weft_config c;
  char out[WEFT_CONFIG_URI_MAX + 16];
  weft_config_init(&c);
  snprintf(c.transport, sizeof c.transport, "uring");
  ck_assert_int_eq(weft_config_endpoint(&c, "0.0.0.0:7000", out, sizeof out),
                   0);
  ck_assert_str_eq(out, "uring://0.0.0.0:7000");
  ck_assert_int_eq(
      weft_config_endpoint(&c, "tcp://[::1]:7000", out, sizeof out), 0);
  ck_assert_str_eq(out, "tcp://[::1]:7000");
  ck_assert_int_eq(weft_config_endpoint(&c, "0.0.0.0:7000", out, 20),
                   WEFT_ENOSPC);
  ck_assert_int_eq(weft_config_endpoint(&c, "0.0.0.0:7000", out, 21), 0);
}
END_TEST

START_TEST(config_endpoint_parse_takes_transport_name) {
  weft_config c;
  weft_endpoint ep;
  char why[512];
  weft_config_init(&c);
  snprintf(c.transport, sizeof c.transport, "uring");
  ck_assert_int_eq(
      weft_config_endpoint_parse(&c, "0.0.0.0:7000", &ep, why, sizeof why), 0);
  ck_assert_str_eq(ep.transport, "uring");
  ck_assert_str_eq(ep.host, "0.0.0.0");
  ck_assert_uint_eq(ep.port, 7000);
  /* A scheme written in the address wins over [transport] name. */
  ck_assert_int_eq(
      weft_config_endpoint_parse(&c, "tcp://[::1]:7001", &ep, why, sizeof why),
      0);
  ck_assert_str_eq(ep.transport, "tcp");
  ck_assert_str_eq(ep.host, "::1");
  ck_assert_uint_eq(ep.port, 7001);
  /* The same endpoint as weft_config_endpoint's text, parsed. */
  char text[WEFT_CONFIG_URI_MAX + 16], back[WEFT_CONFIG_URI_MAX + 16];
  ck_assert_int_eq(
      weft_config_endpoint(&c, "[fe80::1%eth0]:0", text, sizeof text), 0);
  ck_assert_int_eq(
      weft_config_endpoint_parse(&c, "[fe80::1%eth0]:0", &ep, NULL, 0), 0);
  ck_assert_int_eq(weft_endpoint_format(&ep, back, sizeof back), 0);
  ck_assert_str_eq(back, text);
}
END_TEST

START_TEST(config_endpoint_parse_refused_bad_address) {
  weft_config c;
  weft_endpoint ep;
  char why[512] = "";
  weft_config_init(&c);
  memset(&ep, 0x5a, sizeof ep);
  ck_assert_int_eq(
      weft_config_endpoint_parse(&c, "0.0.0.0", &ep, why, sizeof why),
      WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(why, "bad endpoint '0.0.0.0': missing port"));
  ck_assert_ptr_nonnull(strstr(why, "expected host:port or scheme://"));
  ck_assert_int_eq(((unsigned char *)&ep)[0], 0x5a); /* untouched */
  ck_assert_int_eq(weft_config_endpoint_parse(&c, NULL, &ep, NULL, 0),
                   WEFT_EINVAL);
  ck_assert_int_eq(weft_config_endpoint_parse(&c, "Tcp://h:1", &ep, NULL, 0),
                   WEFT_EINVAL);
  ck_assert_int_eq(weft_config_endpoint_parse(NULL, "h:1", &ep, NULL, 0),
                   WEFT_EINVAL);
}
END_TEST

/* ---- settings the program would ignore (weft_config.read_sections,
 * unread_keys; weft_cli sets them) ---- */

static const char *const server_sections[] = {"loop", "transport", "server",
                                              NULL};
static const char *const server_unread[] = {
    "server.listen=[app] listen_a and listen_b", NULL};

static void reads_server_only(weft_config *c) {
  weft_config_init(c);
  c->read_sections = server_sections;
  c->unread_keys = server_unread;
}

START_TEST(config_option_refused_for_section_not_read) {
  weft_config c;
  reads_server_only(&c);
  ck_assert_int_eq(weft_config_set_option(&c, "client.connect=10.0.0.1:1", NULL,
                                          NULL, err, sizeof err),
                   WEFT_EBADCONF);
  ck_assert_str_eq(err, "-o client.connect=10.0.0.1:1: this program does not "
                        "read [client]; it reads [loop], [transport], "
                        "[server]");
  ck_assert_int_eq(weft_config_set_option(&c, "server.listen=10.0.0.1:1", NULL,
                                          NULL, err, sizeof err),
                   WEFT_EBADCONF);
  ck_assert_str_eq(err, "-o server.listen=10.0.0.1:1: this program does not "
                        "read [server] listen; it reads [app] listen_a and "
                        "listen_b instead");
  ck_assert_str_eq(c.listen, "0.0.0.0:7000"); /* unchanged */
  /* A section nobody knows is still reported as unknown. */
  ck_assert_int_eq(
      weft_config_set_option(&c, "nosuch.key=1", NULL, NULL, err, sizeof err),
      WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "unknown section [nosuch]"));
}
END_TEST

START_TEST(config_file_key_not_read_is_ignored_with_a_line) {
  weft_config c;
  reads_server_only(&c);
  weft_log_set_level(WEFT_LOG_INFO);
  th_log_capture_start();
  ck_assert_int_eq(load_text(&c, "[client]\nconnect = 10.0.0.1:1\n[server]\n"
                                 "listen = 10.0.0.1:2\nbacklog = 7\n"),
                   0);
  th_log_capture_stop();
  weft_log_set_level(WEFT_LOG_WARN);
  ck_assert_int_eq(th_log_count("[client] connect ignored: this program does "
                                "not read [client]"),
                   1);
  ck_assert_int_eq(th_log_count("[server] listen ignored: this program does "
                                "not read [server] listen"),
                   1);
  ck_assert_str_eq(c.connect, "127.0.0.1:7000"); /* ignored */
  ck_assert_str_eq(c.listen, "0.0.0.0:7000");
  ck_assert_int_eq(c.backlog, 7); /* read */
}
END_TEST

START_TEST(config_print_leaves_out_unread_keys) {
  weft_config c;
  reads_server_only(&c);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_int_eq(weft_config_print(&c, server_sections, f), 0);
  fclose(f);
  ck_assert_ptr_null(strstr(text, "\nlisten ="));
  ck_assert_ptr_nonnull(strstr(text, "\nbacklog = 511"));
  free(text);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite_fixture(
      "config", "core", setup, teardown, config_init_defaults,
      config_load_every_key, config_load_keeps_keys_not_in_file,
      config_load_bool_spellings, config_load_sockbuf_zero_is_kernel_default,
      config_load_refused_unknown_section, config_load_refused_unknown_key,
      config_load_refused_key_outside_section, config_load_refused_bad_integer,
      config_load_refused_bad_bool, config_load_refused_out_of_range,
      config_load_refused_bad_transport_name, config_load_refused_bad_endpoint,
      config_load_refused_low_above_high, config_load_refused_missing_file,
      config_load_refused_syntax_error, config_load_refused_long_line,
      config_load_plugin_section_reaches_plugin,
      config_set_option_splits_at_last_dot,
      config_app_keys_name_valid_keys_and_sections,
      config_print_writes_a_file_that_loads_back,
      config_print_says_when_pinning_pays, config_load_app_section_handled,
      config_load_refused_app_unknown_key, config_load_refused_app_bad_value,
      config_load_refused_app_section_without_app, config_env_overrides_file,
      config_env_refused_bad_value_names_variable,
      config_env_refused_low_above_high, config_env_app_keys,
      config_set_prefixes_where, config_endpoint_adds_scheme,
      config_endpoint_parse_takes_transport_name,
      config_endpoint_parse_refused_bad_address,
      config_option_refused_for_section_not_read,
      config_file_key_not_read_is_ignored_with_a_line,
      config_print_leaves_out_unread_keys, NULL);
}
