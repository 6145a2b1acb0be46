/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/ucx.h: the UCX transport's exported symbols. */
#ifndef WEFT_TRANSPORTS_UCX_UCX_H
#define WEFT_TRANSPORTS_UCX_UCX_H

#include <weft/transport_plugin.h>

/** The "ucx" transport (UCP active messages); see ucx_internal.h. */
extern const weft_transport_ops weft__transport_ucx;

#endif
