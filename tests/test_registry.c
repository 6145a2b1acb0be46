/* SPDX-License-Identifier: Apache-2.0 */
/* The transport registry: registration, lookup, cached probes, plugin
 * settings and fallbacks. Each
 * test uses its own names: the registry is process-wide and has no
 * unregister, so tests must not depend on running in separate processes. */
#include "harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/transport_plugin.h>

static int probe_calls;

static int probe_fails(char *why, size_t why_len) {
  probe_calls++;
  snprintf(why, why_len, "fakedev: no device found; use transport=tcp");
  return WEFT_ENODEV;
}

static int probe_silent_fail(char *why, size_t why_len) {
  (void)why;
  (void)why_len;
  return WEFT_EPERM;
}

static const weft_transport_ops fake_ok = {.name = "fake"};
static const weft_transport_ops dup_first = {.name = "dup"};
static const weft_transport_ops dup_second = {.name = "dup"};
static const weft_transport_ops fake_other = {.name = "fake2"};
static const weft_transport_ops fake_broken = {.name = "broken",
                                               .probe = probe_fails};
static const weft_transport_ops fake_silent = {.name = "silent",
                                               .probe = probe_silent_fail};

START_TEST(registry_find_registered) {
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&fake_ok), 0);
  ck_assert_ptr_eq(weft_transport_find("fake", why, sizeof why), &fake_ok);
  ck_assert_str_eq(why, ""); /* success leaves `why` alone */
}
END_TEST

START_TEST(registry_register_refused_duplicate) {
  ck_assert_int_eq(weft_transport_register(&dup_first), 0);
  ck_assert_int_eq(weft_transport_register(&dup_second), WEFT_EEXIST);
  ck_assert_ptr_eq(weft_transport_find("dup", NULL, 0), &dup_first);
}
END_TEST

START_TEST(registry_register_refused_builtin_name) {
  static const weft_transport_ops fake_tcp = {.name = "tcp"};
  ck_assert_int_eq(weft_transport_register(&fake_tcp), WEFT_EEXIST);
}
END_TEST

START_TEST(registry_register_refused_bad_name) {
  static const weft_transport_ops upper = {.name = "Fake"};
  static const weft_transport_ops noname = {.name = NULL};
  ck_assert_int_eq(weft_transport_register(&upper), WEFT_EINVAL);
  ck_assert_int_eq(weft_transport_register(&noname), WEFT_EINVAL);
  ck_assert_int_eq(weft_transport_register(NULL), WEFT_EINVAL);
}
END_TEST

START_TEST(registry_register_refused_full) {
  static weft_transport_ops many[20];
  static char names[20][16];
  int rc = 0, i;
  for (i = 0; i < 20 && rc == 0; i++) {
    snprintf(names[i], sizeof names[i], "many%d", i);
    many[i].name = names[i];
    rc = weft_transport_register(&many[i]);
  }
  ck_assert_int_eq(rc, WEFT_ENOSPC);
  ck_assert_int_le(i, 16); /* the built-ins take some of the 16 slots */
}
END_TEST

START_TEST(registry_find_unknown_lists_registered) {
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&fake_other), 0);
  ck_assert_ptr_null(weft_transport_find("foo", why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "unknown transport 'foo'; registered: "));
  ck_assert_ptr_nonnull(strstr(why, "tcp"));
  ck_assert_ptr_nonnull(strstr(why, ", fake2"));
  ck_assert_ptr_null(weft_transport_find("foo", NULL, 0)); /* no why */
  ck_assert_ptr_null(weft_transport_find(NULL, why, sizeof why));
}
END_TEST

START_TEST(registry_find_probe_failure_cached) {
  char why[256] = "";
  probe_calls = 0;
  ck_assert_int_eq(weft_transport_register(&fake_broken), 0);
  ck_assert_ptr_null(weft_transport_find("broken", why, sizeof why));
  ck_assert_str_eq(why, "fakedev: no device found; use transport=tcp");
  why[0] = '\0';
  ck_assert_ptr_null(weft_transport_find("broken", why, sizeof why));
  ck_assert_str_eq(why, "fakedev: no device found; use transport=tcp");
  ck_assert_int_eq(probe_calls, 1);
}
END_TEST

