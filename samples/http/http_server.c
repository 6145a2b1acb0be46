/* SPDX-License-Identifier: Apache-2.0 */
/* weft-http: an HTTP/1.1 server on weft's HTTP codec (weft/http.h).
 *
 *   weft-http [-c FILE] [-o section.key=value ...]
 *
 * Endpoints: /plaintext and /json as TechEmpower's benchmarks define them
 * ("Hello, World!" as text/plain; {"message":"Hello, World!"} serialised
 * per request), and, when [http] root is set, the regular files below that
 * directory (GET and HEAD; "/" is index.html), written as file regions
 * as the connection drains: sent with sendfile(2) where the transport can
 * (plaintext tcp), else read into buffers by the pipeline. At exit it
 * prints how many file bytes took each path. An access log in the common log
 * format goes to [http] access_log. TLS with [http] tls = on and the [tls] keys
 * (ALPN http/1.1). The transport is the config's, as for every weft program.
 *
 * Each connection keeps the requests the codec delivered in order and
 * answers them one after the other, so pipelined requests behind a large
 * file wait for it (the codec stops reading past its max_pipelined).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <weft/weft.h>

/* ---- configuration: weft's sections plus [http] and [tls] ---- */

typedef struct http_opts {
  char root[4096];       /* "" = no static files */
  char access_log[4096]; /* "" = none, "-" = stderr, else a file */
  bool tls;
  weft_http_server_options codec;
  weft_tls_options tls_opts;
} http_opts;

static int parse_u64(const char *v, uint64_t max, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0 || n > max)
    return WEFT_EINVAL;
  *out = n;
  return 0;
}

static int set_number(http_opts *o, const char *key, const char *value,
                      char *err, size_t err_len) {
  bool ms = strcmp(key, "header_timeout_ms") == 0 ||
            strcmp(key, "body_timeout_ms") == 0;
  uint64_t v, max = ms                             ? 3600000
                    : strcmp(key, "max_body") == 0 ? (1ull << 40)
                                                   : (64u << 20);
  if (parse_u64(value, max, &v) < 0) {
    snprintf(err, err_len, "expected an integer from 0 to %" PRIu64, max);
    return WEFT_EINVAL;
  }
  if (strcmp(key, "max_body") == 0)
    o->codec.max_body = v;
  else if (strcmp(key, "max_head_bytes") == 0)
    o->codec.max_head_bytes = (size_t)v;
  else if (strcmp(key, "max_headers") == 0)
    o->codec.max_headers = (size_t)v;
  else if (strcmp(key, "body_timeout_ms") == 0)
    o->codec.body_timeout_ms = (uint32_t)v;
  else
    o->codec.header_timeout_ms = (uint32_t)v;
  return 0;
}

static int http_section(void *arg, const char *section, const char *key,
                        const char *value, char *err, size_t err_len) {
  http_opts *o = arg;
  if (strcmp(section, "tls") == 0)
    return weft_tls_options_set(&o->tls_opts, key, value, err, err_len);
  if (strcmp(section, "http") != 0)
    return WEFT_ENOENT;
  if (strcmp(key, "root") == 0 || strcmp(key, "access_log") == 0) {
    char *dst = key[0] == 'r' ? o->root : o->access_log;
    if (strlen(value) >= sizeof o->root) {
      snprintf(err, err_len, "a path of at most %zu bytes", sizeof o->root - 1);
      return WEFT_EINVAL;
    }
    strcpy(dst, value);
    return 0;
  }
  if (strcmp(key, "tls") == 0) {
    bool on = !strcmp(value, "on") || !strcmp(value, "yes") ||
              !strcmp(value, "true") || !strcmp(value, "1");
    bool off = !strcmp(value, "off") || !strcmp(value, "no") ||
               !strcmp(value, "false") || !strcmp(value, "0");
    if (!on && !off) {
      snprintf(err, err_len, "expected on or off");
      return WEFT_EINVAL;
    }
    o->tls = on;
    return 0;
  }
  if (strcmp(key, "max_body") == 0 || strcmp(key, "max_head_bytes") == 0 ||
      strcmp(key, "max_headers") == 0 ||
      strcmp(key, "header_timeout_ms") == 0 ||
      strcmp(key, "body_timeout_ms") == 0)
    return set_number(o, key, value, err, err_len);
  return WEFT_ENOENT;
}

