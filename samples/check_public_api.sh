#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A sample that is a project of its own (samples/kv, samples/bench,
# samples/http) is a user of weft: it may use what weft installs and
# nothing else.
#  - includes: every #include of its sources (SAMPLE_DIR, its tests and
#    scripts, and the test harness it borrows, tests/harness.[ch]) is a
#    system header, a header weft installs (<weft/NAME.h>, include/weft/),
#    or one of the sample's own (a file inside SAMPLE_DIR, found beside the
#    including file or at SAMPLE_DIR's top); never a weft folder's private
#    header ("loop/x.h", <channel/x.h>, "../../loop/x.h");
#  - symbols: no object, library or program of it names a weft__ symbol
#    (weft's internals, which libweft.so does not export: a program that
#    links libweft.a instead would carry them), and every weft_* function
#    or variable it uses is declared in an installed header (not one
#    exported by accident and declared by hand).
# Its CMake project links libweft.so (samples/weft_sample.cmake), so a call
# of an internal already fails the link; this check says why, and catches
# the static link and the includes the compiler would accept.
#
# Usage: check_public_api.sh SAMPLE_DIR WEFT_DIR [BINARY...]
# Exit 0 when clean; 1 with one line per violation, "file:line: why".
set -uo pipefail
sample=$(cd "${1:?usage: $0 SAMPLE_DIR WEFT_DIR [BINARY...]}" && pwd)
weft=$(cd "${2:?usage: $0 SAMPLE_DIR WEFT_DIR [BINARY...]}" && pwd)
shift 2
fail=0

sources=$(find "$sample" \( -name CMakeFiles -o -name 'build*' \) -prune -o \
  -name '*.[ch]' -type f -print | LC_ALL=C sort)
[ -n "$sources" ] || { echo "check_public_api: no sources in $sample" >&2; exit 2; }
harness="$weft/tests/harness.c $weft/tests/harness.h"

for f in $sources $harness; do
  dir=$(dirname "$f")
  while IFS=: read -r line inc; do
    inc=${inc#*include}
    inc=${inc#"${inc%%[<\"]*}"} # from the opening < or "
    case $inc in
    '<weft/'*)
      name=${inc#<}; name=${name%%>*}
      [ -f "$weft/include/$name" ] || [ -f "$weft/include/$name.in" ] ||
        { echo "$f:$line: includes <$name>, which weft does not install"; fail=1; }
      ;;
    '<'*)
      name=${inc#<}; name=${name%%>*}
      [ ! -f "$weft/$name" ] ||
        { echo "$f:$line: includes <$name>, a private header of weft"; fail=1; }
      ;;
    '"'*)
      name=${inc#\"}; name=${name%%\"*}
      case " $harness " in *" $f "*) mine=$weft/tests ;; *) mine=$sample ;; esac
      found=
      for d in "$dir" "$sample"; do
        [ -f "$d/$name" ] && { found=$(realpath "$d/$name"); break; }
      done
      [ -z "$found" ] && [ "$name" = harness.h ] && [ "$mine" = "$sample" ] &&
        found=$weft/tests/harness.h
      case $found in
      "$mine"/* | "$weft/tests/harness.h") ;;
      '') echo "$f:$line: includes \"$name\", found neither beside it nor in $sample"
          fail=1 ;;
      *) echo "$f:$line: includes \"$name\" ($found), outside $sample: weft's private header"
         fail=1 ;;
      esac
      ;;
    esac
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f")
done

# The names the installed headers declare (any weft_ word in them).
declared=$(mktemp)
trap 'rm -f "$declared"' EXIT
grep -ohw 'weft_[a-z0-9_]*' "$weft"/include/weft/*.h "$weft"/include/weft/*.h.in |
  LC_ALL=C sort -u >"$declared"
for b in "$@"; do
  [ -f "$b" ] || { echo "$b: missing (build it first)"; fail=1; continue; }
  hits=$(nm -A "$b" 2>/dev/null | grep -E '[[:space:]]weft__' | head -5)
  if [ -n "$hits" ]; then
    echo "$b: names weft's internal symbols (weft__*), e.g.:"
    echo "$hits"
    fail=1
  fi
  for sym in $(nm -u "$b" 2>/dev/null | awk '$2 ~ /^weft_[a-z0-9]/ {print $2}' |
    sed 's/@.*//' | LC_ALL=C sort -u | LC_ALL=C comm -23 - "$declared"); do
    echo "$b: uses $sym, which no header of include/weft declares"
    fail=1
  done
done

[ $fail -eq 0 ] && echo "check_public_api: ${sample#"$weft"/} includes only weft's installed headers and names no weft__ symbol ($# binaries)"
exit $fail