START_TEST(registry_find_probe_failure_without_reason) {
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&fake_silent), 0);
  ck_assert_ptr_null(weft_transport_find("silent", why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "'silent' cannot run here"));
  ck_assert_ptr_nonnull(strstr(why, weft_strerror(WEFT_EPERM)));
}
END_TEST

START_TEST(registry_find_builtin_tcp) {
  const weft_transport_ops *tcp = weft_transport_find("tcp", NULL, 0);
  /* tcp may be unavailable (probe) only on exotic hosts; then it is NULL
   * with a reason, never "unknown". */
  if (tcp == NULL) {
    char why[256];
    ck_assert_ptr_null(weft_transport_find("tcp", why, sizeof why));
    ck_assert_ptr_null(strstr(why, "unknown transport"));
  } else {
    ck_assert_str_eq(tcp->name, "tcp");
  }
}
END_TEST

/* ---- plugin settings and fallbacks ---- */

static int depth_value; /* what the fake plugin's config_set stored */

static int depth_set(const char *key, const char *value, char *why,
                     size_t why_len) {
  (void)key; /* the registry checked it */
  char *end;
  long v = strtol(value, &end, 10);
  if (*end != '\0' || v < 1 || v > 64) {
    snprintf(why, why_len, "entries, 1 .. 64");
    return WEFT_EINVAL;
  }
  depth_value = (int)v;
  return 0;
}

static const weft_transport_key depth_keys[] = {
    {"depth", "8", "entries, 1 .. 64"}, {NULL, NULL, NULL}};

START_TEST(registry_config_set_reaches_plugin_checked) {
  static const weft_transport_ops cfg = {
      .name = "cfgplug", .config_keys = depth_keys, .config_set = depth_set};
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&cfg), 0);
  ck_assert_int_eq(
      weft_transport_config_set("cfgplug", "depth", "7", why, sizeof why), 0);
  ck_assert_int_eq(depth_value, 7);
  ck_assert_int_eq(
      weft_transport_config_set("cfgplug", "depth", "99", why, sizeof why),
      WEFT_EINVAL);
  ck_assert_str_eq(why, "entries, 1 .. 64");
  ck_assert_int_eq(depth_value, 7);
  ck_assert_int_eq(
      weft_transport_config_set("cfgplug", "dpeth", "1", why, sizeof why),
      WEFT_ENOENT);
  ck_assert_str_eq(why, "unknown key 'dpeth'; valid keys: fallback, depth");
  ck_assert_int_eq(
      weft_transport_config_set("nosuch", "depth", "1", why, sizeof why),
      WEFT_ENOENT);
  ck_assert_ptr_nonnull(strstr(why, "unknown transport 'nosuch'"));
}
END_TEST

START_TEST(registry_env_reaches_plugin_before_probe) {
  static const weft_transport_ops cfg = {
      .name = "envplug", .config_keys = depth_keys, .config_set = depth_set};
  ck_assert_int_eq(weft_transport_register(&cfg), 0);
  setenv("WEFT_TRANSPORT_ENVPLUG_DEPTH", "33", 1);
  ck_assert_ptr_eq(weft_transport_find("envplug", NULL, 0), &cfg);
  unsetenv("WEFT_TRANSPORT_ENVPLUG_DEPTH");
  ck_assert_int_eq(depth_value, 33);
}
END_TEST

START_TEST(registry_env_bad_value_fails_probe_naming_variable) {
  static const weft_transport_ops cfg = {
      .name = "envbad", .config_keys = depth_keys, .config_set = depth_set};
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&cfg), 0);
  setenv("WEFT_TRANSPORT_ENVBAD_DEPTH", "0", 1);
  ck_assert_ptr_null(weft_transport_find("envbad", why, sizeof why));
  unsetenv("WEFT_TRANSPORT_ENVBAD_DEPTH");
  ck_assert_str_eq(why, "WEFT_TRANSPORT_ENVBAD_DEPTH = \"0\": expected "
                        "entries, 1 .. 64");
}
END_TEST

