/* SPDX-License-Identifier: Apache-2.0 */
/* Error names and messages, generated from the X-macro tables in error.h. */
#include <weft/error.h>

const char *weft_strerror(int err) {
  switch (err) {
#define WEFT__SYS_MSG(name, msg)                                               \
  case WEFT_##name:                                                            \
    return msg;
    WEFT_ERRNO_MAP(WEFT__SYS_MSG)
#undef WEFT__SYS_MSG
#define WEFT__OWN_MSG(name, val, msg)                                          \
  case WEFT_##name:                                                            \
    return msg;
    WEFT_OWN_ERR_MAP(WEFT__OWN_MSG)
#undef WEFT__OWN_MSG
  default:
    return "unknown error";
  }
}

const char *weft_err_name(int err) {
  switch (err) {
#define WEFT__SYS_NAME(name, msg)                                              \
  case WEFT_##name:                                                            \
    return #name;
    WEFT_ERRNO_MAP(WEFT__SYS_NAME)
#undef WEFT__SYS_NAME
#define WEFT__OWN_NAME(name, val, msg)                                         \
  case WEFT_##name:                                                            \
    return #name;
    WEFT_OWN_ERR_MAP(WEFT__OWN_NAME)
#undef WEFT__OWN_NAME
  default:
    return "UNKNOWN";
  }
}
