#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes the certificates of the TLS tests (tests/test_tls.c) in DIR, with
# the openssl command: nothing here is committed, private keys least of
# all. EC P-256 keys, so it takes a fraction of a second.
#
#   ca.pem               the test CA ("weft test CA")
#   server.pem/.key      CN=localhost, SAN DNS:localhost, IP:127.0.0.1,
#                        serverAuth, signed by the CA
#   client.pem/.key      CN=weft test client, clientAuth, signed by the CA
#   expired.pem/.key     CN=weft expired, SAN DNS:localhost, IP:127.0.0.1,
#                        any purpose (server or client), expired a day ago
#   other-ca.pem         another CA ("weft other CA")
#   rogue.pem/.key       like server.pem, signed by the other CA
#   rogue-client.pem/.key like client.pem, signed by the other CA
#
# Usage: tests/tls/make-certs.sh DIR
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"

key() { # NAME: a P-256 private key in NAME.key
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    -out "$1.key" 2>/dev/null
}

ca() { # NAME CN: a self-signed CA certificate
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 3650 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# NAME CN CA DAYS EXT...: a certificate signed by CA; DAYS -1 = expired
leaf() {
  local name=$1 cn=$2 ca=$3 days=$4
  shift 4
  key "$name"
  openssl req -new -key "$name.key" -out "$name.csr" -subj "/CN=$cn" \
    2>/dev/null
  printf '%s\n' "$@" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" \
    -CAcreateserial -days "$days" -extfile "$name.ext" -out "$name.pem" \
    2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

SERVER_EXT=("basicConstraints=CA:FALSE" "extendedKeyUsage=serverAuth"
  "subjectAltName=DNS:localhost,IP:127.0.0.1")
CLIENT_EXT=("basicConstraints=CA:FALSE" "extendedKeyUsage=clientAuth")

ca ca "weft test CA"
ca other-ca "weft other CA"
leaf server localhost ca 3650 "${SERVER_EXT[@]}"
leaf client "weft test client" ca 3650 "${CLIENT_EXT[@]}"
leaf expired "weft expired" ca -1 "basicConstraints=CA:FALSE" \
  "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf rogue localhost other-ca 3650 "${SERVER_EXT[@]}"
leaf rogue-client "weft test client" other-ca 3650 "${CLIENT_EXT[@]}"
rm -f ./*.srl
