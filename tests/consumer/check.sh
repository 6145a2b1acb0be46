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
