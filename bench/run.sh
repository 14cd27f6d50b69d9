#!/usr/bin/env bash
# Sluice comparative benchmark: Sluice vs nginx vs HAProxy as plain proxies, Sluice vs
# nginx limit_req with a limit that never rejects and one that rejects nearly everything,
# and Sluice's Redis store vs its memory store and vs a Node peer (express +
# rate-limiter-flexible on ioredis + http-proxy) on the same Redis; each with ONE worker
# thread, in front of the same nginx upstream, driven in turn by wrk over loopback.
#
# Usage: bench/run.sh            (as root on Debian 12; see bench/README.md)
#   env: CONTENDERS="sluice nginx haproxy sluice-logged nginx-logged
#                    sluice-limit-pass nginx-limit-pass
#                    sluice-limit-reject nginx-limit-reject sluice-redis sluice-cluster
#                    node-redis"    (the default; also: direct, sluice-tls nginx-tls haproxy-tls)
#        ROUNDS=3  DURATION=4s  WARMUP=2s  CONNECTIONS=64  THREADS=2
#        ORDER=fixed|rotate  PIN=0|1  SLUICE_BIN=build/sluice  LIMIT_HEADERS=ietf
#        RATIOS="sluice:nginx sluice:haproxy sluice-limit-pass:nginx-limit-pass ..."
#        WRK_TIMEOUT=2s  READY_TIMEOUT=10  KEEP_TMP=0
#        REDIS_SERVER=/usr/bin/redis-server  NODE_LIMITERS=2  NODE_AUTOPIPELINE=1
#        HANDSHAKE_TIME=3  S_TIME_PROCS=2   (TLS contenders: sluice-tls nginx-tls haproxy-tls)
#
# Layout: this file is the driver (settings, checks, warm-up, rounds, CPU, the report);
# bench/lib/ holds the helpers (common.sh: processes, ports, waiting; servers.sh: the
# upstream and the nginx/HAProxy/Sluice config writers; redis.sh: the bench's Redis and
# Cluster; registry.sh: contender declarations; summary.py: medians, table, ratios).
#
# Adding a contender: one file bench/contenders/NAME.sh, found by the driver, with
#   contender NAME [expect=200,429] [needs="redis cluster node"] [default=RANK] [ratios="NAME:OTHER ..."]
#   start_contender_NAME() { ... }   (dashes in NAME become underscores)
# The declaration is data: expect (200, the default: every response must be 200 with the
# upstream body; 200,429: a rate-limited contender whose 429s are expected, not errors);
# needs (redis: the bench's redis-server is started before it, $REDIS_PORT, and its CPU and
# commands are measured during its runs; cluster: a 3-primary Redis Cluster, $CLUSTER_NODES;
# node: nodejs + npm installed); default (its place in DEFAULT_CONTENDERS, ascending; none:
# run only when named in CONTENDERS); ratios (pairs added to the default RATIOS). The start
# function gets two free ports ($1 to listen on, $2 spare, e.g. an admin port), starts the
# server as a child of this script (start_sluice, start_nginx_proxy, start_haproxy, or
# start_bg + wait_port) with its config under "$WORK", and registers it with
#   add_contender NAME PID PORT [PATH]
# (the helpers do that). CPU is measured over PID and its direct children (covers nginx
# master + workers). A Sluice on the Redis store (start_sluice_store) also sets
# C_METRICS[NAME]=ADMIN_PORT: its sluice_redis_* counters are read before and after each
# run (commands per socket write = pipelining factor). Everything else (proxy check,
# warm-up, rounds, CPU, medians, table, ratios) is generic.
set -uo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO_ROOT" || exit 1

# shellcheck source=lib/common.sh
source "$SCRIPT_DIR/lib/common.sh" || exit 1
# shellcheck source=lib/servers.sh
source "$SCRIPT_DIR/lib/servers.sh" || exit 1
# shellcheck source=lib/redis.sh
source "$SCRIPT_DIR/lib/redis.sh" || exit 1
# shellcheck source=lib/registry.sh
source "$SCRIPT_DIR/lib/registry.sh" || exit 1
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

