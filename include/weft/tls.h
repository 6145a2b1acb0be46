/* SPDX-License-Identifier: Apache-2.0 */
/* weft/tls.h: TLS as a pipeline handler, with OpenSSL 3 (Netty's
 * SslHandler in C).
 *
 * A weft_tls_context holds what every connection of one side shares: the
 * mode (client or server), certificates, CAs, the verification policy,
 * ALPN, protocol versions, the handshake timeout (an OpenSSL SSL_CTX). It is
 * made once and shared by any number of channels, on any loops.
 * weft_tls_add_first() puts a TLS handler first in a channel's pipeline
 * (next to the transport), with its own OpenSSL engine driven through
 * in-memory BIOs over weft_bufs, so it works over every byte-stream
 * transport: tcp, uring,
 * and ucx (which carries a byte stream too).
 *
 *   weft_tls_options o;
 *   weft_tls_options_init(&o);
 *   snprintf(o.cert_file, sizeof o.cert_file, "server.pem");
 *   snprintf(o.key_file, sizeof o.key_file, "server.key");
 *   weft_tls_context *tls;
 *   char err[256];
 *   if (weft_tls_context_new(&tls, WEFT_TLS_SERVER, &o, err, sizeof err) < 0)
 *     die(err);                                 // names the file and why
 *
 *   static void init(weft_channel *ch, void *arg) {   // child_init
 *     weft_pipeline *p = weft_channel_pipeline(ch);
 *     weft_tls_add_first(p, arg, NULL);          // ciphertext below,
 *     weft_pipeline_add_last(p, "echo", &echo, NULL); // plaintext above
 *   }
 *   ...
 *   weft_tls_context_release(tls);   // channels keep their own reference
 *
 * What the handler does:
 *
 *  - Handshake: on channel_active (or at once, when added to an active
 *    channel); the client speaks first. channel_active is passed on at
 *    once (as Netty does); the outcome arrives as a user_event
 *    (weft_tls_event, WEFT_TLS_HANDSHAKE_DONE or _FAILED). Writes made
 *    before the handshake completes are queued and sent after it, in
 *    order; a flush requested meanwhile takes effect then.
 *  - Inbound: received weft_bufs are decrypted; plaintext is passed on as
 *    weft_bufs from the loop's pool (records are merged into buffers of up
 *    to 16 KiB). channel_read_complete is passed on when plaintext was.
 *  - Outbound: written weft_bufs are plaintext (other messages fail with
 *    WEFT_EINVAL). Small writes are merged into full records (16 KiB of
 *    plaintext); a flush encrypts the rest and hands everything encrypted
 *    since the last flush to the transport in as few buffers as possible
 *    (64 KiB each). Once 64 KiB of ciphertext waits, it is written down
 *    without a flush, so the channel's write watermarks (and a server's
 *    flow control) see it. A write's promise completes with 0 when the
 *    last byte of its records was handed to the transport (the transport's
 *    promise), or with the error that stopped it; writes that were not
 *    flushed when the channel closes fail with WEFT_ECLOSED.
 *  - Flow control: the handler stops decrypting while the channel is not
 *    reading (weft_channel_is_reading: auto-read off, or a server's flow
 *    control), keeps the ciphertext, and goes on at weft_event_read_resumed
 *    (see channel.h, decoder.h), then passes the event on.
 *  - Close: close sends close_notify and waits until the transport took it
 *    (at most WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS) before the transport
 *    closes. The peer's close_notify fires WEFT_TLS_CLOSE_NOTIFY and closes
 *    the channel (answering with close_notify).
 *    weft_channel_shutdown_output() goes around the handler: it sends a
 *    FIN without close_notify.
 *  - Renegotiation is off (SSL_OP_NO_RENEGOTIATION): a peer that asks for
 *    it (a TLS 1.2 ClientHello or HelloRequest after the handshake) gets
 *    OpenSSL's no_renegotiation alert and the channel is closed with the
 *    reason "TLS renegotiation refused ...".
 *  - Errors reach exception_caught (the tail logs them and closes the
 *    channel; the handler closes it too if a handler swallows the
 *    exception), with a reason that names the cause:
 *      "TLS handshake failed: certificate verify failed: certificate has
 *       expired (peer certificate: CN=localhost, depth 0)"
 *      "TLS handshake failed: wrong version number (is the peer speaking
 *       plain text?)"
 *      "TLS handshake failed: tlsv1 alert unknown ca (an alert from the
 *       peer: it refused the handshake)"
 *      "TLS handshake timed out after 10000 ms"
 *    with WEFT_EPROTO (TLS failures), WEFT_ETIMEDOUT (handshake timeout),
 *    WEFT_ENOBUFS (a bound below crossed) or WEFT_ENOMEM. A connection that
 *    ends before its handshake completed fires WEFT_TLS_HANDSHAKE_FAILED
 *    with WEFT_ECONNRESET and logs one INFO line (no exception: port
 *    scanners and health checks do that all day).
 *  - Bounds: every length from the peer is checked by OpenSSL (records of
 *    at most 16 KiB plus overhead, handshake messages, certificate chains
 *    of at most 100 KiB). The handler refuses a peer that sends more than
 *    WEFT_TLS_MAX_HANDSHAKE_BYTES before the handshake completes, or whose
 *    unread ciphertext exceeds WEFT_TLS_MAX_BUFFERED_BYTES while the
 *    channel does not read (WEFT_ENOBUFS). Plaintext written before the
 *    handshake completes is the application's to bound.
 *  - kTLS (options.ktls): the kernel encrypts records after the
 *    handshake on tcp; see weft_tls_options.ktls.
 *
 * Threads: a context may be used by channels of any loops at once (its
 * reference count is atomic; OpenSSL's SSL_CTX is safe for that once
 * built). Everything about one channel's handler runs on that channel's
 * loop thread, like every handler.
 */
