# shellcheck shell=bash
# sluice: Sluice as a plain proxy: no routes (no limit), access log off.
contender sluice default=10 \
  ratios="sluice:nginx sluice:haproxy"

start_contender_sluice() { start_sluice sluice "$1" "$2"; }  # PORT ADMIN_PORT
