# shellcheck shell=bash
# nginx-pool3: nginx with an upstream block of the 3 pool servers, round robin, keepalive,
# proxy_next_upstream error timeout (its default), max_fails=1 fail_timeout=10s (its defaults).
contender nginx-pool3 needs=pool \
  ratios="nginx-pool3:nginx"

start_contender_nginx_pool3() {  # PORT
  BACKENDS=$(pool_backends) start_nginx_proxy nginx-pool3 "$1"
  check_pool_spread nginx-pool3 "$1"
}