#ifndef WEFT_TLS_H
#define WEFT_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <weft/channel.h>
#include <weft/config.h>
#include <weft/msg.h>
#include <weft/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The name weft_tls_add_first gives the handler (one per pipeline). */
#define WEFT_TLS_HANDLER_NAME "tls"

/** Default handshake timeout in milliseconds. */
#define WEFT_TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT 10000

/** How long close waits for close_notify to reach the transport (ms). */
#define WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS 3000

/** Ciphertext a peer may send before its handshake completes (bytes). */
#define WEFT_TLS_MAX_HANDSHAKE_BYTES (256u * 1024u)

/** Unread ciphertext held while the channel does not read (bytes). */
#define WEFT_TLS_MAX_BUFFERED_BYTES (1024u * 1024u)

/** Longest path, server name or ALPN list an options struct holds. */
#define WEFT_TLS_PATH_MAX 512
#define WEFT_TLS_NAME_MAX 256

/** Which side of the handshake a context is for. */
typedef enum weft_tls_mode {
  WEFT_TLS_CLIENT = 0,
  WEFT_TLS_SERVER = 1
} weft_tls_mode;

/**
 * Whose certificate is checked, and how strictly.
 *
 * Server (client certificates): NONE asks for none (the default);
 * OPTIONAL asks, and checks one if the client sends it; REQUIRED refuses a
 * client without a valid one. OPTIONAL and REQUIRED need ca_file or ca_dir.
 *
 * Client (the server's certificate): NONE checks nothing (tests only);
 * OPTIONAL checks the chain against the CAs (ca_file / ca_dir, else the
 * system's) and, when a server name is set, that the certificate carries
 * it; REQUIRED (the default) does the same and insists on a server name
 * (weft_tls_add_first refuses a channel without one).
 */
typedef enum weft_tls_verify {
  WEFT_TLS_VERIFY_DEFAULT = 0, /* REQUIRED on a client, NONE on a server */
  WEFT_TLS_VERIFY_NONE = 1,
  WEFT_TLS_VERIFY_OPTIONAL = 2,
  WEFT_TLS_VERIFY_REQUIRED = 3
} weft_tls_verify;

/** Protocol versions. */
typedef enum weft_tls_version {
  WEFT_TLS_1_2 = 2, /* TLS 1.2 */
  WEFT_TLS_1_3 = 3  /* TLS 1.3 */
} weft_tls_version;

/**
 * What a context is made of. Fill with weft_tls_options_init(), then set
 * fields directly or with weft_tls_options_set() (config keys). Strings
 * are NUL-terminated and copied by weft_tls_context_new; "" means unset.
 */