static const weft_config_key http_keys[] = {
    {"http", "root", "",
     "directory whose regular files are served (GET, HEAD); empty: none"},
    {"http", "access_log", "",
     "common log format lines: a file, - for stderr, empty for none"},
    {"http", "tls", "off",
     "on or off: TLS ([tls] keys), ALPN http/1.1 (or http/1.0)"},
    {"http", "max_head_bytes", "16384",
     "request line and headers, bytes, 0 to 67108864 (414/431 above)"},
    {"http", "max_headers", "100", "header fields per request (431 above)"},
    {"http", "max_body", "1048576",
     "request body bytes, 0 to 1099511627776 (413 above)"},
    {"http", "header_timeout_ms", "10000",
     "ms from a request's first byte to its head's end (408), 0 = none"},
    {"http", "body_timeout_ms", "60000",
     "ms between two reads of a request's body (408), 0 (none) to 3600000"},
    {NULL, NULL, NULL, NULL}};

/* [http] keys then [tls] keys, ended by a NULL entry. */
static weft_config_key all_keys[sizeof http_keys / sizeof http_keys[0] +
                                WEFT_TLS_CONFIG_KEY_COUNT];

static weft_cli cli = {
    .prog = "weft-http",
    .synopsis = "[-c FILE] [-o section.key=value ...]",
    .about = "An HTTP/1.1 server on weft's HTTP codec: /plaintext and /json "
             "(TechEmpower's\ndefinitions), the files below [http] root, an "
             "access log, TLS with [http] tls.\nListens on [server] listen; "
             "stops at SIGINT or SIGTERM.",
    .examples = "weft-http -o server.listen=127.0.0.1:8080 -o http.root=. & "
                "curl http://127.0.0.1:8080/plaintext\n"
                "weft-http -o server.listen=uring://127.0.0.1:8443 -o "
                "http.tls=on -o tls.cert_file=cert.pem -o "
                "tls.key_file=key.pem",
    .app = http_section};

/* ---- the application handler ---- */

typedef struct server_ctx {
  http_opts opts;
  int root_fd; /* -1 without [http] root */
  FILE *log;   /* NULL without an access log */
} server_ctx;

static server_ctx app;

/* A request waiting for its turn, and how it is answered. */
typedef struct pending {
  weft_http_request *req; /* kept for the access log */
  uint64_t body_bytes;
} pending;

#define MAX_PENDING 64 /* the codec's default max_pipelined */

typedef struct conn {
  pending q[MAX_PENDING];
  size_t q_head, q_len;
  weft_http_request *cur; /* the head whose body is being read */
  uint64_t cur_body;
  int fd;             /* the file being sent, or -1 */
  uint64_t file_off;  /* the offset of its next byte to write */
  uint64_t file_left; /* its bytes still to write */
  bool pumping;       /* inside pump_file: a flush can report writability */
  int status;         /* of the response being sent, for the log */
  uint64_t sent;      /* body bytes of it */
} conn;

static void access_log(weft_ctx *ctx, const weft_http_request *req, int status,
                       uint64_t bytes) {
  if (app.log == NULL)
    return;
  char peer[64] = "-";
  weft_channel_remote_address(weft_ctx_channel(ctx), peer, sizeof peer);
  char when[64];
  time_t now = time(NULL);
  struct tm tm;
  strftime(when, sizeof when, "%d/%b/%Y:%H:%M:%S +0000", gmtime_r(&now, &tm));
  /* The target is the client's text: printed with its length, and a
   * control byte in it (a log injection) cannot reach the log since
   * llhttp refuses those in a request-target. */
  fprintf(app.log, "%s - - [%s] \"%.*s %.*s HTTP/%u.%u\" %d %" PRIu64 "\n",
          peer, when, (int)req->method_name.len, req->method_name.ptr,
          (int)req->target.len, req->target.ptr, req->version_major,
          req->version_minor, status, bytes);
}

static const char *content_type(const char *path) {
  static const char *const types[][2] = {{".html", "text/html; charset=utf-8"},
                                         {".txt", "text/plain; charset=utf-8"},
                                         {".css", "text/css"},
                                         {".js", "text/javascript"},
                                         {".json", "application/json"},
                                         {".png", "image/png"},
                                         {".jpg", "image/jpeg"},
                                         {".svg", "image/svg+xml"}};
  const char *dot = strrchr(path, '.');
  for (size_t i = 0; dot != NULL && i < sizeof types / sizeof types[0]; i++)
    if (strcmp(dot, types[i][0]) == 0)
      return types[i][1];
  return "application/octet-stream";
}

