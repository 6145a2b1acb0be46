#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layers of docs/architecture.md, checked on the sources: every #include
# of a weft header (public <weft/x.h> or a folder's private "dir/x.h") must
# come from the file's own layer or one below it, a plugin must not include
# another plugin's folder, no file outside a plugin's folder may name a
# plugin (its folder, its exported symbols, or its name as a string: the one
# list of built-ins, transports/builtin.c, gets the names from CMake),
# transports/ holds the plugins' folders and that list, nothing else (the
# registry, endpoints and socket helpers are channel/'s), and the KV
# service, the benchmarks and the HTTP sample are projects of their own
# (samples/kv, samples/bench, samples/http): tests/ and scripts/ hold no
# KV file and no script of the HTTP sample, and their own
# check_kv_public_api, check_bench_public_api and check_http_public_api
# hold them to the headers and symbols weft installs
# (samples/check_public_api.sh).
#
# Usage: tests/check_layers.sh [SOURCE_DIR]   (default: the repository)
# Exit 0 when clean; 1 with one line per violation, "file:line: why".
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2

PLUGINS="tcp uring ucx verbs"

# Layer of each public header (include/weft/<name>.h), lowest first.
header_layer() {
  case $1 in
    loop|buf|error|log|clock|timer|source|msg|version) echo 1 ;;
    endpoint|channel_option|file_region|transport_plugin) echo 2 ;;
    channel|pipeline|bootstrap|embedded) echo 3 ;;
    decoder|frame|rpc|resp|varint|config|cli|http) echo 4 ;;
    flush_consolidation|idle|logging|rpc_client|rpc_server|stats|tls) echo 5 ;;
    weft) echo 6 ;; # the umbrella: applications only
    *) echo 9 ;;    # unknown: a new header must be placed in this table
  esac
}

# Layer of a folder (of a file, or of a private header "dir/x.h").
dir_layer() {
  case $1 in
    loop*) echo 1 ;;
    transports/*/*|transports/builtin.c) echo 3 ;; # plugins, beside channel/
    channel*) echo 3 ;;
    codec*|config*) echo 4 ;;
    handlers*) echo 5 ;;
    samples*) echo 6 ;;
    include/weft/*) f=${1##*/}; header_layer "${f%.h}" ;;
    *) echo 9 ;;
  esac
}

plugin_of() { # transports/<plugin>/... -> <plugin>, else empty
  case $1 in transports/*/*) p=${1#transports/}; echo "${p%%/*}" ;; esac
}

fail=0
report() { echo "$1"; fail=1; }

sources() { # the C files of the given folders, sorted
  find "$@" -name '*.[ch]' -type f 2>/dev/null | LC_ALL=C sort
}
files=$(sources loop transports channel config codec handlers samples \
  include/weft)
[ -n "$files" ] || { echo "check_layers: no sources found in $ROOT" >&2; exit 2; }

for f in $files; do
  mine=$(dir_layer "$f")
  own_plugin=$(plugin_of "$f")
  while IFS=: read -r line inc; do
    inc=${inc#*include}
    inc=${inc#"${inc%%[<\"]*}"} # from the opening < or "
    case $inc in
      '<weft/'*) inc=${inc#<}; inc=${inc%%>*}
                 name=${inc#weft/}; theirs=$(header_layer "${name%.h}") ;;
      '"'*) inc=${inc#\"}; inc=${inc%%\"*} # (a comment after it may hold a /)
            case $inc in */*) theirs=$(dir_layer "$inc") ;; *) continue ;; esac ;;
      *) continue ;; # a system header, or one of the same folder
    esac
    if [ "$theirs" -gt "$mine" ]; then
      report "$f:$line: includes $inc (layer $theirs) from layer $mine"
    fi
    p=$(plugin_of "$inc")
    if [ -n "$p" ] && [ "$p" != "$own_plugin" ]; then
      case $f in samples/*) ;; *)
        report "$f:$line: includes plugin header $inc" ;;
      esac
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f")
done

# Library code outside a plugin's folder never names a plugin. Comments
# may (they document); code, symbols and string literals may not.
for f in $(sources loop transports channel config codec handlers); do
  own=$(plugin_of "$f")
  for p in $PLUGINS; do
    [ "$p" = "$own" ] && continue
    # Strip /* */ and // comments (line-wise; weft's style keeps them
    # simple), then look for the plugin's symbols and its name as a string.
    sed -e 's://.*$::' "$f" |
      awk '{ line = $0
             while (1) {
               if (incomment) { e = index(line, "*/"); if (!e) { line = ""; break }
                                line = substr(line, e + 2); incomment = 0 }
               s = index(line, "/*"); if (!s) break
               pre = substr(line, 1, s - 1); rest = substr(line, s + 2)
               e = index(rest, "*/")
               if (e) line = pre " " substr(rest, e + 2)
               else { line = pre; incomment = 1; break } }
             print NR ":" line }' |
      grep -E "weft__transport_$p\\b|weft__${p}_|\"$p\"|transports/$p/" |
      while IFS=: read -r line _; do
        echo "$f:$line: names the plugin '$p' outside transports/$p/"
      done
  done
done > /tmp/check_layers.$$
if [ -s /tmp/check_layers.$$ ]; then cat /tmp/check_layers.$$; fail=1; fi
rm -f /tmp/check_layers.$$

# transports/ is the plugins' folders and their list; core code there
# belongs in channel/ (docs/architecture.md, "Layers").
for f in $(find transports -maxdepth 1 -type f -name '*.[ch]' | LC_ALL=C sort); do
  [ "$f" = transports/builtin.c ] ||
    report "$f: transports/ holds only plugin folders and builtin.c; core code goes in channel/"
done

# The KV's files are samples/kv's (its code, tests and scripts).
for f in $(find tests scripts -iname '*kv*' 2>/dev/null | LC_ALL=C sort); do
  report "$f: a file of the KV service outside samples/kv/"
done
# The HTTP sample's tests and scripts are samples/http's; weft's own HTTP
# tests are the codecs' (test_http.c, test_http_client.c, the fuzz target).
for f in $(find tests scripts \( -iname '*http*.sh' -o -iname '*http*.py' \) \
  2>/dev/null | LC_ALL=C sort); do
  report "$f: a script of the HTTP sample outside samples/http/"
done

[ $fail -eq 0 ] && echo "check_layers: every include points down a layer; no plugin named outside its folder"
exit $fail
