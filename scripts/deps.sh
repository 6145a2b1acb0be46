#!/usr/bin/env bash
# Installs the Debian packages weft needs to build and test, if any is missing.
# Safe to run again: it asks apt only when something is not installed yet.
set -euo pipefail

PKGS=(build-essential cmake pkg-config check libsubunit-dev libinih-dev
      liburing-dev clang libucx-dev ucx-utils clang-format
      librdmacm-dev libibverbs-dev redis-tools
      # the Soft-RoCE VM that runs the verbs tests (scripts/test-verbs-vm.sh)
      qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core zstd
      ibverbs-utils ibverbs-providers)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "weft: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
