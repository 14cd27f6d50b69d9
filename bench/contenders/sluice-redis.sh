# shellcheck shell=bash
# sluice-redis: sluice-limit-pass with the Redis store instead of the memory store, on the
# bench's redis-server (the same policy, so sluice-redis vs sluice-limit-pass isolates the
# store): the checks of one event-loop turn in one EVALSHA, pipelined.
contender sluice-redis default=100 needs=redis \
  ratios="sluice-redis:sluice-limit-pass sluice-redis:node-redis sluice-redis:nginx"

start_contender_sluice_redis() {  # PORT ADMIN_PORT
  start_sluice_store sluice-redis "$1" "$2" redis "127.0.0.1:$REDIS_PORT"
}