START_TEST(registry_fallback_replaces_failed_probe) {
  static const weft_transport_ops target = {.name = "fbtarget"};
  static const weft_transport_ops failing = {.name = "fbsource",
                                             .probe = probe_fails};
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&target), 0);
  ck_assert_int_eq(weft_transport_register(&failing), 0);
  ck_assert_ptr_null(weft_transport_find("fbsource", NULL, 0));
  ck_assert_int_eq(weft_transport_config_set("fbsource", "fallback", "fbsource",
                                             why, sizeof why),
                   WEFT_EINVAL); /* not itself */
  ck_assert_int_eq(weft_transport_config_set("fbsource", "fallback", "nosuch",
                                             why, sizeof why),
                   WEFT_EINVAL);
  ck_assert_int_eq(weft_transport_config_set("fbsource", "fallback", "fbtarget",
                                             why, sizeof why),
                   0);
  ck_assert_ptr_eq(weft_transport_find("fbsource", NULL, 0), &target);
  ck_assert(weft_transport_available("fbsource", NULL, 0));
  ck_assert_int_eq(weft_transport_config_set("fbsource", "fallback", "none",
                                             why, sizeof why),
                   0);
  ck_assert_ptr_null(weft_transport_find("fbsource", why, sizeof why));
  ck_assert_str_eq(why, "fakedev: no device found; use transport=tcp");
}
END_TEST

/* ---- what an endpoint's transport offers (weft_endpoint_caps) ---- */

START_TEST(registry_endpoint_caps_from_plugin_caps) {
  static const weft_transport_ops stream = {
      .name = "capstream",
      .caps = WEFT_TRANSPORT_CAP_STREAM | WEFT_TRANSPORT_CAP_HALF_CLOSE |
              WEFT_TRANSPORT_CAP_TCP | WEFT_TRANSPORT_CAP_SOCKET_OPTS};
  static const weft_transport_ops msg = {
      .name = "capmsg", .caps = WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP};
  ck_assert_int_eq(weft_transport_register(&stream), 0);
  ck_assert_int_eq(weft_transport_register(&msg), 0);
  weft_endpoint ep = {.transport = "capstream", .host = "h", .port = 1};
  ck_assert_uint_eq(weft_endpoint_caps(&ep, NULL, 0),
                    WEFT_ENDPOINT_AVAILABLE | WEFT_ENDPOINT_TCP |
                        WEFT_ENDPOINT_STREAM | WEFT_ENDPOINT_HALF_CLOSE);
  snprintf(ep.transport, sizeof ep.transport, "capmsg");
  ck_assert_uint_eq(weft_endpoint_caps(&ep, NULL, 0), WEFT_ENDPOINT_AVAILABLE);
}
END_TEST

START_TEST(registry_endpoint_caps_refused_unavailable) {
  static const weft_transport_ops broken = {.name = "capbroken",
                                            .caps = WEFT_TRANSPORT_CAP_TCP,
                                            .probe = probe_fails};
  char why[256] = "";
  ck_assert_int_eq(weft_transport_register(&broken), 0);
  weft_endpoint ep = {.transport = "capbroken", .host = "h", .port = 1};
  ck_assert_uint_eq(weft_endpoint_caps(&ep, why, sizeof why), 0);
  ck_assert_str_eq(why, "fakedev: no device found; use transport=tcp");
  snprintf(ep.transport, sizeof ep.transport, "capnosuch");
  ck_assert_uint_eq(weft_endpoint_caps(&ep, why, sizeof why), 0);
  ck_assert_ptr_nonnull(strstr(why, "unknown transport 'capnosuch'"));
  ck_assert_uint_eq(weft_endpoint_caps(NULL, NULL, 0), 0);
  /* The built-in tcp: TCP on the wire, a byte stream. */
  snprintf(ep.transport, sizeof ep.transport, "tcp");
  uint32_t tcp = weft_endpoint_caps(&ep, NULL, 0);
  if (tcp != 0) /* 0 only where tcp's probe fails (exotic hosts) */
    ck_assert_uint_eq(tcp & (WEFT_ENDPOINT_TCP | WEFT_ENDPOINT_STREAM),
                      WEFT_ENDPOINT_TCP | WEFT_ENDPOINT_STREAM);
}
END_TEST

