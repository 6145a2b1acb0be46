/* SPDX-License-Identifier: Apache-2.0 */
/* RESP2: the command decoder (client -> server) and reply encoders. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/error.h>
#include <weft/resp.h>

#include <weft/decoder.h>

#include "codec/codec_internal.h"

/* A count or length line ("*123\r\n", "$-1\r\n") longer than this is
 * malformed: 20 digits, a sign, the prefix and "\r\n" fit. */
#define MAX_NUMBER_LINE 24

typedef enum phase {
  PHASE_START = 0,   /* at a command's first byte */
  PHASE_BULK_HEADER, /* at "$<len>\r\n" of the next argument */
  PHASE_BULK_DATA,   /* at an argument's bytes and their "\r\n" */
} phase;

typedef struct arg_pos {
  size_t off, len; /* from the command's first byte */
} arg_pos;

/* Parse progress is kept as offsets from the reader index, which stay valid
 * when the base moves unread bytes into its cumulation buffer; so a command
 * arriving a byte at a time is parsed once, not once per byte. */
typedef struct resp_decoder {
  weft_decoder base;
  weft_resp_options o;
  phase phase;
  size_t pos;    /* next byte to parse */
  size_t nargs;  /* the array's element count */
  size_t got;    /* arguments parsed */
  arg_pos *args; /* the arguments parsed, args_cap slots (args_reserve) */
  size_t args_cap;
  size_t scanned; /* inline: bytes known to hold no '\n' */
} resp_decoder;

static void cmd_release(void *msg) { weft_resp_cmd_release(msg); }

const weft_msg_type weft_resp_cmd_type = {.name = "weft_resp_cmd",
                                          .release = cmd_release};

void weft_resp_cmd_release(weft_resp_cmd *cmd) {
  if (cmd == NULL)
    return;
  weft_buf_release(cmd->data);
  free(cmd);
}

weft_buf *weft_resp_arg_slice(const weft_resp_cmd *cmd, size_t i) {
  if (i >= cmd->argc)
    return NULL;
  return weft_buf_slice(cmd->data, (size_t)(cmd->argv[i].ptr - cmd->data->base),
                        cmd->argv[i].len);
}

bool weft_resp_arg_equals(const weft_resp_cmd *cmd, size_t i, const char *s) {
  size_t n = strlen(s);
  return i < cmd->argc && cmd->argv[i].len == n &&
         strncasecmp((const char *)cmd->argv[i].ptr, s, n) == 0;
}

void weft_resp_options_init(weft_resp_options *o) {
  *o = (weft_resp_options){.max_args = 1024,
                           .max_bulk = 512 * 1024,
                           .max_command = 1024 * 1024,
                           .max_inline = 64 * 1024};
}

/* ---- decoding ---- */

/* Argument slots kept between commands; a command with more grows them
 * as its arguments arrive, and they are given back after it. */
#define ARGS_KEPT 1024

static void reset(resp_decoder *s) {
  s->phase = PHASE_START;
  s->pos = s->nargs = s->got = s->scanned = 0;
  if (s->args_cap > ARGS_KEPT) { /* one huge command's: not for every one */
    free(s->args);
    s->args = NULL;
    s->args_cap = 0;
  }
}

/* Makes room for `n` argument slots: 0, or WEFT_ENOMEM (the decoder
 * failed). Doubling, so the slots of a command grow with the arguments
 * received, never with the count a peer merely claims. */
static int args_reserve(resp_decoder *s, size_t n) {
  if (n <= s->args_cap)
    return 0;
  size_t cap = s->args_cap ? s->args_cap : 8;
  while (cap < n)
    cap *= 2;
  arg_pos *a = realloc(s->args, cap * sizeof *a);
  if (a == NULL)
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "resp decoder");
  s->args = a;
  s->args_cap = cap;
  return 0;
}

/* Parses "<prefix><integer>\r\n" at `pos`. Returns 1 with the value and the
 * offset after the line, 0 if incomplete, WEFT_EBADFRAME if malformed. */
