/* Endpoint URIs: parsing "scheme://host:port" and formatting it back. */
#include "harness.h"

#include <string.h>

#include <weft/error.h>
#include <weft/transport.h>

/* Parses a URI that must be refused; returns the error text. */
static const char *parse_bad(const char *uri) {
  static char err[512];
  weft_endpoint ep;
  memset(&ep, 0x5a, sizeof ep);
  err[0] = '\0';
  ck_assert_int_eq(weft_endpoint_parse(uri, &ep, err, sizeof err), WEFT_EINVAL);
  ck_assert_int_eq(((unsigned char *)&ep)[0], 0x5a); /* untouched */
  ck_assert_ptr_nonnull(strstr(err, "scheme://host:port, e.g. "
                                    "tcp://127.0.0.1:7000"));
  return err;
}

START_TEST(endpoint_parse_ipv4) {
  weft_endpoint ep;
  ck_assert_int_eq(weft_endpoint_parse("tcp://127.0.0.1:7000", &ep, NULL, 0),
                   0);
  ck_assert_str_eq(ep.transport, "tcp");
  ck_assert_str_eq(ep.host, "127.0.0.1");
  ck_assert_uint_eq(ep.port, 7000);
}
END_TEST

START_TEST(endpoint_parse_ipv6_bracketed) {
  weft_endpoint ep;
  ck_assert_int_eq(weft_endpoint_parse("uring://[::1]:7000", &ep, NULL, 0), 0);
  ck_assert_str_eq(ep.transport, "uring");
  ck_assert_str_eq(ep.host, "::1");
  ck_assert_uint_eq(ep.port, 7000);
  ck_assert_int_eq(weft_endpoint_parse("tcp://[fe80::1%eth0]:1", &ep, NULL, 0),
                   0);
  ck_assert_str_eq(ep.host, "fe80::1%eth0");
}
END_TEST

START_TEST(endpoint_parse_hostname) {
  weft_endpoint ep;
  ck_assert_int_eq(
      weft_endpoint_parse("ucx2://node-1.example.org:0", &ep, NULL, 0), 0);
  ck_assert_str_eq(ep.transport, "ucx2");
  ck_assert_str_eq(ep.host, "node-1.example.org");
  ck_assert_uint_eq(ep.port, 0);
}
END_TEST

START_TEST(endpoint_parse_port_bounds) {
  weft_endpoint ep;
  ck_assert_int_eq(weft_endpoint_parse("tcp://h:65535", &ep, NULL, 0), 0);
  ck_assert_uint_eq(ep.port, 65535);
  ck_assert_int_eq(weft_endpoint_parse("tcp://h:0", &ep, NULL, 0), 0);
  ck_assert_uint_eq(ep.port, 0);
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h:65536"), "0 to 65535"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h:-1"), "0 to 65535"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h:123456"), "0 to 65535"));
}
END_TEST

START_TEST(endpoint_parse_refused_missing_scheme) {
  const char *err = parse_bad("127.0.0.1:7000");
  ck_assert_ptr_nonnull(strstr(err, "'127.0.0.1:7000'"));
  ck_assert_ptr_nonnull(strstr(err, "missing scheme"));
  ck_assert_ptr_nonnull(strstr(parse_bad("://h:1"), "scheme must be"));
  ck_assert_ptr_nonnull(strstr(parse_bad("TCP://h:1"), "scheme must be"));
  ck_assert_ptr_nonnull(
      strstr(parse_bad("abcdefghijklmnop://h:1"), "scheme must be"));
}
END_TEST

START_TEST(endpoint_parse_refused_missing_port) {
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://host"), "missing port"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://host:"), "missing port"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://[::1]"), "missing port"));
}
END_TEST

START_TEST(endpoint_parse_refused_garbage) {
  ck_assert_ptr_nonnull(strstr(parse_bad(""), "empty"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://:7000"), "missing host"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://::1:7000"), "brackets"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://[::1:7000"), "']'"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://[zz]:7000"), "IPv6"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h/x:7000"), "host may"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h:70x"), "0 to 65535"));
  ck_assert_ptr_nonnull(strstr(parse_bad("tcp://h:7000/path"), "65535"));
  char uri[300] = "tcp://";
  memset(uri + 6, 'a', 256);
  strcpy(uri + 6 + 256, ":1");
  ck_assert_ptr_nonnull(strstr(parse_bad(uri), "longer than 255"));
}
END_TEST

START_TEST(endpoint_format_round_trip) {
  static const char *const uris[] = {"tcp://127.0.0.1:7000", "uring://[::1]:0",
                                     "verbs://node-1:65535"};
  for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
    weft_endpoint ep;
    char out[300];
    ck_assert_int_eq(weft_endpoint_parse(uris[i], &ep, NULL, 0), 0);
    ck_assert_int_eq(weft_endpoint_format(&ep, out, sizeof out), 0);
    ck_assert_str_eq(out, uris[i]);
  }
}
END_TEST

START_TEST(endpoint_format_refused_short_buffer) {
  weft_endpoint ep;
  char out[21]; /* 20 characters and the NUL */
  ck_assert_int_eq(weft_endpoint_parse("tcp://127.0.0.1:7000", &ep, NULL, 0),
                   0);
  ck_assert_int_eq(weft_endpoint_format(&ep, out, 21), 0);
  ck_assert_int_eq(weft_endpoint_format(&ep, out, 20), WEFT_ENOSPC);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("endpoint");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, endpoint_parse_ipv4);
  tcase_add_test(tc, endpoint_parse_ipv6_bracketed);
  tcase_add_test(tc, endpoint_parse_hostname);
  tcase_add_test(tc, endpoint_parse_port_bounds);
  tcase_add_test(tc, endpoint_parse_refused_missing_scheme);
  tcase_add_test(tc, endpoint_parse_refused_missing_port);
  tcase_add_test(tc, endpoint_parse_refused_garbage);
  tcase_add_test(tc, endpoint_format_round_trip);
  tcase_add_test(tc, endpoint_format_refused_short_buffer);
  suite_add_tcase(s, tc);
  return s;
}
