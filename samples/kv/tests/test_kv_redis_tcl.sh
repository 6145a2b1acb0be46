#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis' own tcl suite (Debian's redis 7.0 source package) against
# weft-kv-server and redis-server side by side, in the harness's external
# server mode: the files of what the KV service is (strings, the keyspace,
# expiry, transactions). Prints each file's passed/failed for both servers
# and a last line "N passed, N failed" (weft's).
#
# The suite is not in this repository: it is fetched at run time with
# `apt-get source redis` into a cache outside the tree
# ($WEFT_CACHE_DIR, default ${XDG_CACHE_HOME:-$HOME/.cache}/weft), from a
# deb-src list derived from the machine's own apt sources (same archive,
# Types: deb-src) and handed to apt with -o options: /etc/apt is not
# changed. When it cannot be fetched the test is skipped (77) with the
# reason.
#
# The harness runs unchanged but for two lines: its `function flush` and
# `config set` of a test's overrides are wrapped in catch (the KV service
# has neither functions nor those settings). Tests tagged as needing DEBUG,
# replication or CONFIG SET maxmemory are skipped (--tags), on both
# servers; --singledb (SELECT 0 only) and --durable (an error ends one
# test, not the file).
#
# Pass criterion: every test weft fails is on the list of known failures
# (KNOWN, samples/kv/tests/kv_redis_tcl_known.txt: file, test name, and the command
# outside the KV service it needs), or failed on redis-server in the same
# run too (the machine, not weft). A new failure is red; a known one that
# passes is reported, to be taken off the list.
# Usage: test_kv_redis_tcl.sh PATH/TO/weft-kv-server KNOWN   (run by CTest)
set -u
server=$1 known=$2
files=(unit/type/incr unit/keyspace unit/type/string unit/expire unit/multi)
tags="-needs:debug -needs:repl -needs:config-maxmemory"

skip() { echo "SKIP: $*"; exit 77; }
command -v tclsh >/dev/null || skip "tclsh is needed (apt-get install tcl)"
command -v redis-server >/dev/null ||
  skip "redis-server is needed for the side-by-side counts"
[ -r "$known" ] || { echo "FAIL: no list of known failures at $known"; exit 1; }

cache=${WEFT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}/redis-src
# The source tree of an earlier run, else fetch it.
src_tree() { ls -d "$cache"/redis-7.0.*/tests/test_helper.tcl 2>/dev/null | head -1; }

fetch() { # apt-get source redis into $cache with a private deb-src list
  command -v apt-get >/dev/null || skip "apt-get is not available"
  command -v dpkg-source >/dev/null ||
    skip "dpkg-source is needed to unpack the source (apt-get install dpkg-dev)"
  mkdir -p "$cache/apt/lists/partial" || skip "cannot create $cache"
  local list="$cache/apt/deb-src.sources"
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$list"
  elif [ -r /etc/apt/sources.list ]; then
    list="$cache/apt/deb-src.list"
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$list"
  else
    skip "no apt sources to derive a deb-src entry from"
  fi
  local opts=(-q -o "Dir::Etc::SourceList=$list" -o Dir::Etc::SourceParts=/nonexistent
              -o "Dir::State::Lists=$cache/apt/lists" -o APT::Sandbox::User=root)
  (cd "$cache" && apt-get "${opts[@]}" update >"$cache/fetch.log" 2>&1 &&
    apt-get "${opts[@]}" source redis >>"$cache/fetch.log" 2>&1) ||
    skip "apt-get source redis failed (no network or no deb-src?): $(tail -3 "$cache/fetch.log")"
}
[ -n "$(src_tree)" ] || fetch
helper=$(src_tree)
[ -n "$helper" ] || skip "apt-get source redis gave no redis 7.0 tree (its version: $(ls "$cache"))"
suite=$(dirname "$(dirname "$helper")")

. "$(dirname "$0")/kv_checks.sh" # scratch_dir
scratch_dir

# The harness writes under tests/tmp: each run gets its own copy.
cp -r "$suite/tests" "$dir/" || { echo "FAIL: cannot copy $suite/tests"; exit 1; }
sed -i 's/^    r function flush$/    catch {r function flush}/
        s/^        r config set \$param \$val$/        catch {r config set $param $val}/' \
  "$dir/tests/support/server.tcl"
[ "$(grep -c '^ *catch {r \(function flush\|config set \$param \$val\)}' \
  "$dir/tests/support/server.tcl")" -eq 3 ] ||
  { echo "FAIL: the harness changed: its function flush / config set lines were not found"; exit 1; }

