/* SPDX-License-Identifier: Apache-2.0 */
/* weft/config.h: configuration from an INI file and WEFT_* variables.
 *
 * An INI file (parsed with libinih) with the sections below; samples add
 * their own ([kv], [bench], [echo]) through a section callback. Example:
 *
 *   [loop]
 *   loops = 2              ; 0 = one per CPU less one, at least 1
 *   busy_poll_us = 20      ; µs; 0 = always block, -1 = never block
 *   pin = false            ; true: loop i stays on CPU i (CPUs of its own)
 *   poll_budget = 64
 *   pool_retain_bytes = 4194304 ; bytes of empty buffer slabs kept per loop
 *
 *   [transport]
 *   name = tcp             ; used by endpoints written without a scheme
 *   tcp_nodelay = true
 *   so_sndbuf = 0          ; bytes, 0 = the kernel's default
 *   so_rcvbuf = 0
 *   write_low_watermark = 32768
 *   write_high_watermark = 65536
 *   connect_timeout_ms = 10000
 *   max_messages_per_read = 16 ; reads per loop iteration, then yield
 *   max_bytes_per_read = 262144 ; bytes per loop iteration, then yield
 *
 *   [server]
 *   listen = 0.0.0.0:7000  ; or tcp://0.0.0.0:7000, uring://...
 *   backlog = 511
 *   max_connections = 0    ; accepted channels open at once, 0 = none
 *   idle_timeout_ms = 0    ; close after that long without a read, 0 = never
 *   output_limit = 67108864 ; bytes queued unsent before closing, 0 = none
 *   flow_control = true    ; stop reading while replies cannot leave
 *
 *   [client]
 *   connect = 127.0.0.1:7000
 *
 * Swapping the transport is one line: `name = uring` under [transport].
 * Every key can also be set in the environment as WEFT_<SECTION>_<KEY>
 * (WEFT_LOOP_BUSY_POLL_US=0, WEFT_TRANSPORT_NAME=uring), which wins over the
 * file. An unknown section or key, or a bad value, is an error whose message
 * names the file, the line, the key and the valid values, e.g.
 *
 *   weft.ini:3: [loop] busy_poll_us = "fast": expected an integer >= -1
 *   (microseconds; 0 = always block, -1 = never block)
 */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include <weft/bootstrap.h>
#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Longest endpoint text a config holds, including the NUL. */
#define WEFT_CONFIG_URI_MAX 300

/**
 * One configuration key of the application (a section weft does not know,
 * such as [kv]): what --help lists with its default, what
 * weft_config_apply_env reads from the environment, and what error messages
 * name as valid. A table of them ends with an entry whose section is NULL,
 * and keeps the keys of one section together.
 */
typedef struct weft_config_key {
  const char *section; /* "kv" */
  const char *name;    /* "rpc_listen" */
  const char *def;     /* the default as the file spells it: "127.0.0.1:7001" */
  const char *values;  /* the valid values: "host:port or scheme://host:port" */
} weft_config_key;

/** A configuration. Initialise with weft_config_init(). */
typedef struct weft_config {
  weft_loop_options loop;           /* [loop] */
  char transport[16];               /* [transport] name (default: the
                                       first built-in, tcp) */
  weft_channel_config channel;      /* [transport] channel options */
  char listen[WEFT_CONFIG_URI_MAX]; /* [server] listen (default
                                       "0.0.0.0:7000") */
  int backlog;                      /* [server] backlog (default 511) */
  int max_connections;  /* [server] max_connections: accepted channels
                           open at once (default 0 = none) */
  int idle_timeout_ms;  /* [server] idle_timeout_ms: close a channel that
                           read nothing that long (default 0 = never) */
  int64_t output_limit; /* [server] output_limit: bytes queued unsent
                           before a channel is closed (default
                           WEFT_SERVER_OUTPUT_LIMIT, 64 MiB; 0 = none) */
  int flow_control;     /* [server] flow_control: 0/1 (default 1) */
  char connect[WEFT_CONFIG_URI_MAX]; /* [client] connect (default
                                        "127.0.0.1:7000") */
  /* The application's own keys (NULL = none listed; the table is the
   * caller's and must outlive the config). With a table, a section or key
   * the table does not list is refused with the valid ones named, before
   * the application's callback is asked, and apply_env reads every key. */
  const weft_config_key *app_keys;
  /* What the program reads, so that a setting it would ignore is not taken
   * silently (weft_cli sets both from its own fields; NULL = no check).
   * `read_sections`: NULL-terminated names, weft's and the application's.
   * `unread_keys`: NULL-terminated "section.key=what is read instead"
   * ("server.listen=[kv] rpc_listen and [kv] resp_listen") for keys of a
   * read section that the program does not use. Such a key given with -o
   * is an error (WEFT_EBADCONF, naming what is read instead); from a file
   * or the environment, which several programs may share (a server's and
   * its clients' keys in one file), it is ignored with an info line
   * (weft_log; WEFT_LOG_LEVEL=info shows it). --help leaves unread keys
   * out. */
  const char *const *read_sections;
  const char *const *unread_keys;
} weft_config;

