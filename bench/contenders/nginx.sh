# shellcheck shell=bash
# nginx: nginx proxy_pass with upstream keepalive, access log off.
contender nginx default=20

start_contender_nginx() { start_nginx_proxy nginx "$1"; }  # PORT
