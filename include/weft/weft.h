/* SPDX-License-Identifier: Apache-2.0 */
/* weft/weft.h: the whole application API. A transport plugin also includes
 * weft/transport_plugin.h, which this header leaves out. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/channel_option.h>
#include <weft/cli.h>
#include <weft/clock.h>
#include <weft/config.h>
#include <weft/decoder.h>
#include <weft/embedded.h>
#include <weft/endpoint.h>
#include <weft/error.h>
#include <weft/file_region.h>
#include <weft/flush_consolidation.h>
#include <weft/frame.h>
#include <weft/http.h>
#include <weft/idle.h>
#include <weft/log.h>
#include <weft/logging.h>
#include <weft/loop.h>
#include <weft/msg.h>
#include <weft/pipeline.h>
#include <weft/resp.h>
#include <weft/rpc.h>
#include <weft/rpc_client.h>
#include <weft/rpc_server.h>
#include <weft/source.h>
#include <weft/stats.h>
#include <weft/timer.h>
#include <weft/tls.h>
#include <weft/varint.h>
#include <weft/version.h>

#endif /* WEFT_WEFT_H */
