# shellcheck shell=bash
# haproxy: HAProxy mode http, one thread, keep-alive, http-reuse always.
contender haproxy default=30

start_contender_haproxy() { start_haproxy haproxy "$1"; }  # PORT
