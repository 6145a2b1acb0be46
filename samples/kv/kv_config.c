/* The KV service's config keys (kv_config.h). The programs parse the
 * values; this table says what they are, for --help, the environment and
 * error messages. */
#include "kv_config.h"

const weft_config_key kv_config_keys[] = {
    {"kv", "rpc_listen", "127.0.0.1:7001",
     "weft RPC endpoint, host:port or scheme://host:port; empty = off"},
    {"kv", "resp_listen", "127.0.0.1:6380",
     "Redis protocol endpoint (a stream transport: tcp or uring), "
     "host:port or scheme://host:port; empty = off"},
    {"kv", "requirepass", "",
     "the default user's password (Redis' requirepass), at most 1023 "
     "bytes; empty = none: every client is authenticated"},
    {"kv", "user", "",
     "an ACL user's name (AUTH user password), at most 64 bytes, not "
     "\"default\"; with user_password"},
    {"kv", "user_password", "", "the ACL user's password, at most 1023 bytes"},
    {"kv", "protected_mode", "yes",
     "yes or no: without requirepass, refuse clients from outside the "
     "loopback network"},
    {"kv", "password", "",
     "the password weft-kv and weft-kvbench send (AUTH); also "
     "WEFT_KV_PASSWORD or REDISCLI_AUTH"},
    {"kv", "client_user", "",
     "the user weft-kv and weft-kvbench authenticate as; empty = default"},
    {"kv", "max_value_bytes", "1048576",
     "largest value in bytes, an integer from 1 to 536870912"},
    {"kv", "stripes", "64",
     "lock stripes of the store, a power of two from 1 to 4096"},
    {"kv", "expire_hz", "10",
     "active expiry passes per second per loop, an integer from 1 to 1000"},
    {"kvbench", "workload", "A",
     "A (50/50 read/update), B (95/5) or C (read only)"},
    {"kvbench", "records", "100000", "keys in the key space, an integer > 0"},
    {"kvbench", "operations", "0",
     "measured operations, an integer >= 0 (0 = run for the duration)"},
    {"kvbench", "duration", "10", "measured seconds >= 0"},
    {"kvbench", "warmup", "2", "unmeasured seconds >= 0 before the run"},
    {"kvbench", "distribution", "zipfian", "uniform, zipfian or scrambled"},
    {"kvbench", "value_size", "100", "bytes, at most 1048576"},
    {"kvbench", "connections", "4", "an integer from 1 to 10000"},
    {"kvbench", "pipeline", "16",
     "outstanding requests per connection, an integer from 1 to 10000"},
    {"kvbench", "load", "true",
     "true or false: SET every record before the run"},
    {"kvbench", "json", "false", "true or false: one JSON object as output"},
    {"kvbench", "seed", "1", "random seed, an integer >= 0"},
    {NULL, NULL, NULL, NULL}};
