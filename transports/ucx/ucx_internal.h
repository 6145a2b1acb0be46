/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx_internal.h: the UCX plugin's private header, which
 * each of its files includes: the design (below), the tuning constants,
 * and the headers of the plugin's parts, one concept each (this header
 * outgrew 1000 lines as one). The plugin's exported symbol is in ucx.h.
 *
 * The headers:
 *   ucx_wire.h      the wire protocol: message types, the header, slot
 *                   references, a channel's wire state and the check every
 *                   message passes (pure: no UCX, fuzzed)
 *   ucx_context.h   process-wide: the [transport.ucx] settings, the context
 *   ucx_worker.h    per loop: the instance around the ucp_worker, its
 *                   channel table, pending list and requests in flight
 *   ucx_endpoint.h  per channel: the state around its ucp_ep, the send and
 *                   receive paths, closing eps
 *   ucx_listener.h  listeners, held connections and redirects, routes
 *
 * The files:
 *   context.c  process-wide settings ([transport.ucx] keys), the UCP context
 *   loop.c     the per-loop instance: worker, poll and arm, drain at stop;
 *              the channel table, the pending list, requests in flight
 *   wire.c     what a peer may send: the handshake's check and the texts
 *              of broken rules (the per-message check is inline, in ucx_wire.h;
 *              pure: no UCX calls, fuzzed)
 *   send.c     the send path: DATA and control messages, flush, credit
 *   recv.c     the receive path: AM handler, reassembly queue, ep errors,
 *              the pending list's dispatch
 *   listen.c   listeners, the accept queue, connections held until their
 *              HELLO and redirected (ucx_preconn)
 *   route.c    the client's routes: the listener ports REDIRECTs taught
 *   channel.c  channel lifecycle, redirected connects, closing eps,
 *              keepalive, the ops table */

/* Thread: every weft__ucx_* function these headers declare runs on the
 * thread of the loop whose instance (ucx_loop) it is given, unless its
 * comment says otherwise. Those marked "inside progress" run from UCX
 * callbacks, inside ucp_worker_progress: they only record work for poll,
 * and no user handler runs there. */

