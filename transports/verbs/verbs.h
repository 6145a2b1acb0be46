/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/verbs.h: the verbs transport's one exported symbol. */
#ifndef WEFT_TRANSPORTS_VERBS_VERBS_H
#define WEFT_TRANSPORTS_VERBS_VERBS_H

#include <weft/transport_plugin.h>

/** The "verbs" transport (ibverbs RC queue pairs set up with rdma_cm); see
 *  verbs_internal.h. */
extern const weft_transport_ops weft__transport_verbs;

#endif
