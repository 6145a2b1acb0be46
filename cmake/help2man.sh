#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes a program's man page with help2man from its --help and --version,
# then keeps what --help prints line by line (the INI listing of the keys,
# the examples) line by line in the page too (no-fill mode), where help2man
# would have filled them into paragraphs.
# Usage: cmake/help2man.sh HELP2MAN PROGRAM "what it is" OUT.1
set -euo pipefail
help2man=$1 program=$2 what=$3 out=$4
mkdir -p "$(dirname "$out")"
"$help2man" --no-info --no-discard-stderr --section 1 --name "$what" \
  --output "$out.tmp" "$program"
# A paragraph whose first line is an INI section ("[loop]"), and every
# paragraph of EXAMPLES, in .nf ... .fi.
awk '
  function close_nf() { if (nf) { print ".fi"; nf = 0 } }
  /^\.(SH|SS|PP|IP|TP|HP|LP|P)( |$)/ {
    close_nf(); print
    if ($1 == ".SH") section = $2
    first = ($1 != ".SH" && $1 != ".SS" && $1 != ".TP")
    next
  }
  first && (/^\[[^]]*\]$/ || section == "EXAMPLES") { print ".nf"; nf = 1 }
  { first = 0; print }
  END { close_nf() }
' "$out.tmp" >"$out"
rm -f "$out.tmp"
