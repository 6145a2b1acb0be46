/* weft/weft.h: the whole public API. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/clock.h>
#include <weft/config.h>
#include <weft/embedded.h>
#include <weft/error.h>
#include <weft/flush_consolidation.h>
#include <weft/frame.h>
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
#include <weft/transport.h>
#include <weft/varint.h>
#include <weft/version.h>

#endif /* WEFT_WEFT_H */
