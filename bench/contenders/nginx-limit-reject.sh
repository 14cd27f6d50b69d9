# shellcheck shell=bash
# nginx-limit-reject: limit_req rate=100r/s without burst: one request per 10 ms admitted,
# everything else 429.
contender nginx-limit-reject default=90 expect=200,429

start_contender_nginx_limit_reject() {  # PORT
  start_nginx_proxy nginx-limit-reject "$1" \
    'limit_req_zone $binary_remote_addr zone=reject:10m rate=100r/s; limit_req_status 429; limit_req_log_level info;' \
    'limit_req zone=reject;'
}
