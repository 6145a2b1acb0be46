/* SPDX-License-Identifier: Apache-2.0 */
/* bench_main.c: weft-bench's front door. The command line (getopt_long,
 * with -c, -o, --help and --version through weft_cli) into bench_opt through
 * the setters of bench_options.c, then bench_run (bench_run.c). Only the
 * spelling of the options lives here; what the program does is in bench.h. */

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <weft/cli.h>

#include "bench.h"
#include "bench_util.h"

static const char *const sections[] = {"loop", "transport", NULL};

static weft_cli cli = {
    .prog = "weft-bench",
    .synopsis = "[options]",
    .about = "Transport benchmarks, Observatory-style: ping-pong round "
             "trips, one-way\nstreams, bidirectional echo, message rate, "
             "connection setup and idle cost,\nfor every setup (-S) side "
             "by side, interleaved over repetitions. A setup\nwithout a "
             "window takes [loop] busy_poll_us; with no -S, the raw "
             "socket floors\nand [transport] name at its window and at 0.",
    .flags =
        "  -S, --setup SPEC        raw-busy | raw-block | raw-tls-busy | "
        "raw-tls-block |\n"
        "                          TRANSPORT[+tls][:BUSY_POLL_US]\n"
        "                          (repeatable; e.g. -S raw-busy -S tcp:20 "
        "-S uring:0;\n"
        "                          +tls: the TLS handler first at both "
        "ends; raw-tls-*:\n"
        "                          OpenSSL alone, SSL_read blocking or "
        "spinning, the\n"
        "                          floor of +tls; pingpong and stream "
        "only)\n"
        "  --tls-certs DIR         the +tls and raw-tls setups' "
        "certificates: ca.pem,\n"
        "                          server.pem, server.key "
        "(tests/tls/make-certs.sh DIR\n"
        "                          makes them)\n"
        "  --tls-ktls              +tls: ktls = on (the kernel encrypts "
        "after a TLS 1.3\n"
        "                          handshake on tcp, where it can)\n"
        "  -p LIST                 patterns: "
        "pingpong,stream,bidir,rate,connect,idle\n"
        "  -s LIST                 sizes, e.g. 16,256,4K,64K,1M (max 16M)\n"
        "  -r N                    repetitions (median and min..max "
        "reported; 3)\n"
        "  -n N                    ping-pong round trips per repetition "
        "(20000; fewer\n"
        "                          above 4 KiB, at least 200)\n"
        "  -w N                    warm-up round trips (2000, scaled the "
        "same)\n"
        "  -t SECONDS              measured time per repetition, other "
        "patterns (0.5)\n"
        "  --warm-seconds S        warm-up of the timed patterns (0.1)\n"
        "  --rate LIST             rate points CONNSxWINDOW (1x64,4x16)\n"
        "  --rate-size N           message size of the rate pattern (16)\n"
        "  --idle-conns N          connections of the idle pattern (100)\n"
        "  --idle-seconds S        idle time of the idle pattern (3)\n"
        "  --server-loops N        loops of the weft server (1; loop i on CPU "
        "1+i)\n"
        "  --no-pin                pin no thread (by default the client's "
        "loop and\n"
        "                          raw client run on CPU 0, the server's "
        "loop i on 1+i)\n"
        "  --role both|server|client   --host ADDR (127.0.0.1)   --port N\n"
        "  --server-pid PID        client role: the server process, for "
        "idle CPU\n"
        "  --plain-echo            no hello: a client (pingpong, bidir, "
        "rate, idle) is\n"
        "                          answered by any echo server; a server "
        "echoes all\n"
        "  -x SETUP:PATTERN        skip a pattern for a transport (or raw "
        "mode)\n"
        "  --csv FILE --json FILE --md FILE   --progress --no-progress -q\n",
    .examples = "weft-bench -S raw-busy -S tcp:20 -S uring:20 -p pingpong -s "
                "16,4K\n"
                "weft-bench -S raw-tls-busy -S tcp+tls:20 --tls-certs "
                "/tmp/certs -p pingpong,stream\n"
                "  -s 16,1M\n"
                "weft-bench -S ucx -p pingpong,rate -s 16 --rate 1x64 -o "
                "transport.ucx.tls=tcp",
    .sections = sections};

static _Noreturn void bad_usage(const char *what, const char *value) {
  weft_cli_usage_error(&cli, "%s%s%s", what, value != NULL ? " " : "",
                       value != NULL ? value : "");
  exit(2);
}

enum {
  OPT_WARM_SECONDS = 256,
  OPT_RATE,
  OPT_RATE_SIZE,
  OPT_IDLE_CONNS,
  OPT_IDLE_SECONDS,
  OPT_SERVER_LOOPS,
  OPT_ROLE,
  OPT_HOST,
  OPT_PORT,
  OPT_SERVER_PID,
  OPT_CSV,
  OPT_JSON,
  OPT_MD,
  OPT_PROGRESS,
  OPT_NO_PROGRESS,
  OPT_TLS_CERTS,
  OPT_TLS_KTLS,
  OPT_PLAIN_ECHO,
  OPT_NO_PIN,
};