/* The file below the root that `target` names, opened, or a status: 404
 * for none, 400 for a path that climbs out ("..") or holds a NUL. */
static int open_target(weft_http_str target, int *fd, off_t *size,
                       const char **type) {
  char path[1024];
  size_t n = target.len;
  const char *q = memchr(target.ptr, '?', n);
  if (q != NULL)
    n = (size_t)(q - target.ptr);
  if (n == 0 || target.ptr[0] != '/' || n >= sizeof path - 16)
    return 400;
  memcpy(path, target.ptr + 1, n - 1);
  path[n - 1] = '\0';
  if (memchr(path, '\0', n - 1) != NULL || strstr(path, "..") != NULL)
    return 400;
  if (n == 1 || path[n - 2] == '/')
    strcat(path, "index.html");
  int f = openat(app.root_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (f < 0 || fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (f >= 0)
      close(f);
    return 404;
  }
  *fd = f;
  *size = st.st_size;
  *type = content_type(path);
  return 0;
}

static void conn_next(weft_ctx *ctx, conn *c);

/* Bytes per file region written: where regions go to the transport as
 * they are (plaintext tcp: sendfile), 1 MiB, so a 64 MiB file is 64 of
 * them; where the pipeline reads them into buffers (TLS, uring, ucx), 64
 * KiB, the memory a connection held when this server read the file
 * itself. Either way a region counts against the watermarks as a buffer
 * of its size would. */
#define REGION_DIRECT (1u << 20)
#define REGION_READ 65536u

/* Writes the file's next pieces as file regions while the channel is
 * writable. The last region owns the descriptor (it closes it when
 * released, after the regions before it); until then the connection
 * does (app_removed). A file that shrinks under us fails the region's
 * write and closes the channel with the reason (weft/file_region.h). */
static void pump_file(weft_ctx *ctx, conn *c) {
  if (c->pumping)
    return;
  c->pumping = true;
  weft_channel *ch = weft_ctx_channel(ctx);
  uint64_t piece =
      weft_ctx_file_region_direct(ctx) ? REGION_DIRECT : REGION_READ;
  while (c->file_left > 0 && weft_channel_is_active(ch) &&
         weft_channel_is_writable(ch)) {
    uint64_t want = c->file_left < piece ? c->file_left : piece;
    bool last = want == c->file_left;
    weft_file_region *r;
    if (weft_file_region_new(&r, c->fd, c->file_off, want,
                             last ? WEFT_FILE_REGION_CLOSE_FD : 0) < 0) {
      c->pumping = false;
      weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "static file region");
      return;
    }
    if (last)
      c->fd = -1; /* the region's now */
    c->file_off += want;
    c->file_left -= want;
    c->sent += want;
    weft_ctx_write(ctx, r, WEFT_PROMISE_NONE);
    weft_ctx_flush(ctx);
  }
  c->pumping = false;
  if (c->file_left > 0)
    return;       /* writability_changed(true) goes on */
  if (c->fd >= 0) /* HEAD, or an empty file: no region took it */
    close(c->fd);
  c->fd = -1;
  weft_ctx_write(ctx, weft_http_end(), WEFT_PROMISE_NONE);
  pending *p = &c->q[c->q_head];
  access_log(ctx, p->req, c->status, c->sent);
  weft_msg_release(p->req);
  c->q_head = (c->q_head + 1) % MAX_PENDING;
  c->q_len--;
  conn_next(ctx, c);
}

static int respond_text(weft_ctx *ctx, const weft_http_request *req, int status,
                        const char *type, const char *body) {
  size_t len = strlen(body);
  weft_http_respond(ctx, status, type, body, len);
  access_log(ctx, req, status, req->method == WEFT_HTTP_HEAD ? 0 : len);
  return 0;
}

