/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the HTTP/1.1 request decoder (the server codec,
 * weft/http.h) with a handler that answers every request, so the response
 * encoder, the pipelining queue and the refusals (status, close) run too.
 *
 * The first input byte seeds how the rest is cut into reads and whether
 * the handler answers at the head or at the end marker. Small limits, so
 * that the fuzzer reaches every one. A crash, a sanitizer report or a
 * leaked buffer is a finding. */
#include <stdint.h>
#include <stdlib.h>

#include <weft/weft.h>

#include "fuzz_feed.h"

static bool answer_at_head;

static void app_read(weft_ctx *ctx, void *msg) {
  bool head = weft_msg_is(msg, &weft_http_request_type);
  bool end = weft_msg_is(msg, &weft_http_end_type);
  weft_msg_release(msg);
  if (head ? answer_at_head : end && !answer_at_head)
    weft_http_respond(ctx, 200, "text/plain", "ok", 2);
}

static void app_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static const weft_handler app_handler = {.name = "app",
                                         .channel_read = app_read,
                                         .channel_read_complete =
                                             app_read_complete};

static void init(weft_channel *ch, void *arg) {
  answer_at_head = *(const uint8_t *)arg & 0x80;
  weft_pipeline *p = weft_channel_pipeline(ch);
  weft_http_server_options o;
  weft_http_server_options_init(&o);
  o.max_head_bytes = 512;
  o.max_headers = 8;
  o.max_body = 256;
  o.max_pipelined = 4;
  o.header_timeout_ms = 0;
  if (weft_http_server_codec_add_last(p, "http", &o) != 0 ||
      weft_pipeline_add_last(p, "app", &app_handler, NULL) != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_run(data, size, init, true);
}