/**
 * Handles a key of a section weft does not know (an application's). Return
 * 0 if handled, WEFT_ENOENT if the section or key is unknown (weft then
 * reports it), or WEFT_EINVAL with a sentence in `err` naming the valid
 * values (weft prefixes file, line, section and key).
 */
typedef int (*weft_config_section_cb)(void *arg, const char *section,
                                      const char *key, const char *value,
                                      char *err, size_t err_len);

/** Fills `cfg` with the defaults. */
void weft_config_init(weft_config *cfg);

/**
 * Reads the INI file at `path` into `cfg` (keys not in the file keep their
 * value). `app` (may be NULL) handles sections weft does not know. Returns
 * 0, or WEFT_ENOENT / the open error (file missing: message names it) or
 * WEFT_EBADCONF with the first problem in `err` ("file:line: [section] key
 * ...: valid values"). Stops at the first error. Any thread.
 */
int weft_config_load(weft_config *cfg, const char *path,
                     weft_config_section_cb app, void *app_arg, char *err,
                     size_t err_len);

/**
 * Applies WEFT_<SECTION>_<KEY> environment variables for every key weft
 * knows, and for `app_keys` (a NULL-terminated list of "section.key"
 * strings the application knows, may be NULL). Returns 0 or WEFT_EBADCONF
 * with `err` naming the variable. Any thread (reads the environment).
 */
int weft_config_apply_env(weft_config *cfg, const char *const *app_keys,
                          weft_config_section_cb app, void *app_arg, char *err,
                          size_t err_len);

/**
 * Sets one key as the file would ("loop", "busy_poll_us", "0"). `where`
 * (e.g. "weft.ini:3" or "WEFT_LOOP_BUSY_POLL_US") prefixes error messages.
 * Returns 0 or WEFT_EBADCONF with `err` filled. For command-line flags.
 */
int weft_config_set(weft_config *cfg, const char *where, const char *section,
                    const char *key, const char *value,
                    weft_config_section_cb app, void *app_arg, char *err,
                    size_t err_len);

/**
 * Sets one key from a command-line flag's text "section.key=value", as
 * `-o` does in every weft program. The key is what follows the last dot
 * before '=', so a section may hold dots ("transport.ucx.tls=tcp" sets
 * [transport.ucx] tls); the value may be empty and may hold '=' and dots.
 * Errors read "-o <spec>: <what is wrong, and the valid values>". Returns
 * 0 or WEFT_EBADCONF with `err` filled. Relations between keys are not
 * checked here (a low watermark may come before its high one): call
 * weft_config_check once the last flag is applied. Any thread.
 */
int weft_config_set_option(weft_config *cfg, const char *spec,
                           weft_config_section_cb app, void *app_arg, char *err,
                           size_t err_len);

/**
 * Checks what single keys cannot: relations between keys (today
 * write_low_watermark <= write_high_watermark). `where` (e.g. "-o")
 * prefixes the message. Returns 0 or WEFT_EBADCONF with `err` filled.
 */
int weft_config_check(const weft_config *cfg, const char *where, char *err,
                      size_t err_len);

/**
 * Writes every key of the configuration as an INI file, with each key's
 * current value (the defaults, on a config fresh from weft_config_init and
 * the program's own defaults) and its valid values as a comment: the
 * sections named in `sections` (NULL = all of them) among weft's own and
 * the application's (cfg->app_keys), and with "transport" the settings of
 * every registered transport ([transport.<name>]). What `--help` shows.
 * Returns 0 or WEFT_EIO.
 */
int weft_config_print(const weft_config *cfg, const char *const *sections,
                      FILE *out);

/**
 * Fills the parts of a server bootstrap that a config holds: backlog,
 * max_connections, and child_options ([transport] channel options plus the
 * [server] limits: flow control, output limit, idle timeout). The caller
 * sets group, listen, child_init and reject_message. Any thread.
 */
void weft_config_server_bootstrap(const weft_config *cfg,
                                  weft_server_bootstrap *sb);

/**
 * Resolves an endpoint text from a config into text: returns `uri`
 * unchanged if it has a scheme, or "<cfg->transport>://<uri>". Writes into
 * `out`. Returns 0 or WEFT_ENOSPC. For programs that hand the text on (to
 * weft_server_bind, or to a client library that takes URIs); a program
 * that binds or connects itself uses weft_config_endpoint_parse.
 */
int weft_config_endpoint(const weft_config *cfg, const char *uri, char *out,
                         size_t out_len);

/**
 * Parses an address of the configuration (cfg->listen, cfg->connect, or an
 * application's own key such as [kv] resp_listen) into `*out`, once:
 * "host:port" takes `cfg->transport` ([transport] name) as its transport,
 * "scheme://host:port" its own scheme. Hand the result to
 * weft_server_bind_endpoint or weft_bootstrap_connect_endpoint, and ask it
 * what its transport offers with weft_endpoint_caps, instead of passing
 * text around. The transport is not looked up here (no probe runs).
 * Returns 0, or WEFT_EINVAL with a sentence in `err` (if not NULL) naming
 * the expected form; `*out` is then untouched. Any thread.
 */
int weft_config_endpoint_parse(const weft_config *cfg, const char *address,
                               weft_endpoint *out, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CONFIG_H */