/* Answers one request; false when a file is being sent (the rest waits). */
static bool answer(weft_ctx *ctx, conn *c, const weft_http_request *req) {
  weft_http_str t = req->target;
  bool get = req->method == WEFT_HTTP_GET || req->method == WEFT_HTTP_HEAD;
  if (get && t.len == 10 && memcmp(t.ptr, "/plaintext", 10) == 0) {
    respond_text(ctx, req, 200, "text/plain", "Hello, World!");
    return true;
  }
  if (get && t.len == 5 && memcmp(t.ptr, "/json", 5) == 0) {
    char json[64]; /* serialised per request, as the benchmark asks */
    snprintf(json, sizeof json, "{\"message\":\"%s\"}", "Hello, World!");
    respond_text(ctx, req, 200, "application/json", json);
    return true;
  }
  if (app.root_fd < 0) {
    respond_text(ctx, req, 404, "text/plain", "Not Found\n");
    return true;
  }
  if (!get) {
    respond_text(ctx, req, 405, "text/plain", "Method Not Allowed\n");
    return true;
  }
  int fd;
  off_t size;
  const char *type;
  int status = open_target(t, &fd, &size, &type);
  if (status != 0) {
    respond_text(ctx, req, status, "text/plain",
                 status == 404 ? "Not Found\n" : "Bad Request\n");
    return true;
  }
  weft_http_response *r = weft_http_response_new(200);
  if (r == NULL || weft_http_response_add_header(r, "Content-Type", type)) {
    weft_msg_release(r);
    close(fd);
    respond_text(ctx, req, 500, "text/plain", "Internal Server Error\n");
    return true;
  }
  r->content_length = size;
  weft_ctx_write(ctx, r, WEFT_PROMISE_NONE);
  c->status = 200;
  c->sent = 0;
  c->fd = fd;
  c->file_off = 0;
  c->file_left = req->method == WEFT_HTTP_HEAD ? 0 : (uint64_t)size;
  pump_file(ctx, c);
  return false;
}

/* Answers the waiting requests in order until one sends a file. */
static void conn_next(weft_ctx *ctx, conn *c) {
  while (c->q_len > 0 && c->fd < 0) {
    pending *p = &c->q[c->q_head];
    if (!answer(ctx, c, p->req))
      return; /* pump_file pops it when the file is sent */
    weft_msg_release(p->req);
    c->q_head = (c->q_head + 1) % MAX_PENDING;
    c->q_len--;
  }
}

static void app_read(weft_ctx *ctx, void *msg) {
  conn *c = weft_ctx_state(ctx);
  if (weft_msg_is(msg, &weft_http_request_type)) {
    weft_msg_release(c->cur);
    c->cur = msg;
    c->cur_body = 0;
    return;
  }
  if (weft_msg_is(msg, &weft_buf_msg_type)) { /* request bodies are unused */
    c->cur_body += weft_buf_readable(msg);
    weft_msg_release(msg);
    return;
  }
  weft_msg_release(msg); /* the end marker */
  if (c->cur == NULL || c->q_len == MAX_PENDING) {
    weft_ctx_fire_exception_caught(ctx, WEFT_EPROTO, "http: request order");
    return;
  }
  c->q[(c->q_head + c->q_len) % MAX_PENDING] =
      (pending){.req = c->cur, .body_bytes = c->cur_body};
  c->q_len++;
  c->cur = NULL;
  conn_next(ctx, c);
}

static void app_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void app_writability(weft_ctx *ctx, bool writable) {
  conn *c = weft_ctx_state(ctx);
  if (writable && c->fd >= 0)
    pump_file(ctx, c);
  weft_ctx_fire_writability_changed(ctx, writable);
}