static int parse_number_line(resp_decoder *s, weft_buf *in, size_t pos,
                             int64_t *value, size_t *next) {
  const uint8_t *p = weft_buf_rptr(in) + pos;
  size_t avail = weft_buf_readable(in) - pos;
  size_t i = 1; /* past the prefix */
  bool neg = i < avail && p[i] == '-';
  i += neg;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < avail && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
    if (digits == 18)
      goto bad; /* keeps v far from overflow; no sane count is this long */
    v = v * 10 + (uint64_t)(p[i] - '0');
  }
  if (i + 2 > avail)
    return avail >= MAX_NUMBER_LINE
               ? weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                                   p[0] == '*' ? "Protocol error: too big "
                                                 "mbulk count string"
                                               : "Protocol error: too big "
                                                 "bulk count string")
               : 0;
  if (digits == 0 || p[i] != '\r' || p[i + 1] != '\n')
    goto bad;
  *value = neg ? -(int64_t)v : (int64_t)v;
  *next = pos + i + 2;
  return 1;
bad:
  return weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                           p[0] == '*'
                               ? "Protocol error: invalid multibulk length"
                               : "Protocol error: invalid bulk length");
}

/* The finished command: one slice of its bytes, argv pointing into it. */
static int emit(resp_decoder *s, weft_buf *in, size_t len, size_t argc,
                const arg_pos *args, bool is_inline, void **out) {
  weft_resp_cmd *cmd = malloc(sizeof *cmd + argc * sizeof(weft_resp_arg));
  if (cmd == NULL)
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "resp decoder: command");
  weft_buf *data = weft_buf_read_slice(in, len);
  if (data == NULL) {
    free(cmd);
    return weft_decoder_fail(&s->base, WEFT_ENOMEM, "resp decoder: slice");
  }
  *cmd = (weft_resp_cmd){.msg = {&weft_resp_cmd_type},
                         .argc = argc,
                         .argv = (weft_resp_arg *)(cmd + 1),
                         .is_inline = is_inline,
                         .data = data};
  for (size_t i = 0; i < argc; i++)
    cmd->argv[i] = (weft_resp_arg){data->base + args[i].off, args[i].len};
  reset(s);
  *out = cmd;
  return 1;
}

/* Redis' inline separators (sdssplitargs uses isspace). */
static bool is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

/* What ends an unquoted argument in sdssplitargs (\v and \f do not, though
 * they separate arguments; a NUL does, where Redis ends the whole line). */
static bool ends_arg(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0';
}

static int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c |= 0x20;
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One escape in double quotes at p[*i] == '\\': writes the byte it
 * stands for and steps past it. "\xHH" with two hex digits is that byte;
 * \n \r \t \b \a stand for their controls; any other "\c" is c. */
static uint8_t unescape(const uint8_t *p, size_t len, size_t *i) {
  if (*i + 3 < len && p[*i + 1] == 'x' && hex_value(p[*i + 2]) >= 0 &&
      hex_value(p[*i + 3]) >= 0) {
    uint8_t v = (uint8_t)(hex_value(p[*i + 2]) * 16 + hex_value(p[*i + 3]));
    *i += 4;
    return v;
  }
  if (*i + 1 >= len) { /* a lone backslash at the end: itself */
    *i += 1;
    return '\\';
  }
  uint8_t c = p[*i + 1];
  *i += 2;
  switch (c) {
  case 'n':
    return '\n';
  case 'r':
    return '\r';
  case 't':
    return '\t';
  case 'b':
    return '\b';
  case 'a':
    return '\a';
  default:
    return c;
  }
}

/* resp.h. The bytes are written over the line from p[*w] on, never ahead
 * of the reading, which is at least as far. */
int weft_resp_inline_arg(uint8_t *p, size_t len, size_t *i, size_t *w) {
  uint8_t quote = 0; /* '"' or '\'' while inside quotes */
  while (*i < len) {
    uint8_t c = p[*i];
    if (quote == 0 && ends_arg(c))
      return 0;
    if (quote == 0 && (c == '"' || c == '\'')) {
      quote = c;
      (*i)++;
    } else if (quote != 0 && c == quote) {
      (*i)++;
      if (*i < len && !is_space(p[*i]))
        return -1; /* "foo"bar */
      return 0;
    } else if (quote == '"' && c == '\\') {
      p[(*w)++] = unescape(p, len, i);
    } else if (quote == '\'' && c == '\\' && *i + 1 < len &&
               p[*i + 1] == '\'') {
      p[(*w)++] = '\'';
      *i += 2;
    } else {
      p[(*w)++] = c;
      (*i)++;
    }
  }
  return quote == 0 ? 0 : -1; /* the line ended inside quotes */
}

