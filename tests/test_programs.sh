#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every weft program answers --help the same way (exit 0: usage, every key
# it reads with its default, examples), answers --version and -V with
# "<prog> (weft) VERSION" (exit 0), and reports a bad -o key in the same
# form. Arguments: VERSION_H PROGRAM_PATH[,EXTRA_ARGS] ..., VERSION_H being
# the generated weft/version.h (the version expected), EXTRA_ARGS
# (separated by ':') what the program needs besides options (a mode, a
# command).
set -uo pipefail
version=$(sed -n 's/^#define WEFT_VERSION_STRING "\(.*\)"$/\1/p' "$1")
shift
[ -n "$version" ] || { echo "FAIL: no WEFT_VERSION_STRING in the header"; exit 1; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for spec in "$@"; do
  path=${spec%%,*}
  extra=()
  [ "$spec" = "$path" ] || IFS=: read -r -a extra <<<"${spec#*,}"
  prog=$(basename "$path")

  out=$("$path" --help 2>&1); rc=$?
  [ $rc -eq 0 ] || bad "$prog --help exited $rc"
  grep -q "^usage: $prog " <<<"$out" || bad "$prog --help: no usage line"
  grep -q '^busy_poll_us = 20$' <<<"$out" &&
    grep -q '^pool_retain_bytes = 4194304$' <<<"$out" ||
    bad "$prog --help: the [loop] keys with their defaults are missing"
  [ "$(sed -n '/^Examples:/,$p' <<<"$out" | grep -c "^  $prog")" -ge 2 ] ||
    bad "$prog --help: fewer than two examples"
  grep -q '^  -V, --version ' <<<"$out" || bad "$prog --help: no --version"

  for flag in --version -V; do
    out=$("$path" $flag 2>&1); rc=$?
    [ $rc -eq 0 ] || bad "$prog $flag exited $rc"
    [ "${out%%$'\n'*}" = "$prog (weft) $version" ] ||
      bad "$prog $flag said '${out%%$'\n'*}', expected '$prog (weft) $version'"
  done

  # A section with a dot: the key is what follows the last dot.
  err=$("$path" -o a.b.c=v "${extra[@]}" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || bad "$prog -o a.b.c=v exited $rc, expected 2"
  want="$prog: -o a.b.c=v: unknown section [a.b]; valid sections: loop, transport, server, client"
  [ "${err:0:${#want}}" = "$want" ] ||
    bad "$prog -o a.b.c=v said: ${err%%$'\n'*}"

  err=$("$path" -o loop.loops=many "${extra[@]}" 2>&1 >/dev/null); rc=$?
  want="$prog: -o loop.loops=many: [loop] loops = \"many\": expected an integer from 0 to 1024"
  [ $rc -eq 2 ] && [ "${err:0:${#want}}" = "$want" ] ||
    bad "$prog -o loop.loops=many (exit $rc) said: ${err%%$'\n'*}"
  [ $fail -eq 0 ] && echo "ok: $prog"
done
exit $fail
