# shellcheck shell=bash
# sluice-limit-reject: 100 requests per second admitted, everything else answered 429 by
# Sluice itself, without the upstream: the cost of a refusal.
contender sluice-limit-reject default=80 expect=200,429 \
  ratios="sluice-limit-reject:nginx-limit-reject"

start_contender_sluice_limit_reject() {  # PORT ADMIN_PORT
  start_sluice sluice-limit-reject "$1" "$2" "store: { type: memory, memory: { max_keys: 100000 } }
response: { headers: $LIMIT_HEADERS }
policies:
  reject:
    ip:
      - {limit: 100, per: 1s, algorithm: sliding}
routes:
  - {match: {path_prefix: /}, policy: reject}"
}
