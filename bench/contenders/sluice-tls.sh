# shellcheck shell=bash
# sluice-tls: sluice with server.tls (the bench's EC P-256 certificate, tickets on), HTTPS
# keep-alive requests, then new connections per second (full handshakes, resumed ones).
contender sluice-tls tls=1 \
  ratios="sluice-tls:nginx-tls sluice-tls:haproxy-tls"

start_contender_sluice_tls() { start_sluice_tls sluice-tls "$1" "$2"; }  # PORT ADMIN_PORT