typedef struct weft_tls_options {
  /* PEM: the certificate, then its chain (a server needs one; a client
   * only for client authentication). */
  char cert_file[WEFT_TLS_PATH_MAX];
  /* PEM private key; "" = in cert_file. */
  char key_file[WEFT_TLS_PATH_MAX];
  /* PEM bundle of the CAs that sign the peer's certificate. */
  char ca_file[WEFT_TLS_PATH_MAX];
  /* Or a directory of them, hashed (openssl rehash). */
  char ca_dir[WEFT_TLS_PATH_MAX];
  /* Whose certificate is checked (default WEFT_TLS_VERIFY_DEFAULT). */
  weft_tls_verify verify;
  /* Client: the name sent as SNI and checked in the server's certificate
   * (a DNS name, or an IP address: checked, not sent);
   * weft_tls_add_first may override it per channel. */
  char server_name[WEFT_TLS_NAME_MAX];
  /* ALPN protocols, comma-separated, in order of preference
   * ("h2,http/1.1"); a server picks its first one the client offers and
   * refuses a client that offers only others; "" = no ALPN. */
  char alpn[WEFT_TLS_NAME_MAX];
  /* The lowest version accepted (default 1.2) and the highest offered
   * (default 1.3). */
  weft_tls_version min_protocol;
  weft_tls_version max_protocol;
  /* ms from channel_active to a completed handshake before the channel
   * is closed (default 10000); 0 = none. */
  int handshake_timeout_ms;
  /* After a TLS 1.3 handshake, hand record encryption to the kernel
   * (Linux kTLS TX, transports with ktls_tx: tcp): writes then reach the
   * socket as plaintext and the kernel makes the records (AES-128/256-GCM,
   * ChaCha20-Poly1305). Decryption stays in OpenSSL. Where it cannot (no
   * tls module or cipher in the kernel, another transport, a TLS 1.2
   * session) the handler keeps user-space records and logs one WARN line
   * per process saying why. A server with ktls sends no session tickets
   * (the kernel's record count starts at 0). Writes wait for the
   * handshake's last flight to leave before the switch; past 1 MiB of
   * them (a peer that does not read), kTLS is given up for that channel
   * with an INFO line. Once the kernel encrypts, a
   * key update the peer asks for is not answered and a fatal alert is not
   * sent (the channel just closes); close_notify is. Default off. */
  bool ktls;
} weft_tls_options;

/** Fills `o` with the defaults documented on each field. */
void weft_tls_options_init(weft_tls_options *o);

/**
 * Sets one option from its config key and text value, as a config file
 * spells it (the keys of weft_tls_config_keys): cert_file, key_file,
 * ca_file, ca_dir (paths), verify (none | optional | required),
 * server_name, alpn (a comma list), min_protocol and max_protocol
 * (tls1.2 | tls1.3), handshake_timeout_ms (0 .. 3600000), ktls (on | off,
 * also true/false/yes/no/1/0). Returns 0; WEFT_ENOENT for another key;
 * WEFT_EINVAL with a sentence naming the valid values in `err` (`len`
 * bytes). Relations between keys (a key_file without a cert_file, min above
 * max) are checked by weft_tls_context_new. Made to be called from a
 * program's weft_config_section_cb for the section it chose:
 *
 *   if (strcmp(section, "tls") == 0)
 *     return weft_tls_options_set(&app->tls, key, value, err, err_len);
 *
 * Any thread (it touches `o` only).
 */
int weft_tls_options_set(weft_tls_options *o, const char *key,
                         const char *value, char *err, size_t len);

/** Number of keys in weft_tls_config_keys (without the NULL entry). */
#define WEFT_TLS_CONFIG_KEY_COUNT 11

/**
 * The TLS keys for a program's config table (weft_config.app_keys: --help,
 * WEFT_TLS_* environment variables, error messages) in section "tls", with
 * their defaults and valid values, ended by an entry whose section is
 * NULL. A program whose table has keys of its own, or that wants another
 * section name, copies them with weft_tls_config_keys_copy.
 */
extern const weft_config_key weft_tls_config_keys[];

/**
 * Copies weft_tls_config_keys into `out` (`n` entries of room) with their
 * section set to `section` (the pointer is stored: it must outlive the
 * table), followed by the NULL entry. Returns the number of keys copied
 * (WEFT_TLS_CONFIG_KEY_COUNT) or WEFT_ENOSPC when `n` is below
 * WEFT_TLS_CONFIG_KEY_COUNT + 1 (nothing written). Any thread.
 */
int weft_tls_config_keys_copy(weft_config_key *out, size_t n,
                              const char *section);

