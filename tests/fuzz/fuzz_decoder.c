/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for one decoder (chosen at build time with
 * WEFT_FUZZ_DECODER: 1 length-field, 2 line, 3 rpc, 4 resp).
 *
 * The first input byte seeds how the rest is cut into reads, so the
 * fuzzer explores split points as well as contents. Every decoded message
 * is released; a leaked buffer or a crash is a finding. */
#include <stdint.h>
#include <stdlib.h>

#include <weft/weft.h>

#include "fuzz_feed.h"

static void init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  int rc;
#if WEFT_FUZZ_DECODER == 1
  weft_length_field_options o;
  weft_length_field_options_init(&o);
  o.length_field_offset = 1;
  o.length_field_length = 2;
  o.length_adjustment = -1;
  o.initial_bytes_to_strip = 1;
  o.max_frame_length = 4096;
  rc = weft_length_field_decoder_add_last(p, "decoder", &o);
#elif WEFT_FUZZ_DECODER == 2
  weft_line_options o;
  weft_line_options_init(&o);
  o.max_length = 256;
  rc = weft_line_decoder_add_last(p, "decoder", &o);
#elif WEFT_FUZZ_DECODER == 3
  weft_rpc_codec_options o;
  weft_rpc_codec_options_init(&o);
  o.max_payload = 4096;
  rc = weft_rpc_codec_add_last(p, "decoder", &o);
#else
  weft_resp_options o;
  weft_resp_options_init(&o);
  o.max_args = 64;
  o.max_bulk = 4096;
  o.max_command = 16384;
  o.max_inline = 1024;
  rc = weft_resp_decoder_add_last(p, "decoder", &o);
#endif
  if (rc != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_run(data, size, init, false);
}
