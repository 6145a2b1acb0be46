#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every tracked source file names its license on its first line, or on its
# second after a #! line: "/* SPDX-License-Identifier: Apache-2.0 */" in C
# (.c, .h, .h.in, the linker script .map), "# SPDX-License-Identifier:
# Apache-2.0" in scripts (.sh, .py, any file starting with #!), CMake
# (CMakeLists.txt, .cmake, .cmake.in), .supp, .pc.in, Doxyfile.in, .tcl
# and .lua. Other files (docs, data, the fuzz corpora) are not checked.
#
# Usage: tests/check_spdx.sh [--fix] [SOURCE_DIR]   (default: the repository)
# Exit 0 when every file has the line; 1 with one line per file without it.
# --fix adds the line where it is missing (what first added them all).
set -uo pipefail
fix=0
[ "${1:-}" = --fix ] && { fix=1; shift; }
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
git rev-parse --git-dir >/dev/null 2>&1 || {
  echo "SKIPPED check_spdx: $ROOT is not a git checkout (the files checked are git's)"
  exit 77
}
ID="SPDX-License-Identifier: Apache-2.0"
SHEBANG='#!'

# The comment a file's license line is written in, from its name and its
# first line: c, hash, or nothing when the file is not a source file.
style_of() { # NAME FIRST-LINE
  case $1 in
    *.c | *.h | *.h.in | *.map) echo c ;;
    *.sh | *.py | *.cmake | CMakeLists.txt | */CMakeLists.txt | *.cmake.in | \
      *.pc.in | *.supp | Doxyfile.in | */Doxyfile.in | *.tcl | *.lua) echo hash ;;
    *) [ "${2:0:2}" = "$SHEBANG" ] && echo hash ;;
  esac
}

# In a function, and called on the script's last line with the exit: bash
# reads a line whole before running it, and --fix may edit this very file.
# The first two lines are read with `read`, so a check starts no process
# per file.
check_all() {
  local fail=0 f style want first second line tmp
  while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue # deleted in the work tree
    first="" second=""
    { IFS= read -r first; IFS= read -r second; } <"$f" 2>/dev/null
    style=$(style_of "$f" "$first")
    [ -n "$style" ] || continue
    if [ "$style" = c ]; then want="/* $ID */"; else want="# $ID"; fi
    line=1
    [ "${first:0:2}" = "$SHEBANG" ] && line=2
    if [ $line -eq 1 ]; then [ "$first" = "$want" ] && continue
    else [ "$second" = "$want" ] && continue; fi
    if [ $fix -eq 1 ]; then
      tmp=$(mktemp)
      { [ $line -eq 2 ] && head -n 1 "$f"; echo "$want"; tail -n "+$line" "$f"; } >"$tmp"
      cat "$tmp" >"$f" # keeps the file's mode
      rm -f "$tmp"
      echo "added: $f"
    else
      echo "$f:$line: not '$want' (the license line: line 1, or 2 after $SHEBANG)"
      fail=1
    fi
  done < <(git ls-files -z)
  return $fail
}
check_all; exit $?
