#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a script calls a program that no package of scripts/deps.sh
# provides (those packages and what they depend on, or Debian's essential
# and required packages, which every Debian system has): the check that
# would have caught ibverbs-utils missing from a fresh machine.
#
# It reads every shell script of the repository (scripts/, tests/, and
# the samples' own, samples/*/scripts and samples/*/tests), takes
# the first word of each command (after assignments, and after sudo, env,
# exec, timeout, xargs) and every absolute path under /bin, /sbin, /usr/bin
# or /usr/sbin, and asks dpkg which package owns each program found.
#
# Usage: tests/check_deps.sh [SOURCE_DIR]
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
command -v dpkg-query >/dev/null || {
  echo "check_deps: SKIP: not a Debian system (no dpkg-query)"
  exit 77
}

# The packages deps.sh names, and everything they depend on.
mapfile -t listed < <(sed 's/#.*//' scripts/deps.sh | sed -n '/^PKGS=(/,/)/p' |
  sed 's/PKGS=(//; s/)//' | tr ' ' '\n' | grep -v '^$')
[ ${#listed[@]} -gt 0 ] || { echo "check_deps: no PKGS in scripts/deps.sh"; exit 2; }
allowed=$(mktemp)
trap 'rm -f "$allowed"' EXIT
{
  printf '%s\n' "${listed[@]}"
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${listed[@]}" 2>/dev/null |
    sed -n 's/^ *\(Pre\)\{0,1\}Depends: \([^ <>]*\).*/\2/p'
  dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' |
    awk '$2 == "yes" || $3 == "required" {print $1}'
} | sed 's/:.*//' | sort -u >"$allowed"

# Words that are not programs: shell keywords, builtins, and the functions
# the scripts define themselves.
builtins="if then else elif fi for while until do done case esac in function
return exit set unset export local read echo printf cd pwd test [ [[ ] ]]
true false shift wait trap eval exec source . break continue kill command
type declare mapfile readarray let alias umask ulimit getopts printf time
select shopt hash builtin caller disown jobs fg bg suspend times pushd popd"
scripts=$(find scripts tests samples -name '*.sh' -type f | LC_ALL=C sort)
functions=$(grep -ho '^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*()' $scripts |
  tr -d ' ()' | sort -u)

# The code of a script with quoted text blanked: single-quoted text (data,
# or programs of awk and sed) goes, double-quoted text keeps only its
# command substitutions, here-documents go. Line breaks stay.
code_of() {
  awk '
    function flush(cont) { if (cont) printf "%s ", out; else print out; out = "" }
    BEGIN { q = "" }
    inheredoc { if ($0 ~ "^[ \t]*" tag "$") inheredoc = 0; print ""; next }
    {
      line = $0; n = length(line); cont = 0
      if (q == "" && match(line, /<<-?[ \t]*["\047]?[A-Za-z_]+/)) {
        tag = substr(line, RSTART, RLENGTH); gsub(/[<\-"\047 \t]/, "", tag)
        pending = 1
      } else pending = 0
      for (i = 1; i <= n; i++) {
        c = substr(line, i, 1); c2 = substr(line, i, 2)
        if (arith > 0) {                 # $(( ... )) and (( ... )): numbers
          if (c == "(") arith++; else if (c == ")") arith--
          if (arith == 0) out = out " 0 "
          continue
        }
        if (q == "\047") { if (c == "\047") q = ""; continue }
        if (q == "\"") {
          if (c == "\\") { i++; continue }
          if (c == "\"" && depth == 0) { q = ""; out = out "_Q_"; continue }
          if (c2 == "$(" && substr(line, i + 2, 1) != "(") {
            depth++; out = out "$("; i++; continue
          }
          if (depth > 0) {
            if (c == "(") depth++; else if (c == ")") depth--
            out = out c
          }
          continue
        }
        if (c == "\\" && i == n) { cont = 1; break }
        if (c == "\\") { i++; continue }
        if (c == "#" && (i == 1 || substr(line, i - 1, 1) ~ /[ \t;]/)) break
        if (c2 == "((" || substr(line, i, 3) == "$((") {
          if (c == "$") i++
          arith = 2; i++; continue
        }
        if (c == "\047") { q = c; out = out "_Q_"; continue }
        if (c == "\"") { q = c; depth = 0; continue }
        out = out c
      }
      flush(cont || q != "")
      if (pending) inheredoc = 1
    }' "$1"
}

# Candidate programs: "file:word" per command position, and absolute paths
# of programs anywhere outside comments (quoted lists of paths too) that
# start at /bin, /sbin, /usr/bin or /usr/sbin (not /usr/local/bin/...).
candidates() {
  for f in $scripts; do
    sed 's/^[[:space:]]*#.*//; s/[[:space:]]#.*//' "$f" |
      grep -o '\(^\|[^A-Za-z0-9_.$/}-]\)/\(usr/\)\{0,1\}s\{0,1\}bin/[a-z][a-z0-9_.+-]*' |
      sed "s|^[^/]*||; s|^|$f:|"
    code_of "$f" | awk -v file="$f" '
      # an array assignment spanning lines: its words are data
      inarray { if ($0 ~ /\)/) inarray = 0; next }
      /^[ \t]*[A-Za-z_][A-Za-z0-9_]*\+?=\(/ { if ($0 !~ /\)/) inarray = 1; next }
      {
        line = $0
        sub(/^[ \t]*[^ \t()=]+\)/, " ", line)        # a case label
        gsub(/;;/, " ", line)
        gsub(/\$\(|`|&&|\|\||[;|(){}!&]/, "\n", line)
        n = split(line, parts, "\n")
        for (i = 1; i <= n; i++) {
          m = split(parts[i], w, /[ \t]+/); j = 1
          while (j <= m && (w[j] == "" || w[j] ~ /^[A-Za-z_][A-Za-z0-9_]*=/))
            j++
          while (j <= m && w[j] ~ /^(sudo|env|exec|nohup|xargs|then|do|else|time|if|while|until|\$SUDO)$/) {
            j++
            while (j <= m && (w[j] ~ /^-/ || w[j] ~ /^[A-Za-z_][A-Za-z0-9_]*=/)) j++
          }
          if (j <= m && w[j] == "timeout") { j++; while (j <= m && w[j] ~ /^(-|[0-9])/) j++ }
          if (j <= m && w[j] ~ /^[a-z][a-z0-9_.+-]*$/ && w[j] !~ /\+\+$/)
            print file ":" w[j]
        }
      }'
  done
}

# One dpkg -S for every path found (dpkg is slow per call). dpkg knows a
# file by the path its package ships it at: /bin and /usr/bin are one
# directory on a merged-/usr system, so both spellings are asked.
declare -A paths_of owner
mapfile -t found < <(candidates | sort -u)
for fw in "${found[@]}"; do
  word=${fw#*:}
  [ -n "${paths_of[$word]+x}" ] && continue
  case $word in
    /*) paths_of[$word]=$word ;;
    *)
      if grep -qxF -- "$word" <<<"$functions" ||
        [[ " $(echo $builtins) " == *" $word "* ]]; then
        paths_of[$word]=builtin
      else
        paths_of[$word]=$(type -ap -- "$word" 2>/dev/null | tr '\n' ' ')
      fi ;;
  esac
done
aliases() { # PATH: the spellings dpkg may know it by
  local p=$1 r
  r=$(readlink -f "$p")
  printf '%s\n' "$p" "$r" "${p/#\/usr\/bin\//\/bin\/}" "${p/#\/bin\//\/usr\/bin\/}" \
    "${r/#\/usr\/bin\//\/bin\/}" "${p/#\/usr\/sbin\//\/sbin\/}" \
    "${p/#\/sbin\//\/usr\/sbin\/}"
}
mapfile -t asked < <(for w in "${!paths_of[@]}"; do
  [ "${paths_of[$w]}" = builtin ] && continue
  for p in ${paths_of[$w]}; do aliases "$p"; done
done | sort -u)
if [ ${#asked[@]} -gt 0 ]; then
  while IFS= read -r line; do
    owner[${line#*: }]=${line%%:*}
  done < <(dpkg -S "${asked[@]}" 2>/dev/null | grep -v '^diversion')
fi

fail=0
for fw in "${found[@]}"; do
  file=${fw%%:*} word=${fw#*:} paths=${paths_of[${fw#*:}]}
  [ "$paths" = builtin ] && continue
  if [ -z "${paths// /}" ]; then
    echo "$file: calls $word, which is not installed here (add its package to scripts/deps.sh)"
    fail=1
    continue
  fi
  ok=0 owners=""
  for p in $paths; do
    pkg=""
    while IFS= read -r a; do
      [ -n "${owner[$a]+x}" ] && { pkg=${owner[$a]}; break; }
    done < <(aliases "$p")
    owners="$owners ${pkg:-none}"
    [ -n "$pkg" ] && grep -qxF "$pkg" "$allowed" && ok=1
  done
  if [ $ok -eq 0 ]; then
    echo "$file: calls $word ($paths; package:$owners), not installed by scripts/deps.sh"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "check_deps: every program the scripts call comes from a package of scripts/deps.sh"
exit $fail
