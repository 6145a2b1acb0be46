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

static void quiet(weft_log_level level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  weft_log_set_handler(quiet, NULL); /* the tail logs every bad input */
  unsigned seed = data[0] | 1u;
  data++, size--;
  weft_embedded *e;
  if (weft_embedded_new(&e, init, NULL) != 0)
    abort();
  size_t off = 0;
  while (off < size) {
    seed = seed * 1103515245u + 12345u;
    size_t n = 1 + (seed >> 16) % 64;
    if (n > size - off)
      n = size - off;
    if (weft_embedded_write_inbound_bytes(e, data + off, n) != 0)
      break; /* closed on an error */
    off += n;
    void *m;
    while ((m = weft_embedded_read_inbound(e)) != NULL)
      weft_msg_release(m);
  }
  if (weft_embedded_free(e) != 0)
    abort(); /* leaked buffers */
  return 0;
}
