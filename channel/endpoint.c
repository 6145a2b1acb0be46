/* SPDX-License-Identifier: Apache-2.0 */
/* Endpoint URIs: "scheme://host:port", with IPv6 hosts in brackets.
 *
 * The parser is strict on purpose: an endpoint usually comes from a config
 * file or a command line, and a typo should fail here with a sentence that
 * names the expected form, not later as a confusing resolver error. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <weft/endpoint.h>
#include <weft/error.h>

#include "channel/endpoint_internal.h"

#define EXPECTED_FORM "scheme://host:port, e.g. tcp://127.0.0.1:7000"

static bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c) {
  return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
         (c >= 'A' && c <= 'F');
}

bool weft__scheme_valid(const char *s, size_t n) {
  if (n == 0 || n > WEFT__SCHEME_MAX || !(s[0] >= 'a' && s[0] <= 'z'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!is_lower_alnum(s[i]))
      return false;
  return true;
}

/* Host names and IPv4 addresses: letters, digits, '.', '-', '_' (the
 * underscore because some internal DNS names and device names use it). */
static bool host_name_valid(const char *h, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!is_alnum(h[i]) && h[i] != '.' && h[i] != '-' && h[i] != '_')
      return false;
  return true;
}

/* An IPv6 address as written inside brackets: hex digits, ':' and '.'
 * (embedded IPv4), then an optional "%zone" (fe80::1%eth0). The resolver
 * does the exact check; this one catches typos with a clear message. */
static bool host_v6_valid(const char *h, size_t n) {
  size_t i = 0;
  bool colon = false;
  for (; i < n && h[i] != '%'; i++) {
    if (h[i] == ':')
      colon = true;
    else if (!is_hex(h[i]) && h[i] != '.')
      return false;
  }
  if (!colon)
    return false;
  if (i == n)
    return true;
  return n - i > 1 && host_name_valid(h + i + 1, n - i - 1);
}

static const char *parse_port(const char *p, uint16_t *out) {
  size_t n = strlen(p);
  if (n == 0)
    return "missing port";
  if (n > 5 || strspn(p, "0123456789") != n)
    return "the port must be a number from 0 to 65535";
  unsigned long v = 0;
  for (size_t i = 0; i < n; i++)
    v = v * 10 + (unsigned long)(p[i] - '0');
  if (v > 65535)
    return "the port must be a number from 0 to 65535";
  *out = (uint16_t)v;
  return NULL;
}

/* Splits "host:port" or "[v6]:port" into the host span and the port text. */
static const char *split_host(const char *s, const char **host, size_t *hlen,
                              const char **port, bool *v6) {
  *v6 = s[0] == '[';
  if (*v6) {
    const char *close = strchr(s, ']');
    if (close == NULL)
      return "missing ']' after the IPv6 address";
    if (close[1] != ':')
      return "missing port";
    *host = s + 1;
    *hlen = (size_t)(close - s - 1);
    *port = close + 2;
    return NULL;
  }
  const char *colon = strrchr(s, ':');
  if (colon == NULL)
    return "missing port";
  *host = s;
  *hlen = (size_t)(colon - s);
  *port = colon + 1;
  if (memchr(s, ':', *hlen) != NULL)
    return "an IPv6 address must be in brackets, as in tcp://[::1]:7000";
  return NULL;
}

static const char *parse_host(const char *s, weft_endpoint *out,
                              const char **port) {
  const char *host;
  size_t hlen;
  bool v6;
  const char *why = split_host(s, &host, &hlen, port, &v6);
  if (why != NULL)
    return why;
  if (hlen == 0)
    return "missing host";
  if (hlen >= sizeof out->host)
    return "the host is longer than 255 characters";
  if (v6 ? !host_v6_valid(host, hlen) : !host_name_valid(host, hlen))
    return v6 ? "not an IPv6 address inside the brackets"
              : "the host may hold only letters, digits, '.', '-' and '_'";
  memcpy(out->host, host, hlen);
  out->host[hlen] = '\0';
  return NULL;
}

const char *weft__endpoint_parse(const char *uri, weft_endpoint *out) {
  return weft__endpoint_parse_or(uri, NULL, out);
}

