#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-bench's +tls setups (the TLS handler first at both ends), briefly:
# a ping-pong and a stream over tcp+tls (and uring+tls when built) report
# their rows with figures, and the first handshake's protocol; so do the
# raw-tls-busy and raw-tls-block floors (OpenSSL alone, bench_raw_tls.c);
# a +tls or raw-tls setup without --tls-certs is refused, and so is a
# raw-tls setup asked for a pattern it does not run; a client that does not trust the
# server's CA fails the run with the verification's reason, not a hang or
# a row; --tls-ktls hands encryption to the kernel where it can (else
# user-space records, said so). Certificates are made here by
# tests/tls/make-certs.sh in a temporary directory (never committed). No
# speed is asserted.
# Usage: test_bench_tls.sh weft-bench make-certs.sh [URING:ON|OFF]
set -u
bench=$1 make_certs=$2 uring=${3:-OFF}
command -v openssl >/dev/null || {
  echo "FAIL: openssl is needed (scripts/deps.sh: openssl)"
  exit 1
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$make_certs" "$dir/certs" || { echo "FAIL: make-certs.sh"; exit 1; }

passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
# a short run: 300 round trips, 0.2 s of stream
short=(-r 1 -n 300 -w 50 -t 0.2 --warm-seconds 0.05 -q --no-progress)

# CSV FIELD CONFIG PATTERN: that row's field (by the header's name)
field() {
  awk -F, -v f="$1" -v c="$2" -v p="$3" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $1 == c && $5 == p { print $col[f] }' "$dir/out.csv"
}

run_ok() { # SETUP LABEL: both patterns report figures over SETUP
  local t=$1 label=$2
  if ! timeout 60 "$bench" -S "$t" --tls-certs "$dir/certs" \
    -p pingpong,stream -s 16 "${short[@]}" --csv "$dir/out.csv" \
    >"$dir/out.txt" 2>"$dir/err.txt"; then
    bad "$t: weft-bench failed: $(cat "$dir/err.txt")"
    return
  fi
  grep -q "^weft-bench: $label: TLS TLSv1.3, cipher " "$dir/err.txt" &&
    ok || bad "$t: no handshake line in: $(cat "$dir/err.txt")"
  local p50 mbs
  p50=$(field p50_us "$label" pingpong)
  mbs=$(field mb_per_s "$label" stream)
  awk -v v="$p50" 'BEGIN { exit !(v > 0) }' && ok ||
    bad "$t: ping-pong p50 '$p50' in $(cat "$dir/out.csv")"
  awk -v v="$mbs" 'BEGIN { exit !(v > 0) }' && ok ||
    bad "$t: stream MB/s '$mbs' in $(cat "$dir/out.csv")"
}

run_ok tcp+tls:0 "tcp+tls bp=0"
run_ok raw-tls-busy raw-tls-busy
run_ok raw-tls-block raw-tls-block
if [ "$uring" = ON ]; then
  run_ok uring+tls:0 "uring+tls bp=0"
else
  # Reported as a skip (scripts/test.sh's summary reads the log), not a pass.
  echo "SKIPPED test_bench_tls uring: weft was built without io_uring" |
    tee -a "${WEFT_TEST_SKIP_LOG:-/dev/null}"
fi

# --tls-ktls: the kernel encrypts where it has the tls ULP (the Soft-RoCE
# VM's Debian kernel); elsewhere user-space records, and the run goes on.
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then
  want="kTLS TX"
else
  want="user-space records"
fi
if timeout 60 "$bench" -S tcp+tls:0 --tls-certs "$dir/certs" --tls-ktls \
  -p stream -s 16 "${short[@]}" >/dev/null 2>"$dir/err.txt"; then
  grep -q "^weft-bench: tcp+tls bp=0: TLS TLSv1.3, .*, $want\$" \
    "$dir/err.txt" && ok || bad "--tls-ktls: want '$want' in: $(cat "$dir/err.txt")"
else
  bad "--tls-ktls: weft-bench failed: $(cat "$dir/err.txt")"
fi

# A +tls or raw-tls setup needs certificates: refused up front (exit 2).
for s in tcp+tls:0 raw-tls-busy raw-tls-block; do
  out=$("$bench" -S $s -p pingpong -s 16 "${short[@]}" 2>&1)
  rc=$?
  [ $rc -eq 2 ] && [[ $out == *"needs --tls-certs DIR"* ]] && ok ||
    bad "$s without --tls-certs: rc $rc, '$out'"
done
# The raw-tls floors run pingpong and stream only: others are refused.
out=$("$bench" -S raw-tls-busy --tls-certs "$dir/certs" -p pingpong,rate \
  -s 16 "${short[@]}" 2>&1)
rc=$?
[ $rc -eq 2 ] && [[ $out == *"pingpong and stream patterns only"* ]] && ok ||
  bad "raw-tls-busy -p rate: rc $rc, '$out'"

# A client that trusts another CA: the run fails and says why.
mkdir "$dir/rogue"
cp "$dir/certs/other-ca.pem" "$dir/rogue/ca.pem"
cp "$dir/certs/server.pem" "$dir/certs/server.key" "$dir/rogue/"
out=$(timeout 60 "$bench" -S tcp+tls:0 --tls-certs "$dir/rogue" \
  -p pingpong -s 16 "${short[@]}" 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
  [[ $out == *"certificate verify failed"* ]] && ok ||
  bad "wrong CA: rc $rc, '$out'"
out=$(timeout 60 "$bench" -S raw-tls-block --tls-certs "$dir/rogue" \
  -p pingpong -s 16 "${short[@]}" 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
  [[ $out == *"certificate verify failed"* ]] && ok ||
  bad "raw-tls wrong CA: rc $rc, '$out'"

echo "test_bench_tls: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
