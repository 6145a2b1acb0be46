/* SPDX-License-Identifier: Apache-2.0 */
/* weft/resp.h: the Redis serialization protocol (RESP version 2, and the
 * RESP3 reply types a server sends a client that asked for them).
 *
 * Server side, as a Redis server speaks it: the decoder handler turns
 * client bytes into commands (weft_resp_cmd, a weft_msg type), and the
 * weft_resp_write_* functions append replies (simple strings, errors,
 * integers, bulk strings, arrays, nulls; RESP3's maps, nulls and verbatim
 * strings) to a weft_buf that the server writes. Clients send a command as an
 * array of bulk strings
 * ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or as an inline command ("GET k\r\n",
 * split as Redis' sdssplitargs splits it: at white space, with "double
 * quotes" taking a backslash before n, r, t, b, a, a backslash, a double
 * quote or xHH (two hex digits), and 'single quotes' taking a backslash
 * before a single quote; unbalanced quotes, or a closing quote not
 * followed by a space, are "Protocol error: unbalanced quotes in request");
 * both decode to the same weft_resp_cmd. An inline command's arguments are
 * unescaped in place, in its received bytes.
 *
 * A command never copies its arguments: `argv` points into `data`, a slice
 * of the received buffer (or of the decoder's cumulation buffer when the
 * command spanned reads). Ownership: the command owns one reference to
 * `data`; weft_msg_release() / weft_resp_cmd_release() frees both. To keep
 * an argument past the command, take weft_resp_arg_slice() (zero-copy) or
 * copy it.
 */
#ifndef WEFT_RESP_H
#define WEFT_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>
#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** One argument: `len` bytes at `ptr` (binary-safe, not NUL-terminated). */
typedef struct weft_resp_arg {
  const uint8_t *ptr; /* the bytes */
  size_t len;         /* in bytes */
} weft_resp_arg;

/** A decoded client command. Fields are read-only. */
typedef struct weft_resp_cmd {
  weft_msg msg;        /* type weft_resp_cmd_type */
  size_t argc;         /* >= 1 (empty arrays and blank lines are skipped) */
  weft_resp_arg *argv; /* argc arguments; argv[0] is the command name */
  bool is_inline;      /* sent as an inline command */
  weft_buf *data;      /* owned reference: the bytes argv points into */
} weft_resp_cmd;

/** The message type of every weft_resp_cmd. */
extern const weft_msg_type weft_resp_cmd_type;

/** Frees `cmd` and drops its reference to `data`. NULL is ignored. */
void weft_resp_cmd_release(weft_resp_cmd *cmd);

/**
 * A new buffer viewing argument `i` of `cmd` (zero-copy; it holds the
 * memory after the command is released). NULL if `i` >= argc or on ENOMEM.
 * Loop thread (the pool's owner).
 */
weft_buf *weft_resp_arg_slice(const weft_resp_cmd *cmd, size_t i);

/** True when argument `i` equals the C string `s` ignoring ASCII case. */
bool weft_resp_arg_equals(const weft_resp_cmd *cmd, size_t i, const char *s);

/**
 * Reads one argument of an inline command line as Redis' sdssplitargs
 * (and redis-cli) does, from p[*i], which is not a separator, up to `len`:
 * outside quotes up to a blank (or a NUL); "double quotes" with \n \r \t
 * \b \a, \xHH (two hex digits) and \c for any other c; 'single quotes'
 * where only \' is an escape. Quotes may start mid-argument (a"b c" is
 * `ab c`); a closing quote must be followed by a blank or the end. The
 * argument's bytes are unescaped in place, written from p[*w] on (pass
 * *w == *i: it ends at the new *w). Moves *i past the argument. Returns 0,
 * or -1 for unbalanced quotes. Pure; any thread. The RESP decoder splits
 * inline commands with it; weft-kv splits the lines it reads.
 */
int weft_resp_inline_arg(uint8_t *p, size_t len, size_t *i, size_t *w);

/** Options of the RESP command decoder. */
typedef struct weft_resp_options {
  size_t max_args;      /* elements of one array command; default 1024.
                           Their slots grow as they arrive: a large
                           limit costs nothing until used */
  size_t max_bulk;      /* bytes of one bulk string; default 512 KiB */
  size_t max_command;   /* bytes of one whole command as sent; default 1 MiB */
  size_t max_inline;    /* bytes of one inline command line; default 64 KiB */
  bool unauthenticated; /* these are the limits of a client that has not
                           authenticated yet: max_args and max_bulk are
                           refused with Redis' texts for those ("Protocol
                           error: unauthenticated multibulk length",
                           "... bulk length"); default false */
} weft_resp_options;

/**
 * Changes the limits of the RESP decoder named `name` in `p` from its next
 * command on (a server lifts the unauthenticated limits once AUTH
 * succeeds). Returns 0, or WEFT_ENOENT when `name` is not a RESP decoder.
 * Loop thread.
 */
