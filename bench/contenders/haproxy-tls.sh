# shellcheck shell=bash
# haproxy-tls: HAProxy with `bind ... ssl crt`, the same certificate, minimum version and
# TLS 1.2 suites as sluice-tls, ALPN http/1.1; tickets on (its default), its default cache.
contender haproxy-tls tls=1

start_contender_haproxy_tls() { start_haproxy_tls haproxy-tls "$1"; }  # PORT