/* The UCX transport ("ucx"): channels over UCP active messages.
 *
 * Three levels, as the plugin interface has them:
 *
 *   process  one ucp_context (features AM | WAKEUP), shared by the workers
 *            of every loop (mt_workers_shared), created by the first
 *            loop_init and cleaned up with the last loop_fini;
 *   loop     one ucp_worker in single-thread mode per loop, never one per
 *            connection (hadroNIO's worker per connection made connection
 *            setup take seconds). Its event fd is the loop's source fd:
 *            poll runs ucp_worker_progress until it returns 0 (or the
 *            budget is spent), arm is ucp_worker_arm (UCS_ERR_BUSY = poll
 *            again); nothing here ever blocks in UCX. A server listens on
 *            every loop (WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP): a connection
 *            request is accepted on the worker whose listener took it
 *            (UCX 1.13 aborts when a request moves to another worker), and
 *            connections are spread by a redirect in the handshake: the
 *            listener on the server's address holds each connection until
 *            its HELLO, keeps one in N and sends the others' clients to
 *            loop j's listener (REDIRECT, with every listener's port); a
 *            client remembers the ports (route.c) and goes straight to
 *            them afterwards, saying so in its HELLO (ROUTED);
 *   channel  one ucp_ep (sockaddr client-server flow, peer error handling),
 *            and a slot in the loop's channel table whose index and
 *            generation the peer puts in every message header.
 *
 * Wire protocol: one AM id; the header (ucx_hdr) says what a message is.
 *
 *   HELLO      client -> server, sent with UCP_AM_SEND_FLAG_REPLY so the
 *              server finds the channel by its reply ep; carries the wire
 *              version, the client's slot and receive window, and (12
 *              bytes of data) the largest DATA message it accepts, its
 *              flags (ROUTED: it came to a listener a REDIRECT named) and
 *              the first sequence number of its DATA (random).
 *   HELLO_ACK  server -> client: the same of the server, and (in its data)
 *              the server's id; the client's connect completes here.
 *   REDIRECT   server -> client, instead of HELLO_ACK: the wire version,
 *              and in its data the server's id, the index of the listener
 *              to use and the ports of all the server's listeners (one per
 *              loop, on the same host); the client closes this ep and
 *              connects there (once per connect).
 *   DATA       bytes, with a per-channel sequence number (from a random
 *              start each side announces in its HELLO or HELLO_ACK) and
 *              piggy-backed credit (bytes the sender consumed since its
 *              last grant).
 *   CREDIT     credit alone, when there is no data to carry it; it, PING
 *              and PONG carry the next sequence number without taking it.
 *   FIN        orderly close; sequenced like DATA, so the peer sees EOF
 *              after the last byte.
 *   PING, PONG keepalive: a channel that heard nothing for keepalive_ms
 *              sends PING, which the peer answers with PONG; one that hears
 *              nothing for UCX_KEEPALIVE_PROBES more intervals
 *              (UCX_KEEPALIVE_BUSY_PROBES with data in flight) closes.
 *
 * Order: AMs on one ep are handled in send order, but the data of a
 * rendezvous message arrives later (ucp_am_recv_data_nbx), so every DATA and
 * FIN enters a per-channel reassembly queue ordered by sequence number and
 * reaches the pipeline only from its head, once complete.
 *
 * Flow control (hadroNIO's lesson: without it UCX's unexpected-message
 * memory grows without bound): a byte window per channel. A sender sends at
 * most the credit its peer granted; the receiver grants bytes back only
 * when they reached the pipeline. A reader that stops reading (auto-read
 * off) thus holds at most one window of data, the sender's bytes stay in
 * its outbound queue, and its watermarks make it unwritable. Each DATA
 * message costs its bytes plus UCX_MSG_COST of credit, so that the window
 * also bounds the reassembly queue's entries, not only its bytes.
 *
 * Whose message it is: with peer error handling every message carries its
 * sender's ep (UCP_AM_SEND_FLAG_REPLY) and belongs to that ep's channel
 * (the loop's ep index, weft__ucx_recv_route); the slot it names must be
 * that channel's. With error_mode = none only HELLO does: the slot routes,
 * and the message must carry that channel's next sequence number, which
 * started at a random value only the channel's peer was told, or it is
 * dropped untouched (weft__ucx_wire_from_peer; docs/transports/ucx.md).
 *
 * Hostile peers: nothing in a message is trusted. weft__ucx_hdr_check
 * (ucx_wire.h, and wire.c) checks every header against the channel's wire
 * state (type, handshake order, wire version, sequence, message size,
 * credit taken and granted) before the receive path allocates anything for
 * it; a message that breaks a rule closes its channel alone, with the rule
 * in the reason, and the rest of the channel's messages are dropped.
 *
 * Send path: the flushed buffers are merged into one contiguous send of at
 * most min(credit - UCX_MSG_COST, either side's max_message) bytes
 * (hadroNIO: gathering writes only paid off once merged into one UCX
 * send). Up to UCX_IMM_MAX bytes are first tried as an immediate send from
 * the stack (send_imm); otherwise a single large buffer is sent in place
 * (retained until UCX completes it) and smaller ones are merged into a
 * pool buffer. Send contexts and queue entries are recycled through
 * bounded per-loop free lists. Receive path: eager data UCX lets us keep
 * (UCP_AM_RECV_ATTR_FLAG_DATA) of UCX_WRAP_MIN bytes or more is wrapped in
 * a weft_buf without a copy and handed back with ucp_am_data_release when
 * the last reference goes; other eager data is copied into a pool buffer;
 * rendezvous data is received straight into a pool buffer.
 *
 * Close: requests in flight outlive their channel, and its ep stays open
 * until they ended (see ucx_epr); loop_fini waits for them, bounded, before
 * it destroys the worker and the loop destroys its pool
 * (docs/transports/ucx.md).
 *
 * Callbacks from UCX (AM handler, send/receive completions, ep errors,
 * connection requests) only record what happened and put the channel on
 * the loop's pending list (a request on the loop's accept queue); the
 * pipeline and the core's accept run from poll, after ucp_worker_progress
 * returned, so user handlers never run inside UCX (asserted in debug
 * builds where the core calls in: adopt, flush, close).
 *
 * This plugin uses the public headers only, as an out-of-tree plugin would.
 */
