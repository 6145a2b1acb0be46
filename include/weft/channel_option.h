/* SPDX-License-Identifier: Apache-2.0 */
/* weft/channel_option.h: the names of channel options.
 *
 * One vocabulary for both sides: applications set options on channels
 * (weft_channel_set_option in channel.h, weft_channel_config in
 * bootstrap.h), and transports implement the ones they have
 * (weft_transport_ops.set_option in transport_plugin.h). A header of its
 * own so that the plugin interface does not depend on the channel API.
 */
#ifndef WEFT_CHANNEL_OPTION_H
#define WEFT_CHANNEL_OPTION_H

#ifdef __cplusplus
extern "C" {
#endif

/** Channel options, set with weft_channel_set_option(). */
typedef enum weft_channel_option {
  WEFT_OPT_TCP_NODELAY = 1,          /* 0/1, default 1 (tcp, uring) */
  WEFT_OPT_SO_SNDBUF = 2,            /* bytes, default: the kernel's */
  WEFT_OPT_SO_RCVBUF = 3,            /* bytes, default: the kernel's */
  WEFT_OPT_SO_KEEPALIVE = 4,         /* 0/1, default 0 */
  WEFT_OPT_WRITE_LOW_WATERMARK = 5,  /* bytes, default 32 KiB */
  WEFT_OPT_WRITE_HIGH_WATERMARK = 6, /* bytes, default 64 KiB */
  WEFT_OPT_CONNECT_TIMEOUT_MS = 7,   /* ms, default 10000; 0 = none */
  WEFT_OPT_AUTO_READ = 8,            /* 0/1, default 1: read when ready */
  WEFT_OPT_FLOW_CONTROL = 9,  /* 0/1, default 0 (1 for a server's channels):
                                 stop reading while above the high write
                                 watermark, resume below the low one */
  WEFT_OPT_OUTPUT_LIMIT = 10, /* bytes queued and unsent past which the
                                 channel is closed; 0 = none (default;
                                 a server's channels: 64 MiB,
                                 WEFT_SERVER_OUTPUT_LIMIT) */
  WEFT_OPT_IDLE_TIMEOUT_MS =
      11, /* ms without a read or a send after
             which the channel is closed; 0 = never (default) */
  WEFT_OPT_MAX_MESSAGES_PER_READ =
      12, /* the read budget (Netty's maxMessagesPerRead): reads fired
             (channel_read) per loop iteration before the channel yields
             to the others of its loop; 1..65536, default 16 (tcp, uring) */
  WEFT_OPT_MAX_BYTES_PER_READ =
      13 /* the read budget's bytes per loop iteration; 1..2^30,
            default 256 KiB (tcp, uring) */
} weft_channel_option;

#ifdef __cplusplus
}
#endif
#endif /* WEFT_CHANNEL_OPTION_H */
