#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The API reference's check: Doxygen reads include/weft/ with the build's
# Doxyfile (docs/api/Doxyfile.in) and WARN_AS_ERROR, so an undocumented
# public declaration, struct field or macro, or a comment Doxygen cannot
# read, fails with "header:line: what". Writes into a temporary directory.
# Usage: tests/check_api_docs.sh DOXYGEN BUILD_DIR/docs/api/Doxyfile
set -uo pipefail
doxygen=$1 doxyfile=$2
if [ -z "$doxygen" ] || ! command -v "$doxygen" >/dev/null; then
  echo "SKIPPED check_api_docs: doxygen is not installed (scripts/deps.sh)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log=$( (cat "$doxyfile"
        echo "OUTPUT_DIRECTORY = $out"
        echo "WARN_AS_ERROR = FAIL_ON_WARNINGS") | "$doxygen" - 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$log" ]; then
  echo "$log"
  echo "FAIL: Doxygen found undocumented or unreadable declarations (exit $rc)"
  exit 1
fi
[ -s "$out/html/index.html" ] || { echo "FAIL: no html/index.html"; exit 1; }
echo "ok: every public declaration of include/weft/ is documented"
