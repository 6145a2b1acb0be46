# SPDX-License-Identifier: Apache-2.0
# Shared by the KV's benchmark scripts (sourced after weft's scripts/lib.sh,
# not run).

# weft-kv-servers beside redis-server (bench-kv-cpu.sh, bench-kv-counts.sh).

# kv_servers_start OUT PORT SPEC...: starts each LABEL=BINARY[,OPTION...]
# spec with -o kv.rpc_listen= and, unless its options set it, -o
# kv.resp_listen=127.0.0.1:P (the word PORT in its options becomes P),
# ports from PORT up, then redis-server (no persistence) on the next port;
# fills `labels`, `ports` and `spids` (redis last) and appends to `pids`
# (the caller's cleanup kills them). A server's stderr goes to
# OUT/LABEL.log. With KV_PRELOAD set, every server runs with
# LD_PRELOAD=$KV_PRELOAD and ALLOC_COUNT_FILE=OUT/LABEL.heap. Fails,
# showing the log, if one has exited a second later.
kv_servers_start() {
  local out=$1 port=$2 spec label si
  local -a cmd
  shift 2
  labels=() ports=() spids=()
  for spec in "$@"; do
    label=${spec%%=*}
    IFS=',' read -r -a cmd <<<"${spec#*=}"
    cmd=("${cmd[@]//PORT/$port}")
    case "${spec#*=}" in
    *kv.resp_listen=*) ;;
    *) cmd+=(-o "kv.resp_listen=127.0.0.1:$port") ;;
    esac
    kv_server_exec "$out" "$label" "${cmd[@]}" -o kv.rpc_listen= \
      2>"$out/$label.log" &
    pids+=($!) labels+=("$label") ports+=("$port") spids+=($!)
    port=$((port + 1))
  done
  kv_server_exec "$out" redis redis-server --port "$port" --save "" \
    --appendonly no --daemonize no --loglevel warning \
    >/dev/null 2>"$out/redis.log" &
  pids+=($!) labels+=(redis) ports+=("$port") spids+=($!)
  sleep 1
  for si in "${!labels[@]}"; do
    kill -0 "${spids[$si]}" 2>/dev/null && continue
    echo "${labels[$si]} did not start:" >&2
    cat "$out/${labels[$si]}.log" >&2 2>/dev/null || true
    return 1
  done
}

# kv_server_exec OUT LABEL COMMAND...: replaces this (background) shell
# with COMMAND, under KV_PRELOAD's counter if set.
kv_server_exec() {
  local out=$1 label=$2
  shift 2
  if [ -n "${KV_PRELOAD:-}" ]; then
    ALLOC_COUNT_FILE="$out/$label.heap" LD_PRELOAD="$KV_PRELOAD" exec "$@"
  fi
  exec "$@"
}

# bench_csv PREFIX PORT ARGS...: one redis-benchmark run of SET and GET (16 B
# values, 100000 random keys) against 127.0.0.1:PORT with ARGS; its CSV rows,
# each prefixed with "PREFIX,", appended to $out/all.csv.
bench_csv() {
  local prefix=$1 port=$2
  shift 2
  redis-benchmark -p "$port" -t set,get -d 16 -r 100000 "$@" --csv 2>/dev/null |
    tail -n +2 | sed "s/^/$prefix,/" >>"$out/all.csv"
}