/* A plugin's per-loop state outlives the work its channels' closes queue:
 * at loop stop the channel book closes every channel, the plugin's close
 * queues a task (as uring's delivery of held reads is queued), and only
 * after that task the plugin's loop_fini runs. Before (issue 28) loop_fini
 * ran in the same close hook, and the task used freed state (an ASan
 * use-after-free in weft-kv-server over uring, found under stress-ng). */
static struct {
  atomic_int fini_ran;  /* loop_fini ran */
  atomic_int task_ran;  /* the close's task ran */
  atomic_int task_late; /* ... after loop_fini */
} late;

static int late_loop_init(weft_loop *loop, void **state) {
  (void)loop;
  *state = &late;
  return 0;
}

static void late_loop_fini(weft_loop *loop, void *state) {
  (void)loop;
  (void)state;
  atomic_store(&late.fini_ran, 1);
}

static int late_connect(weft_channel *ch, const weft_endpoint *ep) {
  (void)ep;
  weft_channel_connected(ch, 0);
  return 0;
}

static void late_task(void *arg) {
  atomic_store(&late.task_late, atomic_load(&late.fini_ran));
  atomic_store(&late.task_ran, 1);
  weft_channel_release(arg);
}

static void late_close(weft_channel *ch) {
  ck_assert_int_eq(weft_loop_execute(weft_channel_loop(ch), late_task,
                                     weft_channel_retain(ch)),
                   0);
}

static void late_init(weft_channel *ch, void *arg) {
  (void)ch;
  (void)arg; /* an empty pipeline: nothing is read or written */
}

static const weft_transport_ops fake_late = {.name = "latefini",
                                             .loop_init = late_loop_init,
                                             .loop_fini = late_loop_fini,
                                             .connect = late_connect,
                                             .close = late_close};

START_TEST(registry_loop_state_outlives_tasks_of_closes) {
  ck_assert_int_eq(weft_transport_register(&fake_late), 0);
  weft_loop_group *g = th_group_start("late", 1);
  atomic_int status = 1;
  th_connect(g, NULL, "latefini://127.0.0.1:1", late_init, NULL, &status);
  WAIT_FOR(atomic_load(&status) != 1);
  ck_assert_int_eq(atomic_load(&status), 0);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  int task_ran = atomic_load(&late.task_ran);
  int fini_ran = atomic_load(&late.fini_ran);
  int task_after_fini = atomic_load(&late.task_late);
  ck_assert_int_eq(task_ran, 1);
  ck_assert_int_eq(fini_ran, 1);
  ck_assert_int_eq(task_after_fini, 0);
}
END_TEST

Suite *weft_test_suite(void) {
  /* registry_register_refused_full last: it fills the registry, which would
   * break the tests after it when Check runs them in one process
   * (CK_FORK=no). */
  return th_suite("registry", "core", 0, registry_find_registered,
                  registry_register_refused_duplicate,
                  registry_register_refused_builtin_name,
                  registry_register_refused_bad_name,
                  registry_find_unknown_lists_registered,
                  registry_find_probe_failure_cached,
                  registry_find_probe_failure_without_reason,
                  registry_find_builtin_tcp,
                  registry_config_set_reaches_plugin_checked,
                  registry_env_reaches_plugin_before_probe,
                  registry_env_bad_value_fails_probe_naming_variable,
                  registry_fallback_replaces_failed_probe,
                  registry_endpoint_caps_from_plugin_caps,
                  registry_endpoint_caps_refused_unavailable,
                  registry_loop_state_outlives_tasks_of_closes,
                  registry_register_refused_full, NULL);
}
