/* SPDX-License-Identifier: Apache-2.0 */
/* The library's version (weft/version.h): the macros as they were when the
 * library was built, for programs that may run with a newer one. */
#include <weft/version.h>

const char *weft_version(void) { return WEFT_VERSION_STRING; }

unsigned weft_version_number(void) { return WEFT_VERSION_HEX; }
