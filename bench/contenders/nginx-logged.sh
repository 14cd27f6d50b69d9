# shellcheck shell=bash
# nginx-logged: nginx writing the same JSON fields as Sluice's access log, buffered as nginx
# is usually run for speed (64 KiB, flushed at least every second).
contender nginx-logged default=50 \
  ratios="nginx-logged:nginx"

start_contender_nginx_logged() {  # PORT
  start_nginx_proxy nginx-logged "$1" \
    "log_format sluice_json escape=json '{\"time\":\"\$time_iso8601\",\"peer\":\"\$remote_addr\",\"method\":\"\$request_method\",\"path\":\"\$uri\",\"route\":\"/*\",\"policy\":\"\",\"decision\":\"\",\"id_kind\":\"\",\"id\":\"\",\"status\":\$status,\"bytes_in\":\$request_length,\"bytes_out\":\$body_bytes_sent,\"upstream_us\":\"\$upstream_response_time\",\"total_us\":\"\$request_time\"}';" \
    "access_log $WORK/nginx-logged/access.log sluice_json buffer=64k flush=1s;"
}
