#!/bin/sh
# The certificates and keys the TLS tests use, made with the openssl CLI in DIR:
#   ca.pem/ca.key            the test CA (CN sluice-test-ca)
#   other-ca.pem/.key        a second CA that signed nothing the server trusts
#   server.key               one RSA key for every server certificate below (RSA, so that
#                            the RSA key exchange suites are possible and a refusal says
#                            something about the cipher list, not the key type)
#   a.pem                    CN a.test, SAN DNS:a.test, IP:127.0.0.1
#   b.pem                    CN b.test, SAN DNS:b.test
#   wild.pem                 CN wild, SAN DNS:*.w.test
#   cn-only.pem              CN cn-only.test, no SAN
#   a2.pem                   O=second, CN a.test, SAN DNS:a.test, IP:127.0.0.1 (a renewal)
#   expired.pem              CN expired.test, valid 2020-01-01 to 2020-01-02 (openssl ca)
#   alice.pem/.key           client: CN alice, SAN email:alice@example.test, URI:spiffe://test/alice
#   bob.pem/.key             client: CN bob, SAN email:bob@example.test, URI:spiffe://test/bob
#   mallory.pem/.key         client: CN mallory, signed by other-ca
#   not-pem.txt              a file with no PEM in it
# Usage: make_tls_files.sh DIR
set -e
cd "$1"
eckey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
# sign NAME SUBJECT SAN CA: NAME.pem for the key KEY (NAME.key if it exists, else server.key)
sign() {
    key=server.key
    [ -f "$1.key" ] && key="$1.key"
    openssl req -new -key "$key" -out "$1.csr" -subj "$2"
    : > "$1.ext"
    [ -n "$3" ] && printf 'subjectAltName=%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$4.pem" -CAkey "$4.key" -CAcreateserial -days 3 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
eckey ca.key
eckey other-ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 3 -subj /CN=sluice-test-ca
openssl req -x509 -new -key other-ca.key -out other-ca.pem -days 3 -subj /CN=sluice-other-ca
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key 2>/dev/null
sign a /CN=a.test DNS:a.test,IP:127.0.0.1 ca
sign b /CN=b.test DNS:b.test ca
sign wild /CN=wild DNS:*.w.test ca
sign cn-only /CN=cn-only.test "" ca
sign a2 /O=second/CN=a.test DNS:a.test,IP:127.0.0.1 ca
for c in alice bob mallory; do eckey "$c.key"; done
sign alice /CN=alice email:alice@example.test,URI:spiffe://test/alice ca
sign bob /CN=bob email:bob@example.test,URI:spiffe://test/bob ca
sign mallory /CN=mallory email:mallory@example.test other-ca
# An expired certificate: x509 -days cannot go back in time, openssl ca -startdate can.
mkdir -p ca.db
: > ca.db/index.txt
echo 1000 > ca.db/serial
cat > ca.db/ca.cnf <<CNF
[ca]
default_ca = test
[test]
database = ca.db/index.txt
new_certs_dir = ca.db
serial = ca.db/serial
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
CNF
openssl req -new -key server.key -out expired.csr -subj /CN=expired.test
openssl ca -batch -notext -config ca.db/ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
    -startdate 200101000000Z -enddate 200102000000Z 2>/dev/null
echo "no PEM here" > not-pem.txt
