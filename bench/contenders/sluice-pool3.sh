# shellcheck shell=bash
# sluice-pool3: Sluice in front of the pool of 3 upstreams (the upstream: block with
# servers:), smooth weighted round robin, retries 1, passive ejection after 5 failures for
# 30 s; not in the default list (CONTENDERS="sluice-pool3 nginx-pool3 haproxy-pool3").
contender sluice-pool3 needs=pool \
  ratios="sluice-pool3:nginx-pool3 sluice-pool3:haproxy-pool3"

start_contender_sluice_pool3() {  # PORT ADMIN_PORT
  BACKENDS=$(pool_backends) start_sluice sluice-pool3 "$1" "$2"
  check_pool_spread sluice-pool3 "$1"
}
