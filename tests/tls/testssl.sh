#!/usr/bin/env bash
# The TLS listener as a scanner sees it: starts the real gateway with server.tls (a fresh EC
# P-256 certificate, the default TLS settings) on a loopback port and runs testssl.sh
# (Debian's `testssl.sh` package) against it: protocols (-p), every cipher testssl knows,
# by sockets where the local OpenSSL lacks one (-e), renegotiation (-R), TLS compression
# (-C). Fails if any of these is found:
#   - a protocol below TLS 1.2 offered (SSLv2, SSLv3, TLS 1.0, TLS 1.1), or neither 1.2 nor 1.3;
#   - a cipher that is not AEAD (GCM, CCM, ChaCha20-Poly1305) or not forward secret (TLS 1.2
#     suites other than ECDHE/DHE; TLS 1.3's are all both);
#   - client-initiated renegotiation, secure or insecure, or no RFC 5746 support;
#   - TLS compression (CRIME).
# About 30 s on 2 cores.
#   testssl.sh SLUICE_BINARY       env: TESTSSL (testssl), KEEP=1 keeps the temp dir
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 SLUICE_BINARY" >&2
  exit 2
fi
sluice=$1
testssl=${TESTSSL:-testssl}
command -v "$testssl" >/dev/null || { echo "FAIL: $testssl not found (Debian package testssl.sh)"; exit 1; }
command -v openssl >/dev/null || { echo "FAIL: openssl not found"; exit 1; }

work=$(mktemp -d /tmp/sluice-testssl.XXXXXX)
gw=""
cleanup() {
  if [ -n "$gw" ]; then kill -TERM "$gw" 2>/dev/null; wait "$gw" 2>/dev/null; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>"$work/openssl.log" ||
  { cat "$work/openssl.log"; echo "FAIL: cannot make a certificate"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The upstream is a closed port: testssl's one HTTP request gets a 502, which is all it needs.
cat >"$work/sluice.yaml" <<EOF
server:
  listen: "127.0.0.1:0"
  threads: 1
  tls:
    listen: "127.0.0.1:$port"
    certificates: [ { cert_file: "$work/cert.pem", key_file: "$work/key.pem" } ]
admin: { listen: "127.0.0.1:0" }
upstream: { url: "http://127.0.0.1:9" }
log: { level: warn, access: { path: "off" } }
EOF
SLUICE_HASH_SECRET=testssl-only "$sluice" --config "$work/sluice.yaml" 2>"$work/sluice.err" &
gw=$!
for _ in $(seq 100); do
  grep -q "TLS listening on 127.0.0.1:$port" "$work/sluice.err" && break
  kill -0 "$gw" 2>/dev/null || { cat "$work/sluice.err"; echo "FAIL: the gateway exited"; exit 1; }
  sleep 0.1
done
grep -q "TLS listening on 127.0.0.1:$port" "$work/sluice.err" || { cat "$work/sluice.err"; echo "FAIL: no TLS listener"; exit 1; }

start=$(date +%s)
timeout 240 "$testssl" --quiet --warnings off --color 0 --openssl /usr/bin/openssl \
  --connect-timeout 5 --openssl-timeout 5 -p -e -R -C --jsonfile "$work/out.json" "127.0.0.1:$port" >"$work/out.txt" 2>&1
rc=$?
echo "testssl exited $rc after $(($(date +%s) - start))s"
[ -s "$work/out.json" ] || { cat "$work/out.txt"; echo "FAIL: testssl wrote no JSON"; exit 1; }

python3 - "$work/out.json" <<'EOF'
import json, re, sys
findings = json.load(open(sys.argv[1]))
by_id = {f["id"]: f for f in findings}
failures, oks = [], []
def check(ok, what):
    (oks if ok else failures).append(what)

def finding(i):
    return by_id.get(i, {}).get("finding", "")

# Protocols: nothing below TLS 1.2, and 1.2 or 1.3 offered.
for p in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
    check(p in by_id and finding(p).startswith("not offered"), f"{p}: {finding(p) or 'not tested'}")
check(any(finding(p).startswith("offered") for p in ("TLS1_2", "TLS1_3")),
      f"TLS 1.2: {finding('TLS1_2') or 'not tested'}; TLS 1.3: {finding('TLS1_3') or 'not tested'}")

# Ciphers: each one offered, by its IANA name (the last column of testssl's line).
ciphers = [f for f in findings if f["id"].startswith("cipher_x")]
check(bool(ciphers), f"{len(ciphers)} ciphers offered")
aead = re.compile(r"_(GCM|CCM|CCM_8|CHACHA20_POLY1305)(_SHA\d+)?$")
for c in ciphers:
    name = c["finding"].split()[-1]
    tls13 = name.startswith("TLS_") and "_WITH_" not in name
    fs = tls13 or name.startswith(("TLS_ECDHE_", "TLS_DHE_"))
    check(bool(aead.search(name)) and fs, f"cipher {name}: {'AEAD' if aead.search(name) else 'NOT AEAD'}, "
          f"{'forward secret' if fs else 'NOT forward secret'}")

# Renegotiation: none initiated by the client (secure or not); RFC 5746 supported (so a
# client's insecure renegotiation attempt is refused, never half-done).
check(finding("secure_client_renego").startswith("not vulnerable"),
      f"client-initiated renegotiation: {finding('secure_client_renego') or 'not tested'}")
check(finding("secure_renego").startswith("supported"), f"secure renegotiation (RFC 5746): {finding('secure_renego') or 'not tested'}")
# Compression.
check(finding("CRIME_TLS").startswith("not vulnerable"), f"TLS compression (CRIME): {finding('CRIME_TLS') or 'not tested'}")
# Anything testssl itself ranks as a problem among these checks.
for f in findings:
    if f["severity"] in ("MEDIUM", "HIGH", "CRITICAL"):
        check(False, f"testssl {f['severity']}: {f['id']}: {f['finding']}")

for o in oks: print("ok:  ", o)
for x in failures: print("FAIL:", x)
print(f"testssl: {len(oks)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
EOF
status=$?
[ $status = 0 ] || { echo "--- testssl output"; cat "$work/out.txt"; }
exit $status
