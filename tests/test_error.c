/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes: names, messages, errno compatibility. */
#include "harness.h"

#include <string.h>

#include <weft/error.h>

START_TEST(error_strerror_system_code) {
  ck_assert_int_eq(WEFT_ECONNREFUSED, -ECONNREFUSED);
  ck_assert_str_eq(weft_strerror(WEFT_ECONNREFUSED), "connection refused");
  ck_assert_str_eq(weft_err_name(-ECONNREFUSED), "ECONNREFUSED");
}
END_TEST

START_TEST(error_strerror_own_code) {
  ck_assert_int_lt(WEFT_ETOOLONG, -4000);
  ck_assert_str_eq(weft_err_name(WEFT_ETOOLONG), "ETOOLONG");
  ck_assert_ptr_nonnull(strstr(weft_strerror(WEFT_ETOOLONG), "maximum"));
}
END_TEST

START_TEST(error_strerror_unknown_code) {
  ck_assert_str_eq(weft_strerror(-123456), "unknown error");
  ck_assert_str_eq(weft_err_name(1), "UNKNOWN");
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("error", "core", 0, error_strerror_system_code,
                  error_strerror_own_code, error_strerror_unknown_code, NULL);
}