static void app_removed(weft_ctx *ctx) {
  conn *c = weft_ctx_state(ctx);
  for (; c->q_len > 0; c->q_len--, c->q_head = (c->q_head + 1) % MAX_PENDING)
    weft_msg_release(c->q[c->q_head].req);
  weft_msg_release(c->cur);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

static const weft_handler app_handler = {.name = "weft-http",
                                         .channel_read = app_read,
                                         .channel_read_complete =
                                             app_read_complete,
                                         .writability_changed = app_writability,
                                         .handler_removed = app_removed};

static void child_init(weft_channel *ch, void *arg) {
  weft_tls_context *tls = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  conn *c = calloc(1, sizeof *c);
  if (c == NULL || (tls != NULL && weft_tls_add_first(p, tls, NULL) != 0) ||
      weft_http_server_codec_add_last(p, "http", &app.opts.codec) != 0 ||
      (c->fd = -1, weft_pipeline_add_last(p, "app", &app_handler, c)) != 0) {
    free(c);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  }
}

/* ---- main ---- */

static int load_config(int argc, char **argv, weft_config *cfg) {
  weft_config_init(cfg);
  /* A connection that neither sends nor reads for 75 s (nginx's
   * keepalive_timeout) is closed, a stalled body included (a body dripped
   * faster than that is not: there is no body rate limit). Output and
   * connections are bounded as in the KV server. */
  cfg->idle_timeout_ms = 75000;
  cfg->output_limit = 64 << 20;
  cfg->max_connections = 10000;
  size_t n = sizeof http_keys / sizeof http_keys[0] - 1;
  memcpy(all_keys, http_keys, n * sizeof http_keys[0]);
  weft_tls_config_keys_copy(all_keys + n, WEFT_TLS_CONFIG_KEY_COUNT + 1, "tls");
  cfg->app_keys = all_keys;
  weft_http_server_options_init(&app.opts.codec);
  weft_tls_options_init(&app.opts.tls_opts);
  /* http/1.0 too: curl --http1.0 offers only that one. */
  strcpy(app.opts.tls_opts.alpn, "http/1.1,http/1.0");
  cli.app_arg = &app.opts;
  int first = weft_cli_parse(&cli, cfg, argc, argv);
  if (first <= 0)
    return first == 0 ? 1 : -1;
  if (first != argc) {
    weft_cli_usage_error(&cli, "unexpected argument '%s'", argv[first]);
    return -1;
  }
  return 0;
}

static int open_outputs(weft_tls_context **tls) {
  app.root_fd = -1;
  if (app.opts.root[0] != '\0' &&
      (app.root_fd = open(app.opts.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) <
          0) {
    fprintf(stderr, "weft-http: [http] root %s: %s\n", app.opts.root,
            strerror(errno));
    return -1;
  }
  if (strcmp(app.opts.access_log, "-") == 0)
    app.log = stderr;
  else if (app.opts.access_log[0] != '\0' &&
           (app.log = fopen(app.opts.access_log, "ae")) == NULL) {
    fprintf(stderr, "weft-http: [http] access_log %s: %s\n",
            app.opts.access_log, strerror(errno));
    return -1;
  }
  if (app.log != NULL)
    setvbuf(app.log, NULL, _IOLBF, 0);
  char err[256];
  if (app.opts.tls &&
      weft_tls_context_new(tls, WEFT_TLS_SERVER, &app.opts.tls_opts, err,
                           sizeof err) < 0) {
    fprintf(stderr, "weft-http: [tls] %s\n", err);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  weft_config cfg;
  int c = load_config(argc, argv, &cfg);
  if (c != 0)
    return c > 0 ? 0 : 2;
  weft_tls_context *tls = NULL;
  if (open_outputs(&tls) < 0)
    return 2;
  signal(SIGPIPE, SIG_IGN);
  /* SIGINT and SIGTERM end the server (weft_cli_wait_stop). */
  sigset_t stop;
  weft_loop_group *group;
  int rc = weft_cli_loops_start(&cli, &cfg.loop, &stop, &group);
  if (rc < 0)
    return 1;
  char uri[WEFT_CONFIG_URI_MAX + 16];
  weft_endpoint ep;
  rc = weft_config_endpoint_parse(&cfg, cfg.listen, &ep, uri, sizeof uri);
  if (rc < 0) /* the config layer checked it: not reached */
    fprintf(stderr, "weft-http: [server] listen: %s\n", uri);
  weft_server_bootstrap sb = {
      .group = group, .child_init = child_init, .child_init_arg = tls};
  weft_config_server_bootstrap(&cfg, &sb);
  weft_server *srv = NULL;
  if (rc == 0 && (rc = weft_server_bind_endpoint(&srv, &sb, &ep)) == 0) {
    weft_server_address(srv, uri, sizeof uri);
    fprintf(stderr, "weft-http: listening on %s\n", uri);
    weft_cli_wait_stop(&stop);
    weft_cli_log_loop_stats(&cli, group);
    weft_server_close(srv);
  }
  weft_loop_group_stop(group);
  int join = weft_loop_group_join(group);
  weft_loop_group_free(group);
  weft_tls_context_release(tls);
  if (app.root_fd >= 0) { /* which path the static files took (tests) */
    weft_file_region_stats st;
    weft_file_region_stats_get(&st);
    fprintf(stderr,
            "weft-http: static files: %" PRIu64
            " bytes sent from the file (sendfile), %" PRIu64
            " read into buffers\n",
            st.sent_bytes, st.read_bytes);
  }
  return rc < 0 || join < 0 ? 1 : 0;
}
