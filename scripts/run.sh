#!/usr/bin/env bash
# The main job: builds weft and runs the echo demo end to end: an echo server
# and a ping-pong client in one process over loopback, with the hybrid
# selector (busy_poll_us=20) and with pure blocking (busy_poll_us=0).
# Extra arguments go to weft-echo, e.g. -o transport.name=tcp -o echo.size=1024
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
for us in 20 0; do
  build/release/samples/echo/weft-echo demo -o loop.loops=2 \
    -o loop.busy_poll_us=$us -o echo.count=20000 "$@"
done
