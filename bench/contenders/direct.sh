# shellcheck shell=bash
# direct: a baseline, not in the default list: wrk straight at the upstream.
contender direct

start_contender_direct() { add_contender direct "$UP_PID" "$UP_PORT"; }
