# shellcheck shell=bash
# haproxy-pool3: HAProxy with a backend of the 3 pool servers, balance roundrobin,
# http-reuse always, retries 1, option redispatch, no health checks.
contender haproxy-pool3 needs=pool \
  ratios="haproxy-pool3:haproxy"

start_contender_haproxy_pool3() {  # PORT
  BACKENDS=$(pool_backends) start_haproxy haproxy-pool3 "$1"
  check_pool_spread haproxy-pool3 "$1"
}
