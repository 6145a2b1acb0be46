/* SPDX-License-Identifier: Apache-2.0 */
/* weft_loop_call: run a function on a loop and wait for its result, for
 * the threads that set loops up and tear them down. */
#include <pthread.h>
#include <stdbool.h>

#include <weft/loop.h>

typedef struct loop_call {
  int (*fn)(void *);
  void *arg;
  int rc;
  bool done; /* guarded by lock */
  pthread_mutex_t lock;
  pthread_cond_t cond;
} loop_call;

static void loop_call_task(void *arg) {
  loop_call *c = arg;
  int rc = c->fn(c->arg);
  pthread_mutex_lock(&c->lock);
  c->rc = rc;
  c->done = true;
  pthread_cond_signal(&c->cond);
  pthread_mutex_unlock(&c->lock);
}

int weft_loop_call(weft_loop *loop, int (*fn)(void *), void *arg) {
  if (weft_loop_in_loop(loop))
    return fn(arg);
  loop_call c = {.fn = fn,
                 .arg = arg,
                 .lock = PTHREAD_MUTEX_INITIALIZER,
                 .cond = PTHREAD_COND_INITIALIZER};
  int rc = weft_loop_execute(loop, loop_call_task, &c);
  if (rc < 0)
    return rc;
  pthread_mutex_lock(&c.lock);
  while (!c.done)
    pthread_cond_wait(&c.cond, &c.lock);
  pthread_mutex_unlock(&c.lock);
  pthread_mutex_destroy(&c.lock);
  pthread_cond_destroy(&c.cond);
  return c.rc;
}
