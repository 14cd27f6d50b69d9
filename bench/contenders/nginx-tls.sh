# shellcheck shell=bash
# nginx-tls: nginx with `listen ... ssl`, the same certificate, protocols and TLS 1.2 suites
# as sluice-tls, session tickets on, no session cache (ssl_session_cache none).
contender nginx-tls tls=1

start_contender_nginx_tls() { start_nginx_tls nginx-tls "$1"; }  # PORT