/* Splits an inline line into at most max_args arguments in s->args, with
 * Redis' quoting (weft_resp_inline_arg): the arguments are unescaped in place,
 * so argv still points into the line. */
static int split_inline(resp_decoder *s, uint8_t *p, size_t len, size_t *argc) {
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    while (i < len && (is_space(p[i]) || p[i] == '\0'))
      i++;
    if (i == len)
      break;
    size_t start = i, w = i;
    if (weft_resp_inline_arg(p, len, &i, &w) < 0)
      return weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                               "Protocol error: unbalanced quotes in request");
    if (n == s->o.max_args)
      return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                               "Protocol error: too many arguments in inline "
                               "request (maximum %zu)",
                               s->o.max_args);
    if (args_reserve(s, n + 1) != 0)
      return WEFT_ENOMEM;
    s->args[n++] = (arg_pos){start, w - start};
  }
  *argc = n;
  return 1;
}

static int decode_inline(resp_decoder *s, weft_buf *in, void **out) {
  uint8_t *p = weft_buf_rptr(in);
  size_t readable = weft_buf_readable(in);
  const uint8_t *nl = memchr(p + s->scanned, '\n', readable - s->scanned);
  if (nl == NULL) {
    s->scanned = readable;
    if (readable > s->o.max_inline)
      return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                               "Protocol error: too big inline request "
                               "(maximum %zu bytes)",
                               s->o.max_inline);
    return 0;
  }
  size_t eol = (size_t)(nl - p);
  size_t line = eol > 0 && p[eol - 1] == '\r' ? eol - 1 : eol;
  if (line > s->o.max_inline)
    return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                             "Protocol error: too big inline request "
                             "(maximum %zu bytes)",
                             s->o.max_inline);
  size_t argc = 0;
  int rc = split_inline(s, p, line, &argc);
  if (rc < 0)
    return rc;
  if (argc == 0) { /* a blank line: skip it, as Redis does */
    in->reader_index += eol + 1;
    reset(s);
    return 1;
  }
  return emit(s, in, eol + 1, argc, s->args, true, out);
}

/* A `what` ("multibulk", "bulk") length `n` above its maximum: Redis'
 * error text, which for a client before AUTH (`unauthenticated`) names
 * neither the length nor the limit. */
static int over_limit(resp_decoder *s, const char *what, int64_t n,
                      const char *unit, size_t max) {
  if (s->o.unauthenticated)
    return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                             "Protocol error: unauthenticated %s length", what);
  return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                           "Protocol error: invalid %s length (%" PRId64
                           " %s, maximum %zu)",
                           what, n, unit, max);
}

static int start_array(resp_decoder *s, weft_buf *in) {
  int64_t n;
  size_t next;
  int rc = parse_number_line(s, in, 0, &n, &next);
  if (rc <= 0)
    return rc;
  if (n <= 0) { /* "*0" and the null array "*-1": nothing to run */
    in->reader_index += next;
    return 1;
  }
  if ((uint64_t)n > s->o.max_args)
    return over_limit(s, "multibulk", n, "arguments", s->o.max_args);
  /* Slots for at most ARGS_KEPT now (Redis' 1024 too): a count of a
   * million in a few bytes must not allocate for a million. */
  if (args_reserve(s, (size_t)n < ARGS_KEPT ? (size_t)n : ARGS_KEPT) != 0)
    return WEFT_ENOMEM;
  s->nargs = (size_t)n;
  s->pos = next;
  s->phase = PHASE_BULK_HEADER;
  return 2; /* go on parsing */
}

