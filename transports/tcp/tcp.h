/* SPDX-License-Identifier: Apache-2.0 */
/* transports/tcp/tcp.h: the epoll TCP transport's one exported symbol. */
#ifndef WEFT_TRANSPORTS_TCP_TCP_H
#define WEFT_TRANSPORTS_TCP_TCP_H

#include <weft/transport_plugin.h>

/** The "tcp" transport (epoll, non-blocking sockets); see tcp.c. */
extern const weft_transport_ops weft__transport_tcp;

#endif
