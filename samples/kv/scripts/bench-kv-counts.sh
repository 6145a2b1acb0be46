#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The work weft-kv-server and redis-server do per request, counted rather
# than timed (counts hardly move with the machine's load, so this is valid
# on a shared machine): system calls by name, heap calls (malloc, calloc,
# realloc, free), CPU time, context switches, and instructions and cache
# misses where the machine has hardware counters.
#
# Usage: samples/kv/scripts/bench-kv-counts.sh [RUNS] [LABEL=BINARY[,OPTION...] ...]
#   default RUNS 3 and one weft server:
#   weft=build/release/samples/kv/weft-kv-server,-o,loop.loops=1
#   (the Release tree is built if that binary is missing). Each weft server
#   also gets -o kv.rpc_listen= and, unless its options set it,
#   -o kv.resp_listen=127.0.0.1:PORT; the word PORT in its options is
#   replaced by its port (e.g. -o,kv.resp_listen=uring://127.0.0.1:PORT).
#   Then redis-server (--save "" --appendonly no) is added.
# Each run does, for each redis-benchmark setting (CONFIGS, default
# "-P 1 -c 50;-P 16 -c 50"), each server in turn (interleaved):
#   redis-benchmark -p PORT -t set,get -d 16 -r 100000 -n N $setting
# (N=200000 unless set) twice:
#   1. under `perf stat -e 'syscalls:sys_enter_*' -p PID`: system calls by
#      name. Tracepoint counters in the kernel: no stop per call (strace
#      stops the server at every call and would double its CPU time), only
#      the syscall slow path while perf is attached;
#   2. under `perf stat -e task-clock,context-switches,...,instructions,
#      cycles,cache-misses -p PID` without the tracepoints: CPU time and
#      the hardware counters ("not supported" in a VM without a PMU).
# Heap calls are counted over pass 2 by samples/kv/scripts/alloc_count.c, an
# LD_PRELOAD shim built here and loaded into every server (weft: glibc
# malloc; Debian's redis-server: jemalloc through the same symbols).
# Per request = count over the pass / (2 N) (a SET and a GET test of N
# requests each), connection setup of the 50 clients included. Prints the
# load average, then one markdown table of medians over the runs.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
. samples/kv/scripts/kv_lib.sh
runs=${1:-3}
[ $# -gt 0 ] && shift
n=${N:-200000}
if [ -n "${CONFIGS:-}" ]; then
  IFS=';' read -r -a configs <<<"$CONFIGS"
else
  configs=("-P 1 -c 50" "-P 16 -c 50")
fi
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  if [ ! -x build/release/samples/kv/weft-kv-server ]; then
    cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build/release -j2 --target weft-kv-server >/dev/null
  fi
  specs=("weft=build/release/samples/kv/weft-kv-server,-o,loop.loops=1")
fi
for p in redis-server redis-benchmark perf cc; do
  command -v "$p" >/dev/null || scripts/deps.sh
done
PY=/usr/bin/python3
scratch_with_children

cc -O2 -shared -fPIC -o "$out/alloc_count.so" samples/kv/scripts/alloc_count.c -ldl

KV_PRELOAD="$out/alloc_count.so" kv_servers_start "$out" 6450 "${specs[@]}"

heap() { od -An -t u8 -w72 "$1" | tr -s ' ' ',' | sed 's/^,//'; }
ticks() { awk '{ sub(/^.*\) /, ""); print $12 "," $13 }' "/proc/$1/stat"; }

# Runs the workload against server $1 under `perf stat -e $3 -p PID`,
# perf's CSV output in $2.
under_perf() {
  local si=$1 file=$2 events=$3
  perf stat -x, -o "$file" -e "$events" -p "${spids[$si]}" &
  local perf_pid=$!
  sleep 1 # perf attaches its counters before the workload starts
  # shellcheck disable=SC2086
  redis-benchmark -p "${ports[$si]}" -t set,get -d 16 -r 100000 -n "$n" \
    ${configs[$ci]} -q >/dev/null 2>&1
  kill -INT "$perf_pid"
  wait "$perf_pid" 2>/dev/null || true
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
hw=task-clock,context-switches,cpu-migrations,page-faults
hw=$hw,instructions,cycles,cache-misses,cache-references
for run in $(seq "$runs"); do
  for ci in "${!configs[@]}"; do
    for si in "${!labels[@]}"; do
      tag="${labels[$si]}.$ci.$run"
      under_perf "$si" "$out/$tag.sys" 'syscalls:sys_enter_*'
      heap "$out/${labels[$si]}.heap" >"$out/$tag.heap0"
      ticks "${spids[$si]}" >"$out/$tag.ticks0"
      under_perf "$si" "$out/$tag.cpu" "$hw"
      heap "$out/${labels[$si]}.heap" >"$out/$tag.heap1"
      ticks "${spids[$si]}" >"$out/$tag.ticks1"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$out" "$n" "$runs" "$(getconf CLK_TCK)" "${labels[*]}" "${configs[@]}" <<'PY'
import statistics, sys
out, n, runs, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
labels, configs = sys.argv[5].split(), sys.argv[6:]
reqs = 2 * n

def perf_csv(path):
    """event -> count (None where not supported/counted)."""
    ev = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) < 3 or line.startswith("#"):
            continue
        try:
            ev[f[2]] = float(f[0])
        except ValueError:
            ev[f[2]] = None
    return ev

def ints(path):
    return [int(x) for x in open(path).read().strip().split(",") if x]

rows = {}  # (label, ci) -> {metric: [per-request values over runs]}
for li in labels:
    for ci in range(len(configs)):
        m = {}
        for run in range(1, runs + 1):
            tag = f"{out}/{li}.{ci}.{run}"
            sys_ev = perf_csv(tag + ".sys")
            tot = 0.0
            for k, v in sys_ev.items():
                if v is None:
                    continue
                tot += v
                name = k.replace("syscalls:sys_enter_", "")
                m.setdefault("sys " + name, []).append(v / reqs)
            m.setdefault("syscalls, all", []).append(tot / reqs)
            cpu = perf_csv(tag + ".cpu")
            for k in ("task-clock", "context-switches", "cpu-migrations",
                      "page-faults", "instructions", "cycles", "cache-misses",
                      "cache-references"):
                v = cpu.get(k)
                if v is None:
                    m.setdefault(k, []).append(None)
                elif k == "task-clock":  # msec -> µs per request
                    m.setdefault(k, []).append(v * 1000 / reqs)
                else:
                    m.setdefault(k, []).append(v / reqs)
            h0, h1 = ints(tag + ".heap0"), ints(tag + ".heap1")
            d = [b - a for a, b in zip(h0, h1)]
            m.setdefault("heap: malloc", []).append(d[0] / reqs)
            m.setdefault("heap: calloc", []).append(d[1] / reqs)
            m.setdefault("heap: realloc", []).append(d[2] / reqs)
            m.setdefault("heap: free", []).append(d[3] / reqs)
            m.setdefault("heap: aligned", []).append(d[4] / reqs)
            m.setdefault("heap: all calls (no free(NULL))", []).append(
                sum(d[:5]) / reqs)
            m.setdefault("heap: bytes asked", []).append(d[5] / reqs)
            t0, t1 = ints(tag + ".ticks0"), ints(tag + ".ticks1")
            m.setdefault("CPU user, µs (/proc utime)", []).append(
                (t1[0] - t0[0]) * 1e6 / hz / reqs)
            m.setdefault("CPU system, µs (/proc stime)", []).append(
                (t1[1] - t0[1]) * 1e6 / hz / reqs)
        rows[(li, ci)] = m

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

metrics = []
for m in rows.values():
    for k in m:
        if k not in metrics:
            metrics.append(k)
def order(k):
    if k.startswith("sys "):
        return (1, k)
    if k == "syscalls, all":
        return (2, k)
    if k.startswith("heap"):
        return (3, k)
    return (4, k)
metrics.sort(key=order)
names = {"task-clock": "CPU time, µs (task-clock)"}
print(f"Per request, medians of {runs} runs, N={n} per test (SET and GET).\n")
hdr = "| per request |" + "".join(f" {li} {c} |" for c in configs for li in labels)
print(hdr)
print("|---|" + "---:|" * (len(configs) * len(labels)))
for k in metrics:
    vals = [med(rows[(li, ci)].get(k, [0])) for ci in range(len(configs))
            for li in labels]
    if k.startswith("sys ") and all(v is not None and v < 0.005 for v in vals):
        continue  # below 1 call per 200 requests everywhere
    cells = ["n/a (no PMU)" if v is None else f"{v:.2f}" if v < 100 else f"{v:,.0f}"
             for v in vals]
    print(f"| {names.get(k, k)} |" + "".join(f" {c} |" for c in cells))
PY
