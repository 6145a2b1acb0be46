#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft's HTTP client codec against nginx (weft-http-load): keep-alive and
# pipelined GETs all answered 200, a static file, a 404 reported as not
# 2xx. nginx runs from a config of its own on a free loopback port.
# Usage: test_http_nginx.sh PATH/TO/weft-http-load   (CTest)
set -u
load=$1
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "FAIL: nginx is needed (apt-get install nginx-light)"; exit 1; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
# A free loopback port: nginx cannot be told to take any.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/root"
head -c 100000 /dev/urandom >"$dir/root/big.bin"
cat >"$dir/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
user root;
error_log $dir/error.log;
pid $dir/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  server {
    listen 127.0.0.1:$port;
    root $dir/root;
    location = /plaintext { default_type text/plain; return 200 "Hello, World!"; }
  }
}
CONF
"$nginx" -c "$dir/nginx.conf" -p "$dir" 2>"$dir/start.log" &
pid=$!
for _ in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done

. "$(dirname "$0")/http_lib.sh"
run() { # NAME WANT-RC ARGS...
  local name=$1 want=$2; shift 2
  timeout 120 "$load" -o loop.loops=1 -o "client.connect=127.0.0.1:$port" "$@" \
    >"$dir/out" 2>&1
  local rc=$?
  [ "$rc" = "$want" ]
  check "$name" $? "exit $rc, want $want: $(cat "$dir/out")"
}
run http_nginx_keep_alive 0 -o load.connections=2 -o load.requests=2000
run http_nginx_pipelined 0 -o load.connections=2 -o load.pipeline=16 \
  -o load.requests=5000
run http_nginx_static_file 0 -o load.path=/big.bin -o load.requests=50 \
  -o load.pipeline=4
run http_nginx_404_is_reported 1 -o load.path=/missing -o load.requests=10
grep -q '10 not 2xx' "$dir/out"
check http_nginx_404_count $? "$(cat "$dir/out")"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
