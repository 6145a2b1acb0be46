/* SPDX-License-Identifier: Apache-2.0 */
/* Endpoint URIs: parsing "scheme://host:port" and formatting it back; the
 * plugins' socket address helpers (resolve, format). */
#include "harness.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <weft/endpoint.h>
#include <weft/error.h>

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

/* ---- socket address helpers ---- */

static struct sockaddr_in sin_of(const char *ip, uint16_t port) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
  ck_assert_int_eq(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
  return sin;
}

static struct sockaddr_in6 sin6_of(const char *ip, uint16_t port) {
  struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6,
                              .sin6_port = htons(port)};
  ck_assert_int_eq(inet_pton(AF_INET6, ip, &sin6.sin6_addr), 1);
  return sin6;
}

START_TEST(sockaddr_format_ipv4) {
  struct sockaddr_in sin = sin_of("127.0.0.1", 41234);
  char out[64];
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&sin, out, sizeof out), 0);
  ck_assert_str_eq(out, "127.0.0.1:41234");
}
END_TEST

START_TEST(sockaddr_format_ipv6_bracketed) {
  struct sockaddr_in6 sin6 = sin6_of("::1", 41234);
  char out[64];
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&sin6, out, sizeof out), 0);
  ck_assert_str_eq(out, "[::1]:41234");
  sin6 = sin6_of("fe80::1:2", 0);
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&sin6, out, sizeof out), 0);
  ck_assert_str_eq(out, "[fe80::1:2]:0");
}
END_TEST

START_TEST(sockaddr_format_refused_unknown_family) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX, .sun_path = "/tmp/x"};
  char out[64] = "untouched";
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&sun, out, sizeof out),
      WEFT_EAFNOSUPPORT);
  ck_assert_str_eq(out, "untouched");
}
END_TEST

START_TEST(sockaddr_format_refused_short_buffer) {
  struct sockaddr_in sin = sin_of("127.0.0.1", 41234);
  char out[16]; /* "127.0.0.1:41234" is 15 characters and the NUL */
  ck_assert_int_eq(weft_sockaddr_format((struct sockaddr *)&sin, out, 16), 0);
  ck_assert_str_eq(out, "127.0.0.1:41234");
  ck_assert_int_eq(weft_sockaddr_format((struct sockaddr *)&sin, out, 15),
                   WEFT_ENOSPC);
  ck_assert_uint_eq(strlen(out), 14); /* truncated, still terminated */
  struct sockaddr_in6 sin6 = sin6_of("::1", 41234);
  ck_assert_int_eq(weft_sockaddr_format((struct sockaddr *)&sin6, out, 11),
                   WEFT_ENOSPC); /* "[::1]:41234" needs 12 */
}
END_TEST

START_TEST(sockaddr_format_refused_null) {
  char out[64];
  ck_assert_int_eq(weft_sockaddr_format(NULL, out, sizeof out), WEFT_ENOTCONN);
}
END_TEST

static weft_endpoint ep_of(const char *uri) {
  weft_endpoint ep;
  ck_assert_int_eq(weft_endpoint_parse(uri, &ep, NULL, 0), 0);
  return ep;
}

/* Resolves `uri` and checks that the first address formats as `want`
 * (NULL: any loopback address) and that all are stream addresses. */
static void check_resolve(const char *uri, bool passive, const char *want) {
  weft_endpoint ep = ep_of(uri);
  struct addrinfo *res = NULL;
  ck_assert_int_eq(weft_endpoint_resolve(&ep, passive, &res), 0);
  ck_assert_ptr_nonnull(res);
  for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    ck_assert_int_eq(ai->ai_socktype, SOCK_STREAM);
    char text[64];
    ck_assert_int_eq(weft_sockaddr_format(ai->ai_addr, text, sizeof text), 0);
    if (want != NULL && ai == res)
      ck_assert_str_eq(text, want);
    if (want == NULL)
      ck_assert_msg(strcmp(text, "127.0.0.1:7000") == 0 ||
                        strcmp(text, "[::1]:7000") == 0,
                    "%s resolved to %s, not a loopback address", uri, text);
  }
  freeaddrinfo(res);
}

START_TEST(endpoint_resolve_numeric_ipv4) {
  check_resolve("tcp://127.0.0.1:7000", false, "127.0.0.1:7000");
  check_resolve("tcp://127.0.0.1:7000", true, "127.0.0.1:7000");
  check_resolve("tcp://192.0.2.7:0", true, "192.0.2.7:0");
}
END_TEST

