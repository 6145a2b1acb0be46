/* SPDX-License-Identifier: Apache-2.0 */
/* The transports compiled into libweft, in the order `registered: ...`
 * lists them: the one place that names the plugins. The list is
 * transports/CMakeLists.txt's (WEFT_TRANSPORTS: tcp, then each optional
 * plugin whose WEFT_WITH_<NAME> is on), handed over as
 * WEFT_BUILTIN_TRANSPORTS, "X(tcp)X(uring)...". Each plugin exports one ops
 * struct, weft__transport_<name>. So adding a plugin is its folder and its
 * name in that list; nothing here changes. */
#include <assert.h>
#include <stddef.h>

#include "channel/registry_internal.h"

#ifndef WEFT_BUILTIN_TRANSPORTS
#error "WEFT_BUILTIN_TRANSPORTS comes from transports/CMakeLists.txt"
#endif

#define X(name) extern const weft_transport_ops weft__transport_##name;
WEFT_BUILTIN_TRANSPORTS
#undef X

#define X(name) &weft__transport_##name,
static const weft_transport_ops *const builtin[] = {WEFT_BUILTIN_TRANSPORTS};
#undef X

void weft__transports_builtin(void) {
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
    int rc = weft__transport_register_builtin(builtin[i]);
    /* The registry is empty here and the list is fixed at build time, so a
     * failure means two built-ins share a name or the list outgrew it. */
    assert(rc == 0);
    (void)rc;
  }
}
