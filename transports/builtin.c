/* SPDX-License-Identifier: Apache-2.0 */
/* The transports compiled into libweft, in the order `registered: ...`
 * lists them. A plugin that depends on an optional library (liburing,
 * rdma-core, UCX) is built only under its CMake option, which defines
 * WEFT_WITH_<NAME>; adding one is one line here and one in
 * registry_internal.h. */
#include <assert.h>
#include <stddef.h>

#include "transports/registry_internal.h"

static const weft_transport_ops *const builtin[] = {
    &weft__transport_tcp,
#ifdef WEFT_WITH_URING
    &weft__transport_uring,
#endif
#ifdef WEFT_WITH_VERBS
    &weft__transport_verbs,
#endif
#ifdef WEFT_WITH_UCX
    &weft__transport_ucx,
#endif
};

void weft__transports_builtin(void) {
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
    int rc = weft__transport_register_builtin(builtin[i]);
    /* The registry is empty here and the list is fixed at build time, so a
     * failure means two built-ins share a name or the list outgrew it. */
    assert(rc == 0);
    (void)rc;
  }
}
