# shellcheck shell=bash
# sluice-logged: the same proxy as sluice with its JSON access log written to a file (the
# default config logs).
contender sluice-logged default=40 \
  ratios="sluice-logged:nginx-logged sluice-logged:sluice"

start_contender_sluice_logged() {  # PORT ADMIN_PORT
  mkdir -p "$WORK/sluice-logged"
  start_sluice sluice-logged "$1" "$2" "" "$WORK/sluice-logged/access.log"
}