const char *weft__endpoint_parse_or(const char *text, const char *scheme,
                                    weft_endpoint *out) {
  if (text == NULL || text[0] == '\0')
    return "empty endpoint";
  const char *sep = strstr(text, "://");
  const char *rest = sep != NULL ? sep + 3 : text;
  if (sep != NULL) {
    scheme = text;
  } else if (scheme == NULL) {
    return "missing scheme";
  }
  size_t slen = sep != NULL ? (size_t)(sep - text) : strlen(scheme);
  if (!weft__scheme_valid(scheme, slen))
    return "the scheme must be 1 to 15 lowercase letters or digits, "
           "starting with a letter";
  weft_endpoint ep;
  memset(&ep, 0, sizeof ep);
  memcpy(ep.transport, scheme, slen);
  const char *port;
  const char *why = parse_host(rest, &ep, &port);
  if (why == NULL)
    why = parse_port(port, &ep.port);
  if (why == NULL)
    *out = ep; /* only a complete parse touches *out */
  return why;
}

int weft_endpoint_parse(const char *uri, weft_endpoint *out, char *err,
                        size_t err_len) {
  const char *why = weft__endpoint_parse(uri, out);
  if (why == NULL)
    return 0;
  if (err != NULL && err_len > 0)
    snprintf(err, err_len, "bad endpoint '%s': %s; expected " EXPECTED_FORM,
             uri != NULL ? uri : "(null)", why);
  return WEFT_EINVAL;
}

int weft_endpoint_format(const weft_endpoint *ep, char *buf, size_t len) {
  /* A host with a ':' can only be IPv6 (the parser refuses it otherwise),
   * and needs its brackets back to be parsed again. */
  bool v6 = strchr(ep->host, ':') != NULL;
  int n = snprintf(buf, len, v6 ? "%s://[%s]:%u" : "%s://%s:%u", ep->transport,
                   ep->host, (unsigned)ep->port);
  if (n < 0 || (size_t)n >= len)
    return WEFT_ENOSPC;
  return 0;
}

/* ---- socket addresses, for the plugins ---- */

static int gai_to_weft(int gai) {
  switch (gai) {
  case EAI_NONAME:
#ifdef EAI_NODATA
  case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
  case EAI_ADDRFAMILY:
#endif
    return WEFT_EADDRNOTAVAIL;
  case EAI_MEMORY:
    return WEFT_ENOMEM;
  case EAI_FAMILY:
    return WEFT_EAFNOSUPPORT;
  case EAI_SYSTEM:
    return errno > 0 ? -errno : WEFT_EIO;
  case EAI_AGAIN:
    return WEFT_EAGAIN;
  default:
    return WEFT_EINVAL;
  }
}

int weft_endpoint_resolve(const weft_endpoint *ep, bool passive,
                          struct addrinfo **out) {
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)ep->port);
  const char *host = ep->host[0] != '\0' ? ep->host : NULL;
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST |
                                       (passive ? AI_PASSIVE : 0)};
  int rc = getaddrinfo(host, port, &hints, out);
  if (rc == EAI_NONAME && host != NULL) {
    /* Not an address: a name, for the resolver. AI_ADDRCONFIG skips the
     * families this host cannot reach (no AAAA answer picked first on an
     * IPv4-only host). */
    hints.ai_flags &= ~AI_NUMERICHOST;
    hints.ai_flags |= AI_ADDRCONFIG;
    rc = getaddrinfo(host, port, &hints, out);
  }
  return rc == 0 ? 0 : gai_to_weft(rc);
}

int weft_endpoint_resolve_first(const weft_endpoint *ep, bool passive,
                                struct sockaddr_storage *out,
                                socklen_t *out_len) {
  struct addrinfo *res;
  int err = weft_endpoint_resolve(ep, passive, &res);
  if (err < 0)
    return err;
  /* getaddrinfo's addresses are sockaddr_in or sockaddr_in6: both fit. */
  memset(out, 0, sizeof *out);
  memcpy(out, res->ai_addr, res->ai_addrlen);
  if (out_len != NULL)
    *out_len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

int weft_sockaddr_format(const struct sockaddr *sa, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN];
  int n;
  if (sa == NULL)
    return WEFT_ENOTCONN;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
    n = snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(sin->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
    n = snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(sin6->sin6_port));
  } else {
    return WEFT_EAFNOSUPPORT;
  }
  return n < 0 || (size_t)n >= len ? WEFT_ENOSPC : 0;
}
