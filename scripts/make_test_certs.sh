#!/usr/bin/env bash
# Makes a throw-away PKI for TLS tests and local TLS runs, in DIR (default certs/):
#   ca.pem ca.key                 the cluster's CA
#   server.pem server.key         server certificate for localhost / 127.0.0.1 / ::1 and any
#                                 extra DNS names given in SERVER_NAMES (comma-separated)
#   client.pem client.key         a client certificate signed by the same CA (mutual TLS)
#   other-ca.pem other-client.pem other-client.key
#                                 a second CA and a client signed by it (must be refused)
#   token                         a random cluster token
# Keys are EC P-256; certificates are valid for 30 days. Never use these in production.
#   scripts/make_test_certs.sh /tmp/ps-certs
#   SERVER_NAMES=ps-0.ps,ps-1.ps scripts/make_test_certs.sh certs
set -euo pipefail
DIR="${1:-certs}"
mkdir -p "$DIR"
cd "$DIR"
command -v openssl >/dev/null || { echo "make_test_certs: openssl is missing (scripts/setup.sh installs it)" >&2; exit 2; }

san="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=',' read -ra extra <<< "${SERVER_NAMES:-}"
for name in "${extra[@]}"; do [[ -n "$name" ]] && san="$san,DNS:$name"; done

ca() {  # ca NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj "/CN=$1" -keyout "$1.key" -out "$1.pem" 2>/dev/null
}
leaf() {  # leaf NAME CA EXTENSIONS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 30 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca
ca other-ca
leaf server ca "subjectAltName=$san
extendedKeyUsage=serverAuth"
leaf client ca "extendedKeyUsage=clientAuth"
leaf other-client other-ca "extendedKeyUsage=clientAuth"
openssl rand -hex 24 > token
chmod 600 ./*.key token
rm -f ./*.srl
echo "make_test_certs: wrote $(pwd)"