load_contenders   # bench/contenders/*.sh -> DEFAULT_CONTENDERS, DEFAULT_RATIOS

CONTENDERS=${CONTENDERS:-$DEFAULT_CONTENDERS}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4s}
WARMUP=${WARMUP:-2s}            # per contender, before round 1; 0 disables
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ORDER=${ORDER:-fixed}           # fixed: same order every round; rotate: shift by one per round
PIN=${PIN:-0}                   # 1: proxy on CPU 0, upstream + wrk on the other CPUs
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
RATIOS=${RATIOS:-$DEFAULT_RATIOS}     # "a:b ...": ratios printed when both ran
LIMIT_HEADERS=${LIMIT_HEADERS:-ietf}  # Sluice limit contenders: response.headers (ietf|legacy|both|none)
WRK_TIMEOUT=${WRK_TIMEOUT:-2s}
READY_TIMEOUT=${READY_TIMEOUT:-10}   # seconds to wait for a server to come up
KEEP_TMP=${KEEP_TMP:-0}
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
NODE_LIMITERS=${NODE_LIMITERS:-2}          # node-redis: 2 = a 1 s and a 60 s limiter (2 EVALSHA/request), 1 = the 1 s one
NODE_AUTOPIPELINE=${NODE_AUTOPIPELINE:-1}  # node-redis: ioredis enableAutoPipelining (1) or not (0)
HANDSHAKE_TIME=${HANDSHAKE_TIME:-3}        # TLS contenders: seconds of each openssl s_time row (-new, -reuse)
S_TIME_PROCS=${S_TIME_PROCS:-2}            # TLS contenders: s_time clients at once
NODE_PEER_DIR="$SCRIPT_DIR/node-peer"
RESULTS_DIR="$SCRIPT_DIR/results"

# ---------------------------------------------------------------- measuring
# New TLS connections per second: S_TIME_PROCS openssl s_time clients at once, each making
# connections one after another for HANDSHAKE_TIME seconds, each connection a handshake and
# one request (GET / HTTP/1.0, read to the close). -new: every handshake full; -reuse: every
# one after a client's first resumes that first session (s_time prints "r" for a resumed
# connection, "*" for a full one: both are counted).
# run_s_time NAME new|reuse -> sets HS_CONNS HS_PER_SEC HS_CPU_US HS_RESUMED_PCT
run_s_time() {
  local name=$1 mode=$2 pid=${C_PID[$1]} t0 t1 w0 w1 i pids=() out total=0 r=0 f=0
  t0=$(cpu_ticks "$pid"); w0=$(date +%s%N)
  pin_prefix other
  for ((i = 0; i < S_TIME_PROCS; i++)); do
    out="$WORK/s_time-$name-$mode-$i.txt"
    "${PIN_CMD[@]}" timeout $((HANDSHAKE_TIME + 10)) openssl s_time -connect "127.0.0.1:${C_PORT[$name]}" \
      "-$mode" -www / -time "$HANDSHAKE_TIME" >"$out" 2>&1 </dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  w1=$(date +%s%N); t1=$(cpu_ticks "$pid")
  kill -0 "$pid" 2>/dev/null || { show_log "$name"; die "$name died during s_time"; }
  for ((i = 0; i < S_TIME_PROCS; i++)); do
    out="$WORK/s_time-$name-$mode-$i.txt"
    local n; n=$(awk '/connections in .* real seconds/ { n = $1 } END { print n + 0 }' "$out")
    [ "$n" -gt 0 ] || { cat "$out" >&2; die "openssl s_time -$mode made no connection to $name"; }
    total=$((total + n))
    if [ "$mode" = reuse ]; then   # the marks after "starting": one per timed connection
      r=$((r + $(sed -n '/^starting/,$p' "$out" | tr -cd 'r' | wc -c)))
      f=$((f + $(sed -n '/^starting/,$p' "$out" | tr -cd '*' | wc -c)))
    fi
  done
  HS_CONNS=$total
  HS_PER_SEC=$(awk -v n="$total" -v ns=$((w1 - w0)) 'BEGIN { printf "%.1f", n / (ns / 1e9) }')
  HS_CPU_US=$(awk -v t=$((t1 - t0)) -v c="$(getconf CLK_TCK)" -v n="$total" 'BEGIN { printf "%.1f", t / c * 1e6 / n }')
  HS_RESUMED_PCT=-
  [ "$mode" = reuse ] && HS_RESUMED_PCT=$(awk -v r="$r" -v f="$f" 'BEGIN { printf "%.1f", (r + f) ? 100 * r / (r + f) : 0 }')
  return 0
}