int weft_resp_decoder_set_options(weft_pipeline *p, const char *name,
                                  const weft_resp_options *opts);

/** Fills `o` with the defaults documented on each field. */
void weft_resp_options_init(weft_resp_options *o);

/**
 * Adds the RESP command decoder at the tail end of `p`: weft_bufs in,
 * weft_resp_cmds out, resuming at any byte boundary without rescanning
 * what it parsed already. Limits are checked as soon as a count or length
 * is read, before anything is allocated for it: WEFT_ETOOLONG above a
 * limit, WEFT_EBADFRAME for malformed input (a bad prefix, a non-digit in a
 * count, a negative bulk length in a command, a missing "\r\n", a nested
 * array), reported with exception_caught; the channel's input is then
 * dropped. The reason is Redis' text for the error, ready for a server to
 * answer "-ERR <reason>" before it closes, as Redis does: "Protocol error:
 * invalid multibulk length", "Protocol error: expected '$', got 'x'",
 * "Protocol error: too big mbulk count string", "Protocol error: too big
 * bulk count string", "Protocol error: invalid bulk length", "Protocol
 * error: too big inline request"; a limit of these options appends itself
 * ("Protocol error: invalid bulk length (2000000 bytes, maximum 524288)"),
 * except with `unauthenticated` set, where max_args and max_bulk give
 * Redis' "Protocol error: unauthenticated multibulk length" and "Protocol
 * error: unauthenticated bulk length". Three have no Redis counterpart:
 * "Protocol error: too big request (maximum N bytes)" (max_command), "Protocol
 * error: too many arguments in inline request (maximum N)" (max_args) and
 * "Protocol error: bulk string not followed by CRLF" (Redis skips the two bytes
 * unread). Returns 0, WEFT_EEXIST or WEFT_ENOMEM. Loop thread.
 */
int weft_resp_decoder_add_last(weft_pipeline *p, const char *name,
                               const weft_resp_options *opts);

/* Reply encoders. Each appends one RESP value to `b` and returns 0, or
 * WEFT_ENOSPC when it does not fit (nothing written), or WEFT_EINVAL where
 * noted. Sizes of the encodings are given by weft_resp_*_size(). */

/** "+s\r\n". WEFT_EINVAL if `s` contains '\r' or '\n'. */
int weft_resp_write_simple(weft_buf *b, const char *s);
/** "-msg\r\n" (e.g. "ERR unknown command"). WEFT_EINVAL on '\r' / '\n'. */
int weft_resp_write_error(weft_buf *b, const char *msg);
/**
 * "-text\r\n" for `len` bytes of text that may hold anything, such as an
 * error quoting a client's input: CR, LF and the other ASCII control bytes
 * (NUL included) are written as spaces, as Redis does in its error
 * replies, so the text is never refused. Writes `len` + 3 bytes, or
 * nothing and WEFT_ENOSPC when they do not fit; cap `len` to bound it.
 */
int weft_resp_write_error_text(weft_buf *b, const void *text, size_t len);
/** ":v\r\n". */
int weft_resp_write_integer(weft_buf *b, int64_t v);
/** "$len\r\n<data>\r\n" (binary-safe). */
int weft_resp_write_bulk(weft_buf *b, const void *data, size_t len);
/** The null bulk string "$-1\r\n". */
int weft_resp_write_null(weft_buf *b);
/** An array header "*n\r\n"; the n elements follow as further writes. */
int weft_resp_write_array(weft_buf *b, size_t n);
/** RESP3's null "_\r\n" (for a client that chose RESP3 with HELLO 3). */
int weft_resp_write_null3(weft_buf *b);
/** RESP3's map header "%n\r\n"; the n keys and n values follow, each key
 *  before its value. */
int weft_resp_write_map(weft_buf *b, size_t n);
/**
 * RESP3's verbatim string "=<4 + len>\r\n<fmt>:<data>\r\n", where `fmt`
 * is three bytes naming the text's format ("txt", "mkd"). WEFT_EINVAL when
 * `fmt` is not three bytes.
 */
int weft_resp_write_verbatim(weft_buf *b, const char *fmt, const void *data,
                             size_t len);
/** Bytes weft_resp_write_verbatim() writes for `len` data bytes. */
size_t weft_resp_verbatim_size(size_t len);
/** A client command: an array of `argc` bulk strings. */
int weft_resp_write_command(weft_buf *b, size_t argc,
                            const weft_resp_arg *argv);

/** Bytes weft_resp_write_bulk() writes for `len` data bytes. */
size_t weft_resp_bulk_size(size_t len);
/** Bytes weft_resp_write_command() writes. */
size_t weft_resp_command_size(size_t argc, const weft_resp_arg *argv);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_RESP_H */