static const struct option long_opts[] = {
    {"warm-seconds", required_argument, NULL, OPT_WARM_SECONDS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"rate-size", required_argument, NULL, OPT_RATE_SIZE},
    {"idle-conns", required_argument, NULL, OPT_IDLE_CONNS},
    {"idle-seconds", required_argument, NULL, OPT_IDLE_SECONDS},
    {"server-loops", required_argument, NULL, OPT_SERVER_LOOPS},
    {"role", required_argument, NULL, OPT_ROLE},
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"server-pid", required_argument, NULL, OPT_SERVER_PID},
    {"csv", required_argument, NULL, OPT_CSV},
    {"json", required_argument, NULL, OPT_JSON},
    {"md", required_argument, NULL, OPT_MD},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"tls-certs", required_argument, NULL, OPT_TLS_CERTS},
    {"tls-ktls", no_argument, NULL, OPT_TLS_KTLS},
    {"plain-echo", no_argument, NULL, OPT_PLAIN_ECHO},
    {"no-pin", no_argument, NULL, OPT_NO_PIN},
    {"setup", required_argument, NULL, 'S'},
    WEFT_CLI_LONG_OPTS,
    {NULL, 0, NULL, 0}};

static void parse_long(int opt, char **argv) {
  bench_opts *o = &bench_opt;
  switch (opt) {
  case OPT_WARM_SECONDS:
    o->warm_seconds = bench_parse_seconds("--warm-seconds", optarg, 0, 3600);
    break;
  case OPT_RATE:
    bench_opts_rates(optarg);
    break;
  case OPT_RATE_SIZE:
    o->rate_size = bench_parse_size(optarg);
    break;
  case OPT_IDLE_CONNS:
    o->idle_conns = (int)bench_parse_long("--idle-conns", optarg, 1, 1000000);
    break;
  case OPT_IDLE_SECONDS:
    o->idle_seconds = bench_parse_seconds("--idle-seconds", optarg, 0, 3600);
    break;
  case OPT_SERVER_LOOPS:
    o->server_loops = (int)bench_parse_long("--server-loops", optarg, 1, 1024);
    break;
  case OPT_ROLE:
    if (!bench_opts_role(optarg))
      bad_usage("--role: expected both, server or client, not", optarg);
    break;
  case OPT_HOST:
    snprintf(o->host, sizeof o->host, "%s", optarg);
    break;
  case OPT_PORT:
    o->port = (int)bench_parse_long("--port", optarg, 0, 65535);
    break;
  case OPT_SERVER_PID:
    o->server_pid = (pid_t)bench_parse_long("--server-pid", optarg, 1, INT_MAX);
    break;
  case OPT_CSV:
    o->csv = optarg;
    break;
  case OPT_JSON:
    o->json = optarg;
    break;
  case OPT_MD:
    o->md = optarg;
    break;
  case OPT_PROGRESS:
  case OPT_NO_PROGRESS:
    o->progress = opt == OPT_PROGRESS;
    break;
  case OPT_TLS_CERTS:
    o->tls_certs = optarg;
    break;
  case OPT_TLS_KTLS:
    o->tls_ktls = true;
    break;
  case OPT_PLAIN_ECHO:
    o->plain_echo = true;
    break;
  case OPT_NO_PIN:
    o->no_pin = true;
    break;
  default:
    weft_cli_bad_option(&cli, opt, argv[optind - 1]);
    exit(2);
  }
}

/* The -S specs are kept for bench_opts_configs, which needs the whole
 * configuration before it can take the first. Returns 1 when --help or
 * --version was answered. */
static int parse_args(int argc, char **argv, const weft_config *cfg,
                      const char **specs, int *n_specs) {
  int opt;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":" WEFT_CLI_OPTS "S:p:s:r:n:w:t:x:q",
                            long_opts, NULL)) != -1) {
    int rc = weft_cli_option(&cli, opt, optarg);
    if (rc < 0)
      exit(2);
    if (rc > 0)
      continue;
    switch (opt) {
    case 'S':
      if (*n_specs == BENCH_MAX_CONFIGS)
        bench_fail("too many setups (at %s)", optarg);
      specs[(*n_specs)++] = optarg;
      break;
    case 'p':
      bench_opts_patterns(optarg);
      break;
    case 's':
      bench_opts_sizes(optarg);
      break;
    case 'r':
      bench_opt.reps = (int)bench_parse_long("-r", optarg, 1, 1000);
      break;
    case 'n':
      bench_opt.iters = bench_parse_long("-n", optarg, 1, LONG_MAX);
      break;
    case 'w':
      bench_opt.warmup = bench_parse_long("-w", optarg, 0, LONG_MAX);
      break;
    case 't':
      bench_opt.seconds = bench_parse_seconds("-t", optarg, 0.001, 86400);
      break;
    case 'q':
      bench_opt.quiet = true;
      break;
    case 'x':
      bench_opts_exclude(optarg);
      break;
    case 'h':
      return weft_cli_help(&cli, cfg, stdout) == 0 ? 1 : -1;
    case 'V':
      return weft_cli_version(&cli, stdout) == 0 ? 1 : -1;
    default:
      parse_long(opt, argv);
    }
  }
  if (optind != argc)
    bad_usage("unexpected argument", argv[optind]);
  return 0;
}

static void join_args(int argc, char **argv, char *out, size_t len) {
  size_t off = 0;
  out[0] = '\0';
  for (int i = 0; i < argc && off < len; i++)
    off +=
        (size_t)snprintf(out + off, len - off, "%s%s", i ? " " : "", argv[i]);
}

int main(int argc, char **argv) {
  char command[1024];
  const char *specs[BENCH_MAX_CONFIGS];
  int n_specs = 0;
  weft_config cfg;
  weft_config_init(&cfg);
  join_args(argc, argv, command, sizeof command);
  bench_opts_defaults();
  int help = parse_args(argc, argv, &cfg, specs, &n_specs);
  if (help != 0)
    return help > 0 ? 0 : 2;
  if (weft_cli_configure(&cli, &cfg) < 0)
    return 2;
  bench_opts_configs(specs, n_specs, &cfg);
  if (!bench_opts_check())
    bad_usage("a count, time or port out of range; see --help", NULL);
  bench_pin_enable(!bench_opt.no_pin);
  return bench_run(command);
}