/** A context: OpenSSL's SSL_CTX and weft's settings. Opaque. */
typedef struct weft_tls_context weft_tls_context;

/**
 * Makes a context for `mode` from `o`: loads the certificate chain, the
 * private key (and checks that they match), the CAs, and applies the
 * verification policy, protocol versions, ALPN and the options weft
 * always sets (no renegotiation, no compression, a session id context for
 * resumption with client certificates). Returns 0 with one reference in
 * `*out`, or WEFT_EINVAL with `err` (`len` bytes) naming the option, the
 * file and OpenSSL's reason ("key_file server.key: No such file or
 * directory", "cert_file and key_file do not match"), or WEFT_ENOMEM. Any
 * thread; it reads the files, so not on a loop thread in a latency-
 * sensitive program.
 */
int weft_tls_context_new(weft_tls_context **out, weft_tls_mode mode,
                         const weft_tls_options *o, char *err, size_t len);

/** Adds a reference and returns `c`. Any thread holding one. */
weft_tls_context *weft_tls_context_retain(weft_tls_context *c);

/**
 * Drops a reference; the last one frees the context. Every handler holds
 * one from weft_tls_add_first until its channel is gone, so the creator
 * may release its own as soon as it adds no more handlers. NULL is
 * ignored. Any thread holding one.
 */
void weft_tls_context_release(weft_tls_context *c);

/** The mode a context was made for. Any thread. */
weft_tls_mode weft_tls_context_mode(const weft_tls_context *c);

/**
 * Adds a TLS handler named WEFT_TLS_HANDLER_NAME first in `p` (next to the
 * transport), speaking for `ctx` (it takes a reference of its own).
 * `server_name` (client only; NULL = the context's) overrides the name
 * sent as SNI and checked in the server's certificate for this channel.
 * If the channel is already active (STARTTLS after a plaintext exchange),
 * the handshake starts at once. Returns 0; WEFT_EEXIST (the pipeline has a
 * handler of that name); WEFT_EINVAL (a client with verify = required and
 * no server name: logged with the reason); WEFT_ENOMEM. Loop thread.
 */
int weft_tls_add_first(weft_pipeline *p, weft_tls_context *ctx,
                       const char *server_name);

/** What a weft_tls_event reports. */
typedef enum weft_tls_event_kind {
  WEFT_TLS_HANDSHAKE_DONE = 1,   /* status 0: application data may flow */
  WEFT_TLS_HANDSHAKE_FAILED = 2, /* status < 0, reason set; the channel
                                    closes */
  WEFT_TLS_CLOSE_NOTIFY = 3      /* the peer sent close_notify: no more data
                                    comes; the channel closes next */
} weft_tls_event_kind;

/**
 * The user_event the TLS handler fires towards the tail (recognise it with
 * weft_msg_is(event, &weft_tls_event_type)); borrowed for the call.
 */
typedef struct weft_tls_event {
  weft_msg msg;             /* type weft_tls_event_type (release: no-op) */
  weft_tls_event_kind kind; /* what happened */
  int status;               /* 0, or the negative weft error */
  const char *reason; /* the failure's text, or NULL; valid during the call */
} weft_tls_event;

/** The message type of weft_tls_event. */
extern const weft_msg_type weft_tls_event_type;

/** What weft_tls_info_get reports about a channel's TLS session. */
typedef struct weft_tls_info {
  bool handshake_done;  /* the handshake completed */
  bool resumed;         /* the session was resumed (no full handshake) */
  bool ktls_tx;         /* the kernel encrypts our records (kTLS) */
  bool ktls_rx;         /* the kernel decrypts the peer's: always false
                           (decryption stays in OpenSSL) */
  const char *protocol; /* "TLSv1.3", "TLSv1.2" (static); NULL before the
                           handshake */
  const char *cipher;   /* "TLS_AES_128_GCM_SHA256" (static), or NULL */
  char alpn[WEFT_TLS_NAME_MAX];         /* the protocol agreed by ALPN, or "" */
  char peer_subject[WEFT_TLS_NAME_MAX]; /* the peer certificate's subject
                                           ("CN=localhost"), or "" */
} weft_tls_info;

/**
 * Fills `out` with the state of the TLS handler of channel `ch`. Returns 0,
 * or WEFT_ENOENT when the channel has no TLS handler. Loop thread.
 */
int weft_tls_info_get(weft_channel *ch, weft_tls_info *out);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_TLS_H */
