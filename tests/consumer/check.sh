#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build in $1 into a temporary prefix, checks the API
# reference and the man pages it put there, then builds and runs
# consumer.c against it with pkg-config and with CMake's find_package.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null

# The license, the API reference and the man pages came with it: `man` finds each
# installed program's page on the prefix's MANPATH, made by help2man from
# the program's own --help and --version.
version=$(sed -n 's/^#define WEFT_VERSION_STRING "\(.*\)"$/\1/p' \
  "$prefix/include/weft/version.h")
grep -q weft_version "$prefix/share/doc/weft/html/version_8h.html" ||
  { echo "no API reference in $prefix/share/doc/weft/html"; exit 1; }
cmp -s "$here/../../LICENSE" "$prefix/share/doc/weft/LICENSE" ||
  { echo "no LICENSE in $prefix/share/doc/weft"; exit 1; }
for prog in weft-echo weft-kv-server weft-kv weft-kvbench weft-bench; do
  page=$(MANPATH="$prefix/share/man" MANWIDTH=80 man -P cat "$prog" 2>&1) ||
    { echo "man $prog: $page"; exit 1; }
  grep -q "^NAME" <<<"$page" && grep -q -- "--version" <<<"$page" &&
    grep -q "^weft $version " <<<"$page" ||
    { echo "man $prog: no NAME, --version or 'weft $version' in:"; echo "$page"; exit 1; }
done
echo "installed: the API reference and the man pages of weft $version"

# The programs come with the install when the samples are built:
# weft-bench as the KV service's.
if [ -x "$prefix/bin/weft-kv-server" ]; then
  for p in weft-kv weft-kvbench weft-echo weft-bench; do
    [ -x "$prefix/bin/$p" ] || { echo "cmake --install put no $p in bin/"; exit 1; }
  done
  # The KV's, the benchmarks' and the HTTP sample's programs link
  # libweft.so: they find it from wherever the prefix is (their RUNPATH,
  # samples/weft_sample.cmake).
  http=()
  if [ -x "$prefix/bin/weft-http" ]; then
    http=(weft-http weft-http-load)
  fi
  for p in weft-kv-server weft-kv weft-kvbench weft-bench "${http[@]}"; do
    out=$(env -u LD_LIBRARY_PATH "$prefix/bin/$p" --version 2>&1) ||
      { echo "$prefix/bin/$p does not run: $out"; exit 1; }
  done
fi

# The paths the README gives: an install with --prefix puts the library
# and weft.pc under lib/ (GNUInstallDirs uses lib/<multiarch> only for /usr).
pcdir="$prefix/lib/pkgconfig"
[ -f "$pcdir/weft.pc" ] || { echo "no weft.pc in $pcdir"; exit 1; }
export PKG_CONFIG_PATH="$pcdir"
export LD_LIBRARY_PATH="$prefix/lib"

# A user of the shared library needs none of weft's private packages:
# pkg-config sees weft.pc alone, CMake finds neither OpenSSL nor pkg-config.
flags=$(PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_PATH= pkg-config --cflags --libs weft)
case "$flags" in
*-I/usr*) echo "weft.pc leaks a dependency's include path: $flags"; exit 1 ;;
esac
cc -o "$prefix/pc_consumer" "$here/consumer.c" $flags
"$prefix/pc_consumer"

# Every installed header compiles alone in strict ISO C17 (no feature
# macro, no _GNU_SOURCE, as a user's -std=c17 build has): a header that
# needs a POSIX type includes the POSIX header that defines it (weft/cli.h's
# sigset_t failed here under <signal.h> alone).
for h in "$prefix"/include/weft/*.h; do
  printf '#include <weft/%s>\nint weft_strict_c17;\n' "${h##*/}" |
    cc -std=c17 -Werror -Wall -Wextra -I"$prefix/include" -fsyntax-only -x c - ||
    { echo "<weft/${h##*/}> does not compile alone under -std=c17"; exit 1; }
done
echo "installed headers: each compiles alone under -std=c17"
PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= cmake -S "$here" \
  -B "$prefix/cm_shared" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON >/dev/null
cmake --build "$prefix/cm_shared" >/dev/null
"$prefix/cm_shared/consumer"

# The static library, with its dependencies: pkg-config --static, and
# CMake's weft::weft_static (find_package(weft COMPONENTS static)).
libs=$(pkg-config --static --libs weft | sed 's/-lweft\b//')
cc -o "$prefix/pc_consumer_static" "$here/consumer.c" \
  $(pkg-config --cflags weft) "$prefix/lib/libweft.a" $libs
"$prefix/pc_consumer_static"
cmake -S "$here" -B "$prefix/cm" -DCMAKE_PREFIX_PATH="$prefix" \
  -DWEFT_CONSUMER_STATIC=ON >/dev/null
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

# The samples that are projects of their own (samples/weft_sample.cmake),
# each built alone against the installed weft only, through
# find_package(weft) and libweft.so; then their public-API check
# (samples/check_public_api.sh) on the libraries and programs they built.
samples=$(cd "$here/../../samples" && pwd)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
# samples/http too where this weft has the HTTP codec (WEFT_WITH_HTTP: it
# installed weft-http).
alone=(kv bench)
if [ -x "$prefix/bin/weft-http" ]; then
  alone+=(http)
fi
for s in "${alone[@]}"; do
  cmake -S "$samples/$s" -B "$prefix/$s" -DCMAKE_PREFIX_PATH="$prefix" \
    -DWEFT_SAMPLE_BUILD_TESTS=OFF -DWEFT_SAMPLE_WERROR=ON "${launcher[@]}" >/dev/null
  cmake --build "$prefix/$s" -j"$(nproc)" >/dev/null
  mapfile -t built < <(find "$prefix/$s" -maxdepth 1 -type f \( -name '*.a' -o -executable \))
  "$samples/check_public_api.sh" "$samples/$s" "$here/../.." "${built[@]}"
  echo "samples/$s: built alone against the installed weft"
done