static int bulk_header(resp_decoder *s, weft_buf *in) {
  uint8_t c = weft_buf_rptr(in)[s->pos];
  if (c != '$')
    return weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                             "Protocol error: expected '$', got '%c'",
                             c >= 0x20 && c < 0x7f ? c : ' ');
  int64_t len;
  size_t next;
  int rc = parse_number_line(s, in, s->pos, &len, &next);
  if (rc <= 0)
    return rc;
  if (len < 0)
    return weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                             "Protocol error: invalid bulk length");
  if ((uint64_t)len > s->o.max_bulk)
    return over_limit(s, "bulk", len, "bytes", s->o.max_bulk);
  if (next + (size_t)len + 2 > s->o.max_command)
    return weft_decoder_fail(&s->base, WEFT_ETOOLONG,
                             "Protocol error: too big request "
                             "(maximum %zu bytes)",
                             s->o.max_command);
  if (args_reserve(s, s->got + 1) != 0)
    return WEFT_ENOMEM;
  s->args[s->got] = (arg_pos){next, (size_t)len};
  s->pos = next;
  s->phase = PHASE_BULK_DATA;
  return 2;
}

static int bulk_data(resp_decoder *s, weft_buf *in, void **out) {
  arg_pos a = s->args[s->got];
  size_t end = a.off + a.len + 2;
  if (weft_buf_readable(in) < end) {
    s->base.need = end;
    return 0;
  }
  const uint8_t *p = weft_buf_rptr(in);
  if (p[end - 2] != '\r' || p[end - 1] != '\n')
    return weft_decoder_fail(&s->base, WEFT_EBADFRAME,
                             "Protocol error: bulk string not followed by "
                             "CRLF");
  s->pos = end;
  if (++s->got == s->nargs)
    return emit(s, in, end, s->nargs, s->args, false, out);
  s->phase = PHASE_BULK_HEADER;
  return 2;
}

static int resp_decode(weft_decoder *d, weft_buf *in, void **out) {
  resp_decoder *s = (resp_decoder *)d;
  int rc = 2;
  while (rc == 2) {
    if (s->pos >= weft_buf_readable(in))
      return 0;
    switch (s->phase) {
    case PHASE_START:
      rc = weft_buf_rptr(in)[0] == '*' ? start_array(s, in)
                                       : decode_inline(s, in, out);
      break;
    case PHASE_BULK_HEADER:
      rc = bulk_header(s, in);
      break;
    case PHASE_BULK_DATA:
      rc = bulk_data(s, in, out);
      break;
    }
  }
  return rc;
}

static void resp_free(weft_decoder *d) {
  resp_decoder *s = (resp_decoder *)d;
  free(s->args);
  free(s);
}

static const weft_handler resp_handler = {.name = "resp_decoder",
                                          WEFT__DECODER_OPS};

int weft_resp_decoder_add_last(weft_pipeline *p, const char *name,
                               const weft_resp_options *opts) {
  resp_decoder *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  weft_decoder_init(&s->base, resp_decode, resp_free);
  WEFT__OPTIONS_OR_DEFAULTS(&s->o, opts, weft_resp_options_init);
  return weft_decoder_add_last(p, name, &resp_handler, &s->base);
}

int weft_resp_decoder_set_options(weft_pipeline *p, const char *name,
                                  const weft_resp_options *opts) {
  weft_ctx *ctx = weft_pipeline_context(p, name);
  if (ctx == NULL || weft_ctx_handler(ctx) != &resp_handler)
    return WEFT_ENOENT;
  resp_decoder *s = weft_ctx_state(ctx);
  s->o = *opts;
  return 0;
}

/* ---- reply encoders ---- */

static int write_line(weft_buf *b, char prefix, const char *s, size_t n) {
  if (memchr(s, '\r', n) != NULL || memchr(s, '\n', n) != NULL)
    return WEFT_EINVAL;
  if (weft_buf_writable(b) < n + 3)
    return WEFT_ENOSPC;
  uint8_t *w = weft_buf_wptr(b);
  w[0] = (uint8_t)prefix;
  memcpy(w + 1, s, n);
  memcpy(w + 1 + n, "\r\n", 2);
  b->writer_index += n + 3;
  return 0;
}

