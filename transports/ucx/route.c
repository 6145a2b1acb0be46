/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/route.c: the client's routes, the UCX transport's other
 * process-wide state (besides context.c's): for each server a REDIRECT
 * came from, the ports of all its listeners (one per loop, on the host the
 * application named) and its id. A later connect to that server goes
 * straight to the next listener, round-robin, and says so in its HELLO
 * (UCX_HELLO_ROUTED), so the server keeps it there: only a process's first
 * connect to a server may be redirected. A route is dropped when a connect
 * through it fails or meets another server id (the server restarted), and
 * the connect then goes to the server's own address (channel.c). Any
 * thread, under route_lock. */

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "transports/ucx/ucx_internal.h"

/* A server's listeners, as its REDIRECT named them. */
typedef struct ucx_route {
  struct sockaddr_storage primary; /* the server's address (port set) */
  uint32_t server_id;              /* 0: the entry is free */
  uint32_t n, next;                /* listeners; the next one to use */
  uint16_t ports[UCX_MAX_LISTENERS];
  uint64_t used; /* last use, for replacing the oldest */
} ucx_route;

static pthread_mutex_t route_lock = PTHREAD_MUTEX_INITIALIZER;
static ucx_route routes[UCX_ROUTES];
static uint64_t route_clock;

/* Whether `a` and `b` are the same address and port. */
static bool same_addr(const struct sockaddr_storage *a,
                      const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return false;
  if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
  }
  const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
  return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
}

/* The route to `primary`, NULL if none; route_lock held. */
static ucx_route *route_find(const struct sockaddr_storage *primary) {
  for (unsigned i = 0; i < UCX_ROUTES; i++)
    if (routes[i].server_id != 0 && same_addr(&routes[i].primary, primary))
      return &routes[i];
  return NULL;
}

bool weft__ucx_route_pick(const struct sockaddr_storage *primary,
                          uint16_t *port, uint32_t *server_id) {
  pthread_mutex_lock(&route_lock);
  ucx_route *r = route_find(primary);
  if (r != NULL) {
    *port = r->ports[r->next];
    r->next = (r->next + 1) % r->n;
    *server_id = r->server_id;
    r->used = ++route_clock;
  }
  pthread_mutex_unlock(&route_lock);
  return r != NULL;
}

void weft__ucx_route_learn(const struct sockaddr_storage *primary,
                           uint32_t server_id, uint32_t n, const void *ports) {
  if (n < 2 || n > UCX_MAX_LISTENERS || server_id == 0)
    return; /* weft__ucx_hdr_check let no such REDIRECT through */
  pthread_mutex_lock(&route_lock);
  ucx_route *r = route_find(primary);
  if (r == NULL) {
    r = &routes[0];
    for (unsigned i = 1; i < UCX_ROUTES && r->server_id != 0; i++)
      if (routes[i].server_id == 0 || routes[i].used < r->used)
        r = &routes[i];
  }
  if (r->server_id != server_id || r->n != n) {
    r->primary = *primary;
    r->server_id = server_id;
    r->n = n;
    r->next = 0;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t port;
      memcpy(&port, (const char *)ports + 4u * i, sizeof port);
      r->ports[i] = (uint16_t)port;
    }
  }
  r->used = ++route_clock;
  pthread_mutex_unlock(&route_lock);
}

void weft__ucx_route_forget(const struct sockaddr_storage *primary,
                            uint32_t keep_id) {
  pthread_mutex_lock(&route_lock);
  ucx_route *r = route_find(primary);
  if (r != NULL && (keep_id == 0 || r->server_id != keep_id))
    r->server_id = 0;
  pthread_mutex_unlock(&route_lock);
}