START_TEST(endpoint_resolve_numeric_ipv6) {
  check_resolve("tcp://[::1]:7000", false, "[::1]:7000");
  check_resolve("tcp://[::1]:7000", true, "[::1]:7000");
  check_resolve("tcp://[2001:db8::5]:65535", false, "[2001:db8::5]:65535");
}
END_TEST

START_TEST(endpoint_resolve_name_localhost) {
  check_resolve("tcp://localhost:7000", false, NULL);
  check_resolve("tcp://localhost:7000", true, NULL);
}
END_TEST

/* An empty host (an endpoint built in code, the parser refuses it): the
 * wildcard address to listen on, loopback to connect to. */
START_TEST(endpoint_resolve_empty_host) {
  weft_endpoint ep = {.transport = "tcp", .host = "", .port = 7000};
  struct addrinfo *res = NULL;
  ck_assert_int_eq(weft_endpoint_resolve(&ep, true, &res), 0);
  char text[64];
  ck_assert_int_eq(weft_sockaddr_format(res->ai_addr, text, sizeof text), 0);
  ck_assert_msg(strcmp(text, "0.0.0.0:7000") == 0 ||
                    strcmp(text, "[::]:7000") == 0,
                "passive empty host gave %s", text);
  freeaddrinfo(res);
  res = NULL;
  ck_assert_int_eq(weft_endpoint_resolve(&ep, false, &res), 0);
  ck_assert_int_eq(weft_sockaddr_format(res->ai_addr, text, sizeof text), 0);
  ck_assert_msg(strcmp(text, "127.0.0.1:7000") == 0 ||
                    strcmp(text, "[::1]:7000") == 0,
                "active empty host gave %s", text);
  freeaddrinfo(res);
}
END_TEST

/* "bad..host" has an empty label: glibc refuses it without asking DNS, so
 * the test never waits on the network. */
START_TEST(endpoint_resolve_refused_invalid_host) {
  weft_endpoint ep = ep_of("tcp://bad..host:7000");
  struct addrinfo sentinel;
  struct addrinfo *res = &sentinel; /* must stay as it is */
  ck_assert_int_eq(weft_endpoint_resolve(&ep, false, &res), WEFT_EADDRNOTAVAIL);
  ck_assert_ptr_eq(res, &sentinel);
  ck_assert_int_eq(weft_endpoint_resolve(&ep, true, &res), WEFT_EADDRNOTAVAIL);
  struct sockaddr_storage ss;
  ck_assert_int_eq(weft_endpoint_resolve_first(&ep, false, &ss, NULL),
                   WEFT_EADDRNOTAVAIL);
}
END_TEST

START_TEST(endpoint_resolve_first_copies_one_address) {
  weft_endpoint ep = ep_of("verbs://192.0.2.7:7000");
  struct sockaddr_storage ss;
  memset(&ss, 0x5a, sizeof ss);
  socklen_t len = 0;
  ck_assert_int_eq(weft_endpoint_resolve_first(&ep, false, &ss, &len), 0);
  ck_assert_uint_eq(len, sizeof(struct sockaddr_in));
  char text[64];
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&ss, text, sizeof text), 0);
  ck_assert_str_eq(text, "192.0.2.7:7000");
  for (size_t i = len; i < sizeof ss; i++) /* the rest is zeroed */
    ck_assert_uint_eq(((unsigned char *)&ss)[i], 0);

  ep = ep_of("ucx://[::1]:7001");
  ck_assert_int_eq(weft_endpoint_resolve_first(&ep, true, &ss, NULL), 0);
  ck_assert_int_eq(ss.ss_family, AF_INET6);
  ck_assert_int_eq(
      weft_sockaddr_format((struct sockaddr *)&ss, text, sizeof text), 0);
  ck_assert_str_eq(text, "[::1]:7001");
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "endpoint", "core", 0, endpoint_parse_ipv4, endpoint_parse_ipv6_bracketed,
      endpoint_parse_hostname, endpoint_parse_port_bounds,
      endpoint_parse_refused_missing_scheme,
      endpoint_parse_refused_missing_port, endpoint_parse_refused_garbage,
      endpoint_format_round_trip, endpoint_format_refused_short_buffer,
      sockaddr_format_ipv4, sockaddr_format_ipv6_bracketed,
      sockaddr_format_refused_unknown_family,
      sockaddr_format_refused_short_buffer, sockaddr_format_refused_null,
      endpoint_resolve_numeric_ipv4, endpoint_resolve_numeric_ipv6,
      endpoint_resolve_name_localhost, endpoint_resolve_empty_host,
      endpoint_resolve_refused_invalid_host,
      endpoint_resolve_first_copies_one_address, NULL);
}
