/* SPDX-License-Identifier: Apache-2.0 */
/* The version: the generated macros, the library's run-time answer and
 * what every program's --version prints (weft_cli_version) agree. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/cli.h>
#include <weft/version.h>

START_TEST(version_library_matches_macros) {
  ck_assert_str_eq(weft_version(), WEFT_VERSION_STRING);
  ck_assert_uint_eq(weft_version_number(), WEFT_VERSION_HEX);
  char parts[32];
  snprintf(parts, sizeof parts, "%d.%d.%d", WEFT_VERSION_MAJOR,
           WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
  ck_assert_str_eq(parts, WEFT_VERSION_STRING);
  ck_assert_uint_eq(WEFT_VERSION_HEX, (unsigned)WEFT_VERSION_MAJOR << 16 |
                                          (unsigned)WEFT_VERSION_MINOR << 8 |
                                          (unsigned)WEFT_VERSION_PATCH);
}
END_TEST

START_TEST(version_cli_prints_name_and_version) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(out);
  weft_cli cli = {.prog = "weft-test"};
  ck_assert_int_eq(weft_cli_version(&cli, out), 0);
  fclose(out);
  /* help2man takes the name and version from this first line. */
  ck_assert_ptr_eq(strstr(text, "weft-test (weft) " WEFT_VERSION_STRING "\n"),
                   text);
  ck_assert_ptr_nonnull(strstr(text, "Apache License, Version 2.0"));
  free(text);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("version", "core", 0, version_library_matches_macros,
                  version_cli_prints_name_and_version, NULL);
}
