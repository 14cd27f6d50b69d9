#!/usr/bin/env python3
# Writes fuzz_tls_hello's seeds: real ClientHellos from Python's ssl module (the system's
# OpenSSL) over memory BIOs, no socket. Each is written once per server config the target
# has (its first byte: 0, 1, 2; with 4 added, the bytes come in two reads).
# usage: tests/fuzz/make_tls_hello_seeds.py [DIR]   (default tests/fuzz/corpus/fuzz_tls_hello)
import os, ssl, sys

out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_tls_hello")
os.makedirs(out_dir, exist_ok=True)


def hello(sni, alpn=None, maxv=None, minv=None, ciphers=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn: ctx.set_alpn_protocols(alpn)
    if maxv: ctx.maximum_version = maxv
    if minv: ctx.minimum_version = minv
    if ciphers: ctx.set_ciphers(ciphers)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        s.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


V = ssl.TLSVersion
seeds = {
    "tls13_sni_alpn": hello("a.example", ["http/1.1"]),
    "tls13_wildcard_sni_h2": hello("x.b.example", ["h2", "http/1.1"]),
    "tls13_unknown_sni": hello("other.example", ["http/1.1"]),
    "tls13_no_sni_no_alpn": hello(None),
    "tls12_sni_alpn": hello("a.example", ["http/1.1"], maxv=V.TLSv1_2),
    "tls12_ecdsa_chacha": hello("x.b.example", ["spdy/3", "http/1.1"], maxv=V.TLSv1_2,
                                ciphers="ECDHE-ECDSA-CHACHA20-POLY1305"),
}
for name, data in seeds.items():
    for choice in (0, 1, 2, 4):
        with open(os.path.join(out_dir, f"{name}_{choice}"), "wb") as f:
            f.write(bytes([choice]) + data)
print(f"{len(seeds) * 4} seeds in {out_dir}")