/* "<prefix><v>\r\n". By hand, not snprintf: every bulk reply's length
 * line goes through here, and vfprintf cost more than the rest of a GET's
 * reply encoding (perf, redis-benchmark -P 16). Digits cannot hold CR or
 * LF, so write_line's check is skipped. */
static int write_number(weft_buf *b, char prefix, int64_t v) {
  char digits[20]; /* 9223372036854775808 has 19 */
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  size_t n = 0;
  do {
    digits[sizeof digits - 1 - n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  size_t len = 1 + (v < 0) + n + 2;
  if (weft_buf_writable(b) < len)
    return WEFT_ENOSPC;
  uint8_t *w = weft_buf_wptr(b);
  *w++ = (uint8_t)prefix;
  if (v < 0)
    *w++ = '-';
  memcpy(w, digits + sizeof digits - n, n);
  memcpy(w + n, "\r\n", 2);
  b->writer_index += len;
  return 0;
}

static size_t decimal_digits(size_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

int weft_resp_write_simple(weft_buf *b, const char *s) {
  return write_line(b, '+', s, strlen(s));
}

int weft_resp_write_error(weft_buf *b, const char *msg) {
  return write_line(b, '-', msg, strlen(msg));
}

int weft_resp_write_error_text(weft_buf *b, const void *text, size_t len) {
  size_t room = weft_buf_writable(b);
  if (room < 3 || room - 3 < len)
    return WEFT_ENOSPC;
  const uint8_t *src = text;
  uint8_t *w = weft_buf_wptr(b);
  w[0] = '-';
  for (size_t i = 0; i < len; i++)
    w[1 + i] = src[i] < 0x20 || src[i] == 0x7f ? ' ' : src[i];
  memcpy(w + 1 + len, "\r\n", 2);
  b->writer_index += len + 3;
  return 0;
}

int weft_resp_write_integer(weft_buf *b, int64_t v) {
  return write_number(b, ':', v);
}

size_t weft_resp_bulk_size(size_t len) {
  return 1 + decimal_digits(len) + 2 + len + 2;
}

int weft_resp_write_bulk(weft_buf *b, const void *data, size_t len) {
  if (weft_buf_writable(b) < weft_resp_bulk_size(len))
    return WEFT_ENOSPC;
  write_number(b, '$', (int64_t)len);
  weft_buf_write_bytes(b, data, len);
  return weft_buf_write_bytes(b, "\r\n", 2);
}

int weft_resp_write_null(weft_buf *b) { return write_number(b, '$', -1); }

int weft_resp_write_array(weft_buf *b, size_t n) {
  return write_number(b, '*', (int64_t)n);
}

int weft_resp_write_null3(weft_buf *b) { return write_line(b, '_', "", 0); }

int weft_resp_write_map(weft_buf *b, size_t n) {
  return write_number(b, '%', (int64_t)n);
}

size_t weft_resp_verbatim_size(size_t len) {
  return weft_resp_bulk_size(len + 4);
}

int weft_resp_write_verbatim(weft_buf *b, const char *fmt, const void *data,
                             size_t len) {
  if (strlen(fmt) != 3)
    return WEFT_EINVAL;
  if (weft_buf_writable(b) < weft_resp_verbatim_size(len))
    return WEFT_ENOSPC;
  write_number(b, '=', (int64_t)(len + 4));
  weft_buf_write_bytes(b, fmt, 3);
  weft_buf_write_bytes(b, ":", 1);
  weft_buf_write_bytes(b, data, len);
  return weft_buf_write_bytes(b, "\r\n", 2);
}

size_t weft_resp_command_size(size_t argc, const weft_resp_arg *argv) {
  size_t n = 1 + decimal_digits(argc) + 2;
  for (size_t i = 0; i < argc; i++)
    n += weft_resp_bulk_size(argv[i].len);
  return n;
}

int weft_resp_write_command(weft_buf *b, size_t argc,
                            const weft_resp_arg *argv) {
  if (weft_buf_writable(b) < weft_resp_command_size(argc, argv))
    return WEFT_ENOSPC;
  weft_resp_write_array(b, argc);
  for (size_t i = 0; i < argc; i++)
    weft_resp_write_bulk(b, argv[i].ptr, argv[i].len);
  return 0;
}