check_proxies() {  # pass contenders: 200 + the upstream body; reject contenders: 200 + body, then 429
  local name got status body counts others url n200 n429 nother
  for name in "${CONTENDER_LIST[@]}"; do
    url=$(contender_url "$name")
    if is_tls "$name"; then say "check: $name negotiates $(tls_session_info "${C_PORT[$name]}") (openssl s_client, defaults)"; fi
    if expects_429 "$name"; then
      got=$(http_burst "$url" 500)   # Sluice admits 100, nginx 1 in 10 ms: then 429
      counts=${got%%$'\t'*}; got=${got#*$'\t'}; body=${got%%$'\t'*}; others=${got#*$'\t'}
      read -r n200 n429 nother <<<"$counts"
      if [ "$n200" -lt 1 ] || [ "$body" != "$UPSTREAM_BODY" ] || [ "$n429" != 1 ] || [ "$nother" != 0 ]; then
        show_log "$name"
        die "$name: expected 200 '$UPSTREAM_BODY' then 429; got $n200 x 200 (body '$body'), $n429 x 429, $nother other ($others)"
      fi
      say "check: $name on 127.0.0.1:${C_PORT[$name]} -> $n200 x 200 '$body', then 429"
    else
      got=$(http_get "$url")
      status=${got%%$'\t'*}; body=${got#*$'\t'}
      if [ "$status" != 200 ] || [ "$body" != "$UPSTREAM_BODY" ]; then
        show_log "$name"; die "$name does not proxy: got status $status body '$body'"
      fi
      say "check: $name on 127.0.0.1:${C_PORT[$name]} -> $status '$body'"
    fi
  done
}

summarize() {  # summarize TSV STATUS_FILE -> table of medians, status mix, ratios, limit overhead, Redis store
  local name expects=()
  for name in "${CONTENDER_LIST[@]}"; do expects+=("$name=${C_EXPECT[$name]}"); done
  python3 "$SCRIPT_DIR/lib/summary.py" "$1" "$RATIOS" "${CONTENDER_LIST[*]}" "${expects[*]}" "$2" "$(getconf CLK_TCK)"
}

# ---------------------------------------------------------------- main
main() {
  local name
  for name in $CONTENDERS; do
    known_contender "$name" || die "unknown contender '$name' (no $SCRIPT_DIR/contenders/$name.sh)"
  done
  bench_setup
  local tsv="$WORK/runs.tsv"
  printf '#round\tproxy\trps\tp50_ms\tp99_ms\trequests\tnon2xx\tsockerr\tcpu_ticks\tcpu_us_per_req\tredis_ticks\tredis_cmds\tsluice_redis_cmds\tsluice_redis_writes\tsluice_redis_errors\ttls_new_per_s\ttls_new_cpu_us\ttls_reuse_per_s\ttls_reuse_cpu_us\ttls_resumed_pct\n' >"$tsv"

  local clk; clk=$(getconf CLK_TCK)
  say "Sluice benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "command: $0 $*"
  say "env: CONTENDERS=\"$CONTENDERS\" ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS ORDER=$ORDER PIN=$PIN LIMIT_HEADERS=$LIMIT_HEADERS"
  say "machine: nproc=$(nproc) kernel=$(uname -r) cpu=\"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\""
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  say "load average at start: $load$(awk '$1 > 0.5 { printf "  (WARNING: machine busy, results will be noisy)" }' /proc/loadavg)"
  say "versions: $(nginx -v 2>&1 | sed 's/.*version: //'), $(haproxy -v 2>/dev/null | head -n1 | awk '{print "haproxy/"$3}'), $(wrk -v 2>&1 | head -n1 | awk '{print $1"/"$2}')$(
    any_needs node && echo ", node/$(node -v 2>/dev/null | tr -d v)")"

  # ports: upstream + one or two per contender
  local names ports
  read -ra names <<<"$CONTENDERS"
  read -ra ports <<<"$(free_ports $((1 + 2 * ${#names[@]})))"
  ((${#ports[@]} == 1 + 2 * ${#names[@]})) || die "could not find free ports"
  UP_PORT=${ports[0]}
  if any_tls; then make_tls_cert; say "TLS: EC P-256 self-signed certificate, s_time: $S_TIME_PROCS clients x ${HANDSHAKE_TIME}s per row, $(openssl version)"; fi
  start_upstream
  say "upstream: nginx on 127.0.0.1:$UP_PORT (1 worker, fixed body)"

  local i=1
  for name in "${names[@]}"; do
    needs "$name" redis && need_redis "$name"
    needs "$name" cluster && need_cluster "$name"
    needs "$name" pool && need_pool
    "start_contender_${name//-/_}" "${ports[$i]}" "${ports[$((i + 1))]}"
    i=$((i + 2))
  done
  check_proxies

  local status_file="$WORK/status.txt"; : >"$status_file"
  if [ "$WARMUP" != 0 ]; then
    printf '%s\n' "$STATUS_LUA" >"$WORK/status.lua"
    for name in "${CONTENDER_LIST[@]}"; do
      log "warm-up $name ($WARMUP, counting statuses)"
      run_wrk "$name" "$WARMUP" "$WORK/warmup-$name.txt" -s "$WORK/status.lua"
      awk -v n="$name" '$1 == "status" { print n, $2, $3 }' "$WORK/warmup-$name.txt" >>"$status_file"
      grep -q "^$name " "$status_file" || { cat "$WORK/warmup-$name.txt" >&2; die "warm-up of $name counted no responses"; }
    done
  fi

  local r n=${#CONTENDER_LIST[@]} k ticks rps p50 p99 req non sock cpu out
  local rt0 rt1 rc0 rc1 m0 m1 rticks rcmds scmds swrites serrs extra
  say ""
  say "per run: round proxy req/s p50ms p99ms requests non2xx sockerr cpu_us/req [redis-server: CPU us/req, commands/req; sluice: commands/write, errors]"
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
      if [ "$ORDER" = rotate ]; then name=${CONTENDER_LIST[$(((k + r - 1) % n))]}; else name=${CONTENDER_LIST[$k]}; fi
      out="$WORK/run-$r-$name.txt"
      log "round $r/$ROUNDS: $name ($DURATION, $CONNECTIONS conns, $THREADS threads)"
      rticks=- rcmds=- scmds=- swrites=- serrs=- extra="" tls_cols="-\t-\t-\t-\t-"
      # outside the contender's CPU window: Sluice's counters, then redis-server's commands and CPU
      if [ -n "${C_METRICS[$name]:-}" ]; then read -ra m0 <<<"$(sluice_redis_metrics "${C_METRICS[$name]}")"; fi
      if [ -n "${C_REDIS[$name]:-}" ]; then rc0=$(redis_commands "${C_REDIS[$name]}"); rt0=$(redis_cpu_ticks "${C_REDIS[$name]}"); fi
      run_wrk "$name" "$DURATION" "$out"; ticks=$CPU_TICKS
      if [ -n "${C_REDIS[$name]:-}" ]; then
        rt1=$(redis_cpu_ticks "${C_REDIS[$name]}"); rc1=$(redis_commands "${C_REDIS[$name]}")
        local nodes=(${C_REDIS[$name]})
        rticks=$((rt1 - rt0)); rcmds=$((rc1 - rc0 - ${#nodes[@]}))   # minus the first INFO on each node
      fi
      if [ -n "${C_METRICS[$name]:-}" ]; then
        read -ra m1 <<<"$(sluice_redis_metrics "${C_METRICS[$name]}")"
        [ "${m0[0]}" -ge 0 ] && [ "${m1[0]}" -ge 0 ] && [ "${m1[1]}" -ge 0 ] ||
          die "$name: sluice_redis_* counters not found on http://127.0.0.1:${C_METRICS[$name]}/metrics"
        scmds=$((m1[0] - m0[0])); swrites=$((m1[1] - m0[1])); serrs=$((m1[2] - m0[2] + m1[3] - m0[3]))
      fi
      if is_tls "$name"; then   # new connections: full handshakes, then resumed ones
        log "round $r/$ROUNDS: $name new TLS connections (${HANDSHAKE_TIME}s -new, ${HANDSHAKE_TIME}s -reuse, $S_TIME_PROCS clients)"
        run_s_time "$name" new; local new_ps=$HS_PER_SEC new_cpu=$HS_CPU_US
        run_s_time "$name" reuse
        tls_cols="$new_ps\t$new_cpu\t$HS_PER_SEC\t$HS_CPU_US\t$HS_RESUMED_PCT"
        extra+="  TLS new conns/s: full $new_ps ($new_cpu us CPU each), resumed $HS_PER_SEC ($HS_CPU_US us; $HS_RESUMED_PCT% resumed)"
      fi
      read -r rps p50 p99 req non sock <<<"$(parse_wrk "$out")"
      [ "$req" -gt 0 ] || { cat "$out" >&2; die "wrk completed no requests against $name"; }
      cpu=$(awk -v t="$ticks" -v c="$clk" -v q="$req" 'BEGIN { printf "%.3f", t / c * 1e6 / q }')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%b\n' "$r" "$name" "$rps" "$p50" "$p99" "$req" "$non" "$sock" "$ticks" "$cpu" \
        "$rticks" "$rcmds" "$scmds" "$swrites" "$serrs" "$tls_cols" >>"$tsv"
      [ "$rticks" != - ] && extra+=$(awk -v t="$rticks" -v c="$clk" -v q="$req" -v k="$rcmds" \
        'BEGIN { printf "  redis-server %.2f us/req %.2f cmds/req", t / c * 1e6 / q, k / q }')
      [ "$swrites" != - ] && extra+=$(awk -v a="$scmds" -v w="$swrites" -v e="$serrs" \
        'BEGIN { printf "  sluice %.1f cmds/write %d errors", (w > 0 ? a / w : 0), e }')
      say "$(printf '  %d %-19s %10.0f %8.3f %8.3f %10d %6d %6d %8.2f' "$r" "$name" "$rps" "$p50" "$p99" "$req" "$non" "$sock" "$cpu")$extra"
    done
  done

  say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  say ""
  say "medians over $ROUNDS round(s), $DURATION each, $CONNECTIONS connections, $THREADS wrk threads, 1 proxy worker thread:"
  local table; table=$(summarize "$tsv" "$status_file") || die "summary failed"
  say "$table"

  mkdir -p "$RESULTS_DIR"
  cp "$REPORT" "$RESULTS_DIR/latest.txt.tmp" && mv "$RESULTS_DIR/latest.txt.tmp" "$RESULTS_DIR/latest.txt"
  cp "$tsv" "$RESULTS_DIR/latest.tsv"
  log "written: $RESULTS_DIR/latest.txt (raw runs: latest.tsv)"
}

main "$@"