# weft-kv-server on a free port (its log names it), with values up to
# 8 MiB: "Very big payload in GET/SET" sets 4 MB (Redis takes 512 MB)
. "$(dirname "$0")/kv_server.sh" # start_resp_server
start_resp_server weft -o kv.max_value_bytes=8388608
weft_port=$port

# redis-server on a port free now (retried on a clash)
redis_port=""
mkdir -p "$dir/redis"
for _ in 1 2 3 4 5; do
  p=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$p" --save "" --appendonly no \
    --dir "$dir/redis" >"$dir/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 50); do
    redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && { redis_port=$p; break; }
    kill -0 "$rpid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$redis_port" ] && { pids+=("$rpid"); break; }
  kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null
done
[ -n "$redis_port" ] || { echo "FAIL: redis-server did not start:"; cat "$dir/redis.log"; exit 1; }

# run NAME PORT FILE: the harness on one file; its output in $dir/NAME.out
run() {
  (cd "$dir" && timeout 600 tclsh tests/test_helper.tcl --host 127.0.0.1 \
    --port "$2" --singledb --durable --clients 1 --tags "$tags" \
    --single "$3" >"$dir/$1.raw" 2>&1)
  sed 's/\x1b\[[0-9;]*m//g' "$dir/$1.raw" >"$dir/$1.out"
}
count() { grep -ac "^\[$2\]: " "$dir/$1.out"; } # NAME ok|err
failures() { sed -n 's/^\[err\]: \(.*\) in tests\/.*\.tcl$/\1/p' "$dir/$1.out"; }

total_ok=0 total_err=0 new=0
printf '%-18s %14s %14s\n' file weft redis-server
for f in "${files[@]}"; do
  run weft "$weft_port" "$f"
  run redis "$redis_port" "$f"
  w_ok=$(count weft ok) w_err=$(count weft err)
  r_ok=$(count redis ok) r_err=$(count redis err)
  printf '%-18s %6s/%-7s %6s/%-7s (passed/failed)\n' "$f" "$w_ok" "$w_err" "$r_ok" "$r_err"
  total_ok=$((total_ok + w_ok)) total_err=$((total_err + w_err))
  if grep -aq '^\[exception\]' "$dir/weft.out"; then
    echo "  FAIL: the harness stopped on an exception against weft:"
    grep -a -A5 '^\[exception\]' "$dir/weft.out" | sed 's/^/    /'
    new=$((new + 1))
  fi
  if [ $((w_ok + w_err)) -ne $((r_ok + r_err)) ]; then
    echo "  note: weft ran $((w_ok + w_err)) tests of $f, redis-server $((r_ok + r_err))"
  fi
  # A failure of weft's that is neither known nor redis-server's counts
  # when a second run of the file shows it again: several of these tests
  # time expiries in milliseconds, which a loaded machine can stretch.
  unexpected=()
  while IFS= read -r t; do
    need=$(awk -F'\t' -v f="$f" -v t="$t" '$1 == f && $2 == t { print $3; exit }' "$known")
    if [ -n "$need" ]; then
      continue
    elif failures redis | grep -qxF -- "$t"; then
      echo "  weft and redis-server both failed (the machine?): $t"
    else
      unexpected+=("$t")
    fi
  done < <(failures weft)
  if [ ${#unexpected[@]} -gt 0 ]; then
    cp "$dir/weft.out" "$dir/weft.first.out"
    run weft "$weft_port" "$f"
    for t in "${unexpected[@]}"; do
      if failures weft | grep -qxF -- "$t"; then
        echo "  FAIL: new failure (in two runs): $t"
        grep -a -A4 "^\[err\]: $(printf '%s' "$t" | sed 's/[][\.*^$]/\\&/g') in" "$dir/weft.out" |
          tail -n +2 | sed 's/^/    /'
        new=$((new + 1))
      else
        echo "  failed once, passed when the file ran again (timing?): $t"
      fi
    done
  fi
  awk -F'\t' -v f="$f" '$1 == f { print $2 }' "$known" | while IFS= read -r t; do
    grep -aqxF -- "[ok]: $t" <(sed 's/ ([0-9]* ms)$//' "$dir/weft.out") &&
      echo "  now passes, take it off $known: $t"
  done
done
echo "$total_ok passed, $total_err failed"
if [ "$new" -gt 0 ]; then
  echo "FAIL: $new failures not on the list of known ones ($known)"
  exit 1
fi
echo "PASS: every failure is a known one (a command outside the KV service)"
