/* samples/kv/kv_config.h: the keys of the KV service's config file. */
#ifndef WEFT_SAMPLES_KV_KV_CONFIG_H
#define WEFT_SAMPLES_KV_KV_CONFIG_H

#include <weft/config.h>

/**
 * Every key of the KV service's own sections, with defaults and valid
 * values: [kv] (read by weft-kv-server) and [kvbench] (weft-kvbench). One
 * table, so that one file serves every program of the service: each
 * program sets it as weft_config.app_keys and ignores the sections of the
 * others (their keys are still checked, and --help shows only its own).
 */
extern const weft_config_key kv_config_keys[];

#endif
