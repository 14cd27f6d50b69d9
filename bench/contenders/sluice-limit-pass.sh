# shellcheck shell=bash
# sluice-limit-pass: one client (127.0.0.1), so one identifier: a limit far above any rate
# wrk reaches, checked on every request (a fixed and a sliding tier, in one store call),
# memory store. sluice-limit-pass:sluice also prints the limit overhead.
contender sluice-limit-pass default=60 \
  ratios="sluice-limit-pass:nginx-limit-pass sluice-limit-pass:sluice"

start_contender_sluice_limit_pass() {  # PORT ADMIN_PORT
  start_sluice sluice-limit-pass "$1" "$2" "store: { type: memory, memory: { max_keys: 100000 } }
$(pass_policy)"
}
