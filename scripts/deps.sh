#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages weft needs to build, test and benchmark, if
# any is missing: every program a script or test calls comes from one of
# them (tests/check_deps.sh checks that). Safe to run again: it asks apt
# only when something is not installed yet.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

PKGS=(build-essential cmake pkg-config check libsubunit-dev libinih-dev
      liburing-dev clang libucx-dev ucx-utils clang-format git python3
      librdmacm-dev libibverbs-dev redis-tools openssh-client
      # weft-kv's interactive mode (line editing, history), and the tmux
      # that samples/kv/tests/test_kv_cli.sh types into it with
      libedit-dev tmux
      # redis-py for samples/kv/tests/test_kv_redis_py.sh and test_kv_redis_compat.sh
      python3-redis
      # Redis' tcl suite (samples/kv/tests/test_kv_redis_tcl.sh): tclsh runs it,
      # dpkg-source unpacks what apt-get source fetches
      tcl dpkg-dev
      # TLS (handlers/tls_*.c) and its tests' certificates and peers
      libssl-dev openssl
      # the benchmarks' peers and charts (scripts/bench*.sh)
      redis-server gnuplot-nox
      # socket writes counted by scripts/bench-tls.sh
      strace
      # system calls and CPU time counted by samples/kv/scripts/bench-kv-counts.sh
      linux-perf
      # the API reference (docs/api/), the man pages (cmake/help2man.sh)
      # and the install check's `man` (tests/consumer/check.sh)
      doxygen help2man man-db
      # the busy machine of scripts/test-under-load.sh
      stress-ng
      # the Soft-RoCE VM that runs the verbs tests (scripts/test-verbs-vm.sh)
      qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core zstd
      ibverbs-utils ibverbs-providers
      # HTTP/1.1: llhttp's C sources (codec/CMakeLists.txt builds them in),
      # the peers of samples/http/tests/test_http_server.sh and the servers
      # and load generator of samples/http/scripts/bench-http.sh
      node-llhttp curl apache2-utils nginx-light h2o wrk)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
quiet_run "updating the package lists" $SUDO apt-get update
quiet_run "installing ${#missing[@]} packages: ${missing[*]}" \
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
