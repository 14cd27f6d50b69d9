# shellcheck shell=bash
# nginx-limit-pass: nginx limit_req that never rejects, checked on every request.
#
# limit_req keeps "excess" in 1/1000 requests: rate 1e9 r/s is 1e12 units/s and burst 1e9
# is 1e12 units, far above anything reached here, and rate * elapsed ms stays below 2^63
# for a key idle up to ~2.5 h (much larger values pass "nginx -t" but overflow at run
# time). The burst is needed: the leak is applied per elapsed millisecond, so requests
# within one millisecond tick pile up 1000 units each. Rejections are logged at info, below
# error_log's warn, so nginx writes no line per 429 (Sluice's access log is off too).
contender nginx-limit-pass default=70 \
  ratios="nginx-limit-pass:nginx"

start_contender_nginx_limit_pass() {  # PORT
  start_nginx_proxy nginx-limit-pass "$1" \
    'limit_req_zone $binary_remote_addr zone=pass:10m rate=1000000000r/s; limit_req_status 429; limit_req_log_level info;' \
    'limit_req zone=pass burst=1000000000 nodelay;'
}
