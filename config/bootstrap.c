/* SPDX-License-Identifier: Apache-2.0 */
/* From a configuration to the bootstraps: a server's settings, and the
 * endpoints of [server] listen, [client] connect and the applications' own
 * address keys, with [transport] name as the transport of an address
 * written without a scheme. */
#include <stdio.h>
#include <string.h>

#include <weft/config.h>
#include <weft/error.h>

#include "channel/endpoint_internal.h"

void weft_config_server_bootstrap(const weft_config *cfg,
                                  weft_server_bootstrap *sb) {
  sb->backlog = cfg->backlog;
  sb->max_connections = cfg->max_connections;
  sb->child_options = cfg->channel;
  sb->child_options.flow_control = cfg->flow_control;
  sb->child_options.output_limit = cfg->output_limit;
  sb->child_options.idle_timeout_ms = cfg->idle_timeout_ms;
}

int weft_config_endpoint(const weft_config *cfg, const char *uri, char *out,
                         size_t out_len) {
  if (uri == NULL || out == NULL)
    return WEFT_EINVAL;
  int n = strstr(uri, "://") != NULL
              ? snprintf(out, out_len, "%s", uri)
              : snprintf(out, out_len, "%s://%s", cfg->transport, uri);
  if (n < 0 || (size_t)n >= out_len)
    return WEFT_ENOSPC;
  return 0;
}

int weft_config_endpoint_parse(const weft_config *cfg, const char *address,
                               weft_endpoint *out, char *err, size_t err_len) {
  const char *why = cfg != NULL && out != NULL
                        ? weft__endpoint_parse_or(address, cfg->transport, out)
                        : "no configuration or no endpoint to fill";
  if (why == NULL)
    return 0;
  if (err != NULL && err_len > 0)
    snprintf(err, err_len,
             "bad endpoint '%s': %s; expected host:port or "
             "scheme://host:port, e.g. 127.0.0.1:7000 or tcp://127.0.0.1:7000",
             address != NULL ? address : "(null)", why);
  return WEFT_EINVAL;
}
