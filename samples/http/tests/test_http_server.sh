#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# curl, Python's http.client (http_client_py.py), ab and weft's own
# client (weft-http-load) against
# weft-http over one transport, optionally with TLS in front: /plaintext,
# /json, static files, HEAD, keep-alive, pipelining, 100-continue, the
# hostile cases with their status codes, the access log, --help, and a
# short ab run (keep-alive) without a failed request.
# Usage: test_http_server.sh PATH/TO/weft-http TRANSPORT [tls MAKE_CERTS]
#   (CTest; MAKE_CERTS is weft's tests/tls/make-certs.sh)
set -u
server=$1 transport=$2 tls=${3:-} make_certs=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
for tool in curl ab python3; do
  command -v "$tool" >/dev/null ||
    { echo "FAIL: $tool is needed (scripts/deps.sh installs it)"; exit 1; }
done
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

mkdir -p "$dir/root/sub"
printf '<h1>weft</h1>\n' >"$dir/root/index.html"
printf 'nested\n' >"$dir/root/sub/a.txt"
head -c 300000 /dev/urandom >"$dir/root/big.bin"
head -c 8000003 /dev/urandom >"$dir/root/huge.bin"
printf 'secret\n' >"$dir/secret.txt"

scheme=http curl_tls=() py_tls=() srv_tls=()
if [ "$tls" = tls ]; then
  "$make_certs" "$dir/certs" >/dev/null
  scheme=https
  curl_tls=(--cacert "$dir/certs/ca.pem")
  py_tls=(tls "$dir/certs/ca.pem")
  srv_tls=(-o http.tls=on -o "tls.cert_file=$dir/certs/server.pem"
    -o "tls.key_file=$dir/certs/server.key")
fi

. "$here/http_lib.sh"
start_weft_http "$server" "$transport" "$dir/server.log" \
  -o "http.root=$dir/root" -o "http.access_log=$dir/access.log" \
  -o http.header_timeout_ms=1000 -o http.body_timeout_ms=2000 \
  "${srv_tls[@]}"
base="$scheme://127.0.0.1:$port"

fetch() { timeout 20 curl -s "${curl_tls[@]}" "$@"; }

got=$(fetch "$base/plaintext")
[ "$got" = "Hello, World!" ]; check http_curl_plaintext $? "$got"
got=$(fetch "$base/json")
[ "$got" = '{"message":"Hello, World!"}' ]; check http_curl_json $? "$got"
got=$(fetch -D - -o /dev/null "$base/plaintext" | tr -d '\r')
echo "$got" | grep -q '^Date: .* GMT$' && echo "$got" | grep -q '^Server: weft$'
check http_curl_date_and_server $? "$got"
got=$(fetch "$base/")
[ "$got" = "<h1>weft</h1>" ]; check http_curl_index $? "$got"
got=$(fetch "$base/sub/a.txt")
[ "$got" = "nested" ]; check http_curl_nested_file $? "$got"
fetch "$base/big.bin" | cmp -s - "$dir/root/big.bin"
check http_curl_big_file $? "big.bin differs"
# A multi-MB file: many 1 MiB file regions (sendfile on plain tcp).
fetch "$base/huge.bin" | cmp -s - "$dir/root/huge.bin"
check http_curl_multi_mb_file $? "huge.bin differs"
got=$(fetch -I "$base/big.bin" | tr -d '\r' | grep '^Content-Length')
[ "$got" = "Content-Length: 300000" ]; check http_curl_head $? "$got"
got=$(fetch -o /dev/null -w '%{http_code}' --path-as-is "$base/../secret.txt")
[ "$got" = 400 ]; check http_curl_no_escape_from_root $? "$got"
got=$(fetch -o /dev/null -w '%{http_code}' "$base/nope")
[ "$got" = 404 ]; check http_curl_404 $? "$got"
# Three requests on one connection (keep-alive): one connect.
got=$(fetch -o /dev/null -o /dev/null -o /dev/null -w '%{num_connects}' \
  "$base/plaintext" "$base/json" "$base/big.bin" | tr -d '\n')
[ "$got" = 100 ]; check http_curl_keep_alive $? "connects $got"
# curl --http2 on http:// asks to upgrade to h2c: answered in HTTP/1.1,
# and the connection goes on serving.
got=$(fetch --http2 "$base/plaintext" "$base/json")
[ "$got" = 'Hello, World!{"message":"Hello, World!"}' ]
check http_curl_upgrade_ignored $? "$got"
got=$(fetch --http1.0 -D - -o /dev/null "$base/plaintext" | tr -d '\r' |
  grep -c '^Connection: close')
[ "$got" = 1 ]; check http_curl_http10_close $? "$got"
# A chunked upload with Expect: 100-continue (curl sends it for big ones).
head -c 200000 /dev/zero >"$dir/upload"
got=$(fetch -o /dev/null -w '%{http_code}' -H 'Transfer-Encoding: chunked' \
  -H 'Expect: 100-continue' --data-binary "@$dir/upload" "$base/plaintext")
[ "$got" = 405 ]; check http_curl_chunked_upload_answered $? "$got"

timeout 120 python3 "$here/http_client_py.py" "$port" "$dir/root" \
  "${py_tls[@]}" >"$dir/py.out" 2>&1
check http_python_client $? "$(cat "$dir/py.out")"

if [ "$tls" != tls ]; then # ab's TLS is not the point here
  timeout 120 ab -q -n 5000 -c 20 -k "$base/plaintext" >"$dir/ab.out" 2>&1
  grep -q '^Failed requests: *0$' "$dir/ab.out" &&
    grep -q '^Complete requests: *5000$' "$dir/ab.out"
  check http_ab_keep_alive $? "$(cat "$dir/ab.out")"
fi

# weft's own client (weft-http-load, built beside the server), pipelined
# over the same transport.
load="$(dirname "$server")/weft-http-load"
if [ "$tls" != tls ] && [ -x "$load" ]; then
  timeout 120 "$load" -o loop.loops=1 -o "client.connect=$transport://127.0.0.1:$port" \
    -o load.connections=4 -o load.pipeline=16 -o load.requests=4000 \
    >"$dir/load.out" 2>&1
  check http_weft_client_pipelined $? "$(cat "$dir/load.out")"
fi

got=$(grep -c '"GET /plaintext HTTP/1.1" 200 13$' "$dir/access.log")
[ "$got" -ge 1 ]; check http_access_log $? "$(head -3 "$dir/access.log")"
"$server" --help | grep -q 'max_head_bytes = 16384'
check http_help_lists_keys $? "--help"

kill "$pid"; wait "$pid"; st=$?; pid=""
[ "$st" = 0 ]; check http_server_stops_cleanly $? "exit $st"
# Which path the static files took, from the count weft-http prints at
# exit: sendfile (bytes sent from the file) on plain tcp, which sends file
# regions as they are; bytes read into buffers where TLS must see them or
# the transport cannot send from a file (uring).
line=$(grep 'static files:' "$dir/server.log")
sent=$(echo "$line" | sed -n 's/.*files: \([0-9]*\) bytes sent.*/\1/p')
read=$(echo "$line" | sed -n 's/.*, \([0-9]*\) read into.*/\1/p')
if [ "$transport" = tcp ] && [ "$tls" != tls ]; then
  [ "${sent:-0}" -ge 8000003 ] && [ "${read:-1}" = 0 ]
else
  [ "${sent:-1}" = 0 ] && [ "${read:-0}" -ge 8000003 ]
fi
check http_static_file_path $? "$line"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
