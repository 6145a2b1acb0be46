#!/usr/bin/env bash
# Every weft program answers --help the same way (exit 0: usage, every key
# it reads with its default, examples) and reports a bad -o key in the same
# form. Arguments: PROGRAM_PATH[,EXTRA_ARGS] ..., EXTRA_ARGS (separated by
# ':') being what the program needs besides options (a mode, a command).
set -uo pipefail
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
