#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then builds and runs
# consumer.c against it with pkg-config and with CMake's find_package.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/$(gcc -print-multiarch)/pkgconfig"
export LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/$(gcc -print-multiarch)"
cc -o "$prefix/pc_consumer" "$here/consumer.c" $(pkg-config --cflags --libs weft)
"$prefix/pc_consumer"
cmake -S "$here" -B "$prefix/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cm" >/dev/null
"$prefix/cm/consumer"
"$prefix/cm/consumer_static"

# The README's "Writing a server" snippet, as a reader copies it: built
# with pkg-config, it echoes a line, and SIGTERM ends it with status 0.
awk '/^## Writing a server/ {on = 1} on && /^```c$/ {code = 1; next}
     code && /^```$/ {exit} code {print}' "$here/../../README.md" \
  >"$prefix/readme_server.c"
grep -q sigwait "$prefix/readme_server.c"
cc -o "$prefix/readme_server" "$prefix/readme_server.c" \
  $(pkg-config --cflags --libs weft)
"$prefix/readme_server" &
server=$!
reply=""
for _ in $(seq 50); do # until it listens
  (exec 3<>/dev/tcp/127.0.0.1/7000) 2>/dev/null && break
  sleep 0.1
done
exec 3<>/dev/tcp/127.0.0.1/7000
echo "hello weft" >&3
read -r -t 5 reply <&3 || true
exec 3<&-
kill -TERM "$server"
wait "$server"
[ "$reply" = "hello weft" ] || { echo "README server echoed '$reply'"; exit 1; }
echo "README snippet: built, echoed, stopped by SIGTERM with status 0"