#ifndef WEFT_TRANSPORTS_UCX_UCX_INTERNAL_H
#define WEFT_TRANSPORTS_UCX_UCX_INTERNAL_H

#include "transports/ucx/ucx.h"
#include "transports/ucx/ucx_context.h"
#include "transports/ucx/ucx_endpoint.h"
#include "transports/ucx/ucx_listener.h"
#include "transports/ucx/ucx_wire.h"
#include "transports/ucx/ucx_worker.h"

/* ---- tuning ----
 *
 * The wire's constants (UCX_AM_ID, UCX_MSG_COST, the limits a HELLO must
 * respect) are in ucx_wire.h, the settings' defaults in ucx_context.h. */

#define UCX_MAX_IOV 64              /* buffers merged per send */
#define UCX_SENDS_PER_FLUSH 64      /* sends before yielding */
#define UCX_ZCOPY_MIN (16u * 1024u) /* below: merge by copying */
/* Bytes first tried as an immediate send: UCX tries only its short
 * protocol then, whose limit on the shared-memory lane is 100 B with
 * UCX's 8 B and weft's 12 B headers (80 B of data); above it every try
 * would fail and cost a second gather. Over tcp the short limit is higher
 * but a message costs microseconds there anyway. */
#define UCX_IMM_MAX 64u
/* Eager data UCX lets us keep (UCP_AM_RECV_ATTR_FLAG_DATA, which UCX 1.13
 * sets on its shared-memory lanes, not over tcp) is wrapped without a copy
 * from this size on; smaller messages are copied, so that small messages
 * queued for a reader that does not read do not pin UCX's receive
 * descriptors: 20000 queued 100 B messages grew the server's peak RSS by
 * 86 MiB that way (4.4 KiB each; test_ucx_shm's small-message liar on the
 * code before this limit and UCX_MSG_COST). */
#define UCX_WRAP_MIN 4096u
#define UCX_CLOSE_WAIT_NS (2000000000ull) /* an ep lingers (ucx_epr) */
/* An accepted connection waits hello_timeout_ms for its client's HELLO (a
 * held one, ucx_preconn, or a channel), then it is closed: it costs an ep
 * and, held or not, counts against the server's max_connections
 * meanwhile. The default is the client's default connect timeout (a
 * client gives up then anyway): a weft client sends its HELLO with the
 * ep's creation, but UCX delivers it only after the wire-up, which a
 * busy server loop delays; with 5 s, 45 of the 100 clients of
 * channel_echo_10mb_100_clients were closed under TSan. Checked by the
 * loop's tick: closed within one tick more. */
#define UCX_DEFAULT_HELLO_MS 10000u
#define UCX_HELLO_MIN_MS 100u
#define UCX_HELLO_MAX_MS 3600000u
/* Connections one listener holds for their HELLO at most, whatever
 * max_connections allows (each is an ep and a socket). */
#define UCX_HELD_MAX 4096u
/* Routes (servers' listener ports) a client process remembers. */
#define UCX_ROUTES 32u
/* Keepalive: the default interval, its limits, and the intervals after a
 * PING without any message from the peer before the channel closes. */
#define UCX_DEFAULT_KEEPALIVE_MS 5000u
#define UCX_KEEPALIVE_MIN_MS 10u
#define UCX_KEEPALIVE_MAX_MS 3600000u
#define UCX_KEEPALIVE_PROBES 3u
/* The same for a channel with data of its own in flight (sent, not yet
 * credited back): the peer's PONG then waits behind the peer's own data in
 * UCX, and a loaded peer (a sanitizer build with 100 busy channels on a
 * loop) was seen silent for over 8 s while alive. */
#define UCX_KEEPALIVE_BUSY_PROBES 12u
/* The housekeeping tick (lingering eps, redirects) without keepalive. */
#define UCX_TICK_MS 1000u
#define UCX_FREE_LIST_MAX 64    /* send contexts and queue entries kept */
#define UCX_PROGRESS_SAMPLE 16u /* polls per timed empty progress */
#define UCX_PROGRESS_SAMPLES 8u /* timed ones per empty_progress_ns */
/* An empty progress at least this long (ns) is a system call's: poll
 * delivers before progressing again. */
#define UCX_COSTLY_PROGRESS_NS 250u

#endif
