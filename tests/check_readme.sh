#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every ```sh block of README.md and samples/*/README.md as written,
# so that a README line that fails when copied is a red test.
#
# Usage: tests/check_readme.sh SOURCE-DIR BUILD-DIR
#
# Each README is one session, as a reader follows it: its blocks run in
# order, each with `bash -e -o pipefail`, in one scratch directory that
# mirrors the source tree (tests/, scripts/, samples/ ... are links to it,
# build/release is BUILD-DIR) with HOME inside it, and with the programs of
# BUILD-DIR installed to a scratch prefix first on PATH (the samples'
# READMEs name them bare, as an installed user runs them). Everything a
# README started (servers sent to the background) is killed when its last
# block has run. Markers, on the line just before a block's opening fence:
#   <!-- readme-test: skip REASON -->  the block is reported skipped, with
#                                      REASON (e.g. it needs a second host)
#   <!-- readme-test: file NAME -->    the block (any language) is saved as
#                                      NAME in the scratch directory, as
#                                      the reader saves it, and not run
# Prints one line per block and "N passed, N failed, N skipped" last;
# skips also go to $WEFT_TEST_SKIP_LOG (scripts/test.sh's summary).
set -uo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
cleanup() {
  [ -z "${group:-}" ] || kill -- -"$group" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null || {
  echo "cmake --install $build failed"
  exit 1
}

passed=0 failed=0 skipped=0

# extract README OUTDIR: writes OUTDIR/NNN.{sh,skip,file} per block, in order.
extract() {
  awk -v out="$2" '
    function flush() { close(path) }
    /^<!-- readme-test: / {
      marker = $0
      sub(/^<!-- readme-test: /, "", marker); sub(/ *-->$/, "", marker)
      next
    }
    !inblock && /^```/ {
      lang = substr($0, 4); n++; start = NR + 1
      if (marker ~ /^skip /) {
        path = sprintf("%s/%03d.skip", out, n)
        printf "%d %s\n", start, substr(marker, 6) > path
      } else if (marker ~ /^file /) {
        path = sprintf("%s/%03d.file", out, n)
        printf "%s\n", substr(marker, 6) > path; flush()
        path = sprintf("%s/%03d.body", out, n)
      } else if (lang == "sh") {
        path = sprintf("%s/%03d.sh", out, n)
        printf "# line %d\n", start > path
      } else {
        path = ""
      }
      marker = ""; inblock = 1; next
    }
    inblock && /^```/ { if (path != "") flush(); inblock = 0; next }
    inblock && path != "" && path !~ /\.skip$/ { print > path }
    { marker = "" }
  ' "$1"
}

# run_readme README: its blocks in one session (see the file comment).
run_readme() {
  local readme=$1 rel blocks dir f line
  rel=${readme#"$src"/}
  blocks="$work/blocks/$rel"
  dir="$work/session"
  rm -rf "$dir" "$blocks"
  mkdir -p "$blocks" "$dir/home"
  for f in "$src"/*; do
    [ "$(basename "$f")" = build ] || ln -s "$f" "$dir/$(basename "$f")"
  done
  mkdir -p "$dir/build"
  ln -s "$build" "$dir/build/release"
  extract "$readme" "$blocks"
  # One process group for the whole README: its background servers die
  # with it at the end.
  (
    cd "$dir" || exit 1
    export HOME="$dir/home" PATH="$prefix/bin:$PATH"
    for f in "$blocks"/*; do
      case $f in
      *.file)
        cp "${f%.file}.body" "$dir/$(cat "$f")"
        ;;
      *.skip)
        read -r line reason <"$f"
        echo "SKIPPED $rel:$line: $reason"
        [ -z "${WEFT_TEST_SKIP_LOG:-}" ] ||
          echo "SKIPPED readme block $rel:$line: $reason" >>"$WEFT_TEST_SKIP_LOG"
        ;;
      *.sh)
        line=$(head -n1 "$f" | cut -d' ' -f3)
        if timeout --foreground 300 bash -e -o pipefail "$f" >"$f.log" 2>&1; then
          echo "PASSED $rel:$line"
        else
          echo "FAILED $rel:$line (exit $?), its output:"
          sed 's/^/  | /' "$f.log" | tail -n 40
        fi
        ;;
      esac
    done
  ) >"$work/result" 2>&1 &
  group=$!
  wait "$group"
  kill -- -"$group" 2>/dev/null
  group=""
  cat "$work/result"
  passed=$((passed + $(grep -c '^PASSED' "$work/result")))
  failed=$((failed + $(grep -c '^FAILED' "$work/result")))
  skipped=$((skipped + $(grep -c '^SKIPPED' "$work/result")))
}

set -m # each background job its own process group
for readme in "$src/README.md" "$src"/samples/*/README.md; do
  [ -f "$readme" ] && run_readme "$readme"
done
echo "readme blocks: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
