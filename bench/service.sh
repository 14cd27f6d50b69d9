#!/usr/bin/env bash
# Sluice as a rate-limit service: decisions per second and CPU per decision of one Sluice
# (1 worker) asked three ways, in one run, rounds interleaved:
#   gateway  wrk through the proxy listener (a route + policy) to the bench's nginx upstream
#   check    wrk against the HTTP check, GET /check on service.http_listen, the original
#            request described by X-Original-URI / X-Original-Method / X-Forwarded-For
#   grpc     h2load POSTing one framed RateLimitRequest (Envoy RLS v3, ShouldRateLimit) on
#            service.grpc_listen
#   grpc2    (not in the default PATHS) the same with two descriptors per call, remote_address
#            and path: two identifiers decided and committed together (one store request)
# Every path decides one identifier (the client 127.0.0.1) against a fixed and a sliding tier
# far above any rate reached, so every request is an admitted decision that commits. The rates
# are of decisions Sluice counted itself (its metrics before and after each run), the CPU that
# of the Sluice process (all its threads: the worker, gRPC's, the admin's) over the same run.
#
# Usage: bench/service.sh        (as root on Debian 12; see bench/README.md, "Rate-limit service")
#   env: STORES="memory redis"  PATHS="gateway check grpc"  ROUNDS=5  DURATION=4s  WARMUP=2s
#        CONNECTIONS=64 THREADS=2 (wrk)  H2_CONNECTIONS=4 H2_STREAMS=16 (h2load: 64 calls in flight)
#        PERF=0|1 (perf record -g over one more, uncounted, gRPC run per store)
#        SLUICE_BIN=build/sluice  READY_TIMEOUT=10  KEEP_TMP=0  REDIS_SERVER=/usr/bin/redis-server
# Output: stdout and bench/results/service.txt (raw rows: service.tsv; PERF=1: service-perf.txt).
set -uo pipefail

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

STORES=${STORES:-memory redis}
PATHS=${PATHS:-gateway check grpc}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
H2_CONNECTIONS=${H2_CONNECTIONS:-4}
H2_STREAMS=${H2_STREAMS:-16}
PERF=${PERF:-0}
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
READY_TIMEOUT=${READY_TIMEOUT:-10}
KEEP_TMP=${KEEP_TMP:-0}
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
WRK_TIMEOUT=${WRK_TIMEOUT:-2s}
# shellcheck disable=SC2034  # read by bench/lib: no pinning, pass_policy's fields, no run.sh contenders
PIN=0 LIMIT_HEADERS=ietf CONTENDERS=""
RESULTS_DIR="$SCRIPT_DIR/results"
RLS_PATH=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
CHECK_HEADERS=(-H "X-Original-URI: /" -H "X-Original-Method: GET" -H "X-Forwarded-For: 127.0.0.1")

declare -A S_PID S_ADMIN S_PROXY S_CHECK S_GRPC   # per store: Sluice's PID and its ports

need_tools() {  # what this script needs beyond run.sh's packages: h2load/nghttp, protoc, redis
  local missing=()
  command -v h2load >/dev/null 2>&1 || missing+=(nghttp2-client)
  command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
  if [[ " $STORES " == *" redis "* ]]; then
    [ -x "$REDIS_SERVER" ] || missing+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  fi
  [ "$PERF" = 1 ] && ! command -v perf >/dev/null 2>&1 && missing+=(linux-perf)
  ((${#missing[@]})) || return 0
  log "installing: ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d made_policy=0 rc
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  rc=$?
  [ $made_policy = 1 ] && rm -f "$policy"
  [ $rc = 0 ] || die "apt-get install ${missing[*]} failed"
}

# The gRPC calls' bodies: a RateLimitRequest (domain bench; grpc: one descriptor,
# remote_address = 127.0.0.1; grpc2: that one and path = /, two identifiers decided together)
# encoded by protoc from text, behind gRPC's 5-byte frame header (not compressed, the length
# big-endian)
make_rls_body() {  # make_rls_body NAME TEXT -> $WORK/NAME.body
  printf '%s\n' "$2" |
    protoc --encode=envoy.service.ratelimit.v3.RateLimitRequest -I proto envoy/service/ratelimit/v3/rls.proto \
      >"$WORK/$1.msg" || die "protoc --encode failed"
  python3 - "$WORK/$1.msg" "$WORK/$1.body" <<'EOF'
import struct, sys
m = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(b"\x00" + struct.pack(">I", len(m)) + m)
EOF
}
RLS_ONE='descriptors { entries { key: "remote_address" value: "127.0.0.1" } }'
RLS_TWO='descriptors { entries { key: "path" value: "/" } }'
make_rls_bodies() {
  make_rls_body grpc "domain: \"bench\" $RLS_ONE"
  make_rls_body grpc2 "domain: \"bench\" $RLS_ONE $RLS_TWO"
}

# start_service_sluice STORE: one Sluice, 1 worker, with the proxy, the check and the gRPC
# service each on a port the kernel chose (read back from its log), the pass policy of
# bench/run.sh's sluice-limit-pass on the route / and the same two tiers on the descriptor
# remote_address of domain bench
start_service_sluice() {
  local store=$1 name="sluice-$1" conf="$WORK/sluice-$1.yaml" store_yaml
  if [ "$store" = redis ]; then
    need_redis "$name"
    store_yaml="store:
  type: redis
  redis: { nodes: [\"127.0.0.1:$REDIS_PORT\"], timeout: 50ms }
  on_error: allow"
  else
    store_yaml="store: { type: memory, memory: { max_keys: 100000 } }"
  fi
  ensure_sluice
  cat >"$conf" <<EOF
server: { listen: "127.0.0.1:0", threads: 1, max_connections: 10000 }
admin:  { listen: "127.0.0.1:0" }
$(sluice_upstream)
log: { level: warn, access: { path: "off" } }
$store_yaml
$(pass_policy)
service:
  http_listen: "127.0.0.1:0"
  grpc_listen: "127.0.0.1:0"
  domains:
    bench:
      descriptors:
        - key: remote_address
          tiers:
            - {limit: 1000000000, per: 1s, algorithm: fixed}
            - {limit: 1000000000, per: 1m, algorithm: sliding}
        - key: path
          tiers:
            - {limit: 1000000000, per: 1s, algorithm: fixed}
            - {limit: 1000000000, per: 1m, algorithm: sliding}
EOF
  "$SLUICE_BIN" --check --config "$conf" >/dev/null || die "$name: sluice config check failed ($conf)"
  SLUICE_HASH_SECRET=$HASH_SECRET start_bg "$name" proxy -- "$SLUICE_BIN" --config "$conf"
  local err="$WORK/$name.err.log"
  wait_log_line "$err" "rate-limit service (gRPC) listening on" "$BG_PID" "$name"
  S_PID[$store]=$BG_PID
  S_ADMIN[$store]=$(sed -n 's/.*admin listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$err" | head -n1)
  S_PROXY[$store]=$(sed -n 's/.*proxy listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$err" | head -n1)
  S_CHECK[$store]=$(sed -n 's/.*check listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$err" | head -n1)
  S_GRPC[$store]=$(sed -n 's/.*rate-limit service (gRPC) listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$err" | head -n1)
  [ -n "${S_ADMIN[$store]}" ] && [ -n "${S_PROXY[$store]}" ] && [ -n "${S_CHECK[$store]}" ] && [ -n "${S_GRPC[$store]}" ] ||
    { show_log "$name"; die "$name: could not read its ports from $err"; }
  local i got=""
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    got=$(http_get "http://127.0.0.1:${S_ADMIN[$store]}/readyz"); [ "${got%%$'\t'*}" = 200 ] && break
    sleep 0.1
  done
  [ "${got%%$'\t'*}" = 200 ] || { show_log "$name"; die "$name: /readyz not 200 within ${READY_TIMEOUT}s (last: $got)"; }
  say "$name: store $store, proxy 127.0.0.1:${S_PROXY[$store]}, check :${S_CHECK[$store]}, gRPC :${S_GRPC[$store]}, admin :${S_ADMIN[$store]}"
}

# service_metrics ADMIN_PORT -> "proxy_allowed proxy_other check_allowed check_other rls_ok
# rls_other redis_commands redis_writes redis_errors rls_cancelled" (*_other: any decision or
# call that is not an admission: limited, shadow_limited, or an RLS call ended with another
# code than ok or cancelled)
service_metrics() {
  python3 - "$1" <<'EOF'
import re, sys, urllib.request
v = dict.fromkeys(["proxy_allowed", "proxy_other", "check_allowed", "check_other", "rls_ok", "rls_other",
                   "redis_cmds", "redis_writes", "redis_errors", "rls_cancelled"], 0)
seen = set()
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5) as r:
    for line in r.read().decode().splitlines():
        if line.startswith("#") or not line.strip(): continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0]; n = int(float(value))
        labels = dict(re.findall(r'(\w+)="([^"]*)"', name_labels))
        if name == "sluice_rate_limit_decisions_total":
            key = labels.get("listener", "proxy")
            v[key + ("_allowed" if labels.get("result") == "allowed" else "_other")] += n
        elif name == "sluice_rls_calls_total":
            seen.add(name); code = labels.get("code")
            v["rls_ok" if code == "ok" else "rls_cancelled" if code == "cancelled" else "rls_other"] += n
        elif name == "sluice_redis_commands_total": v["redis_cmds"] += n
        elif name == "sluice_redis_writes_total": v["redis_writes"] += n
        elif name in ("sluice_redis_errors_total", "sluice_redis_timeouts_total", "sluice_store_errors_total"):
            v["redis_errors"] += n
if "sluice_rls_calls_total" not in seen: sys.exit("no sluice_rls_calls_total in /metrics")
print(" ".join(str(x) for x in v.values()))
EOF
}

# grpc_call_once STORE BODY -> "GRPC_STATUS OVERALL_CODE STATUSES" of two calls (nghttp): the
# first's trailers, the second's answer decoded
grpc_call_once() {
  local out="$WORK/grpc-once-$1-$2"
  nghttp -v -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/$2.body" \
    "http://127.0.0.1:${S_GRPC[$1]}$RLS_PATH" >"$out.txt" 2>&1 || true
  nghttp -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/$2.body" \
    "http://127.0.0.1:${S_GRPC[$1]}$RLS_PATH" >"$out.bin" 2>/dev/null || true
  local status code
  status=$(grep -a -o 'grpc-status: [0-9]*' "$out.txt" | head -n1 | awk '{print $2}')
  code=$(tail -c +6 "$out.bin" | protoc --decode=envoy.service.ratelimit.v3.RateLimitResponse \
    -I proto envoy/service/ratelimit/v3/rls.proto 2>/dev/null |
    awk '/^overall_code:/ { c = $2 } /^statuses \{/ { n++ } /^  code: OK/ { ok++ } END { print c, n + 0, ok + 0 }')
  echo "${status:-none} ${code:-none}"
}

# check_paths STORE: each path answers one request as an admission, and Sluice counts it as
# one (a gRPC call: grpc-status 0, overall_code OK, sluice_rls_calls_total{code="ok"} + 2)
check_paths() {
  local store=$1 name="sluice-$1" m0 m1 got
  read -ra m0 <<<"$(service_metrics "${S_ADMIN[$store]}")" || die "$name: no metrics"
  got=$(http_get "http://127.0.0.1:${S_PROXY[$store]}/")
  [ "$got" = "200"$'\t'"$UPSTREAM_BODY" ] || { show_log "$name"; die "$name: the gateway answered '$got'"; }
  got=$(python3 - "${S_CHECK[$store]}" <<'EOF'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/check", headers={"X-Original-URI": "/", "X-Original-Method": "GET", "X-Forwarded-For": "127.0.0.1"})
print(c.getresponse().status)
EOF
)
  [ "$got" = 200 ] || { show_log "$name"; die "$name: /check answered $got"; }
  got=$(grpc_call_once "$store" grpc)
  [ "$got" = "0 OK 1 1" ] || { show_log "$name"; die "$name: ShouldRateLimit: grpc-status, overall_code, statuses, OK statuses '$got', not '0 OK 1 1'"; }
  got=$(grpc_call_once "$store" grpc2)
  [ "$got" = "0 OK 2 2" ] || { show_log "$name"; die "$name: ShouldRateLimit, two descriptors: '$got', not '0 OK 2 2'"; }
  read -ra m1 <<<"$(service_metrics "${S_ADMIN[$store]}")" || die "$name: no metrics"
  [ $((m1[0] - m0[0])) = 1 ] && [ $((m1[2] - m0[2])) = 1 ] && [ $((m1[4] - m0[4])) = 4 ] &&
    [ "${m1[1]}" = 0 ] && [ "${m1[3]}" = 0 ] && [ "${m1[5]}" = 0 ] && [ "${m1[8]}" = 0 ] && [ "${m1[9]}" = 0 ] ||
    die "$name: metrics did not count one admission per path (before: ${m0[*]}; after: ${m1[*]})"
  say "check: $name: gateway 200 '$UPSTREAM_BODY', /check 200, ShouldRateLimit grpc-status 0 overall_code OK (one descriptor, two: both OK); each counted as an admission"
}

# run_path STORE PATH DURATION OUT: one run; sets RUN_OK RUN_ERR RUN_MEAN_MS (the client's
# successes, errors, mean latency), CPU_TICKS (Sluice's, all threads) and WALL_NS
run_path() {
  local store=$1 path=$2 dur=$3 out=$4 pid=${S_PID[$1]} t0 t1 w0 w1
  t0=$(cpu_ticks "$pid"); w0=$(date +%s%N)
  case $path in
    gateway) wrk --latency -t "$THREADS" -c "$CONNECTIONS" -d "$dur" --timeout "$WRK_TIMEOUT" \
               "http://127.0.0.1:${S_PROXY[$store]}/" >"$out" 2>&1 </dev/null & ;;
    check) wrk --latency -t "$THREADS" -c "$CONNECTIONS" -d "$dur" --timeout "$WRK_TIMEOUT" "${CHECK_HEADERS[@]}" \
             "http://127.0.0.1:${S_CHECK[$store]}/check" >"$out" 2>&1 </dev/null & ;;
    grpc | grpc2) h2load -t "$THREADS" -c "$H2_CONNECTIONS" -m "$H2_STREAMS" -D "$dur" -d "$WORK/$path.body" \
            -H 'content-type: application/grpc' -H 'te: trailers' \
            "http://127.0.0.1:${S_GRPC[$store]}$RLS_PATH" >"$out" 2>&1 </dev/null & ;;
  esac
  WRK_PID=$!
  wait "$WRK_PID"
  WRK_PID=""
  w1=$(date +%s%N); t1=$(cpu_ticks "$pid")
  kill -0 "$pid" 2>/dev/null || { show_log "sluice-$store"; die "sluice-$store died during the run"; }
  CPU_TICKS=$((t1 - t0)) WALL_NS=$((w1 - w0))
  local res
  if [ "$path" != gateway ] && [ "$path" != check ]; then
    # "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout";
    # "time for request: min max mean sd +/-sd"
    res=$(awk '
      function ms(v,  n, u) { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") return n / 1000; if (u == "ms") return n; if (u == "s") return n * 1000; return n }
      /^requests:/ { ok = $8; err = $10 + $12 + $14 }
      /^time for request:/ { mean = ms($6) }
      END { printf "%d %d %.3f\n", ok, err, mean }' "$out")
  else
    local req non sock avg
    read -r _ _ _ req non sock <<<"$(parse_wrk "$out")"
    avg=$(awk '
      function ms(v,  n, u) { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") return n / 1000; if (u == "ms") return n; if (u == "s") return n * 1000; return n }
      /^ *Latency / && !done { print ms($2); done = 1 }' "$out")
    res="$((req - non)) $((non + sock)) ${avg:-0}"
  fi
  read -r RUN_OK RUN_ERR RUN_MEAN_MS <<<"$res"
}

summarize() {  # summarize TSV -> medians per (store, path), per-round ratios
  python3 - "$1" "$(getconf CLK_TCK)" <<'EOF'
import csv, statistics as st, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")]
med = st.median
keys = []
for r in rows:
    k = (r["store"], r["path"])
    if k not in keys: keys.append(k)
def col(k, c): return [float(r[c]) for r in rows if (r["store"], r["path"]) == k and r[c] != "-"]
print(f"{'store':<7} {'path':<8} {'decisions/s':>12} {'CPU us/dec':>11} {'mean ms':>8} {'redis us/dec':>13} {'redis cmds/dec':>15} {'sluice cmds/dec':>16} {'errors':>7} {'cancelled':>9}   decisions/s per round")
for k in keys:
    rate = col(k, "decisions_per_s"); cpu = col(k, "cpu_us_per_decision"); lat = col(k, "mean_ms")
    rcpu = col(k, "redis_us_per_decision"); rcmd = col(k, "redis_cmds_per_decision"); scmd = col(k, "sluice_cmds_per_decision")
    errs = sum(int(float(x)) for x in col(k, "errors")); canc = sum(int(float(x)) for x in col(k, "cancelled_at_end"))
    print(f"{k[0]:<7} {k[1]:<8} {med(rate):>12.0f} {med(cpu):>11.2f} {med(lat):>8.3f} "
          f"{(f'{med(rcpu):.2f}' if rcpu else '-'):>13} {(f'{med(rcmd):.3f}' if rcmd else '-'):>15} {(f'{med(scmd):.3f}' if scmd else '-'):>16} {errs:>7} {canc:>9}   "
          + " ".join(f"{x:.0f}" for x in rate))
# Ratios of two rows of the same round (the machine's drift hits both alike), median over rounds.
def ratio(a, b, c):
    by = {}
    for r in rows:
        by.setdefault(r["round"], {})[(r["store"], r["path"])] = float(r[c])
    xs = [v[a] / v[b] for v in by.values() if a in v and b in v and v[b] > 0]
    return xs
print()
print("ratios (median over rounds of the same round's ratio; per round in brackets):")
stores = []
for s, _ in keys:
    if s not in stores: stores.append(s)
pairs = []
for s in stores:
    for p in ("check", "grpc"):
        if (s, p) in keys and (s, "gateway") in keys: pairs.append(((s, p), (s, "gateway")))
    if (s, "grpc") in keys and (s, "check") in keys: pairs.append(((s, "grpc"), (s, "check")))
    if (s, "grpc2") in keys and (s, "grpc") in keys: pairs.append(((s, "grpc2"), (s, "grpc")))
if "memory" in stores:
    for s in stores:
        if s == "memory": continue
        for p in ("gateway", "check", "grpc", "grpc2"):
            if (s, p) in keys and ("memory", p) in keys: pairs.append(((s, p), ("memory", p)))
for a, b in pairs:
    rr = ratio(a, b, "decisions_per_s"); cr = ratio(a, b, "cpu_us_per_decision")
    if not rr: continue
    print(f"  {a[0]}/{a[1]} : {b[0]}/{b[1]}  decisions/s {med(rr):.2f} [{' '.join(f'{x:.2f}' for x in rr)}]"
          f"  CPU/decision {med(cr):.2f} [{' '.join(f'{x:.2f}' for x in cr)}]")
EOF
}

# perf_grpc STORE: perf record -g of Sluice over one uncounted gRPC run; where the time goes,
# by thread and by symbol
perf_grpc() {
  local store=$1 pid=${S_PID[$1]} data="$WORK/perf-$1.data" secs=${DURATION%s}
  log "perf: sluice-$store, one gRPC run of $DURATION"
  perf record -g -F 999 -p "$pid" -o "$data" -- sleep "$secs" >"$WORK/perf-$store.log" 2>&1 &
  local perf_pid=$!
  STARTED_PIDS+=("$perf_pid")
  run_path "$store" grpc "$DURATION" "$WORK/perf-run-$store.txt"
  wait "$perf_pid"
  stop_pids "$perf_pid"
  {
    echo "== sluice-$store, gRPC (h2load -c $H2_CONNECTIONS -m $H2_STREAMS), perf record -g -F 999 -p PID over ${DURATION}"
    echo "-- by thread (comm)"
    perf report -i "$data" --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 15
    echo "-- by thread and shared object"
    perf report -i "$data" --no-children --sort comm,dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | grep '%' | head -n 25
    echo "-- top symbols (self)"
    perf report -i "$data" --no-children --sort comm,sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | grep '%' | head -n 40
  } >>"$WORK/perf.txt"
}

main() {
  local s p
  for s in $STORES; do [[ $s == memory || $s == redis ]] || die "unknown store '$s' (memory, redis)"; done
  for p in $PATHS; do [[ $p == gateway || $p == check || $p == grpc || $p == grpc2 ]] || die "unknown path '$p' (gateway, check, grpc, grpc2)"; done
  bench_setup
  need_tools
  make_rls_bodies
  local clk; clk=$(getconf CLK_TCK)
  say "Sluice rate-limit service benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')  at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  say "env: STORES=\"$STORES\" PATHS=\"$PATHS\" ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS H2_CONNECTIONS=$H2_CONNECTIONS H2_STREAMS=$H2_STREAMS"
  say "machine: nproc=$(nproc) kernel=$(uname -r) cpu=\"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\""
  say "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)$(awk '$1 > 0.5 { printf "  (WARNING: machine busy, results will be noisy)" }' /proc/loadavg)"
  say "versions: $(nginx -v 2>&1 | sed 's/.*version: //'), $(wrk -v 2>&1 | head -n1 | awk '{print $1"/"$2}'), $(h2load --version 2>&1 | head -n1 | awk '{print "h2load/"$NF}')"

  read -r UP_PORT <<<"$(free_ports 1)"
  start_upstream
  say "upstream: nginx on 127.0.0.1:$UP_PORT (1 worker, fixed body)"
  for s in $STORES; do start_service_sluice "$s"; check_paths "$s"; done

  local names=() k
  for s in $STORES; do for p in $PATHS; do names+=("$s/$p"); done; done
  if [ "$WARMUP" != 0 ]; then
    for k in "${names[@]}"; do
      log "warm-up $k ($WARMUP)"
      run_path "${k%/*}" "${k#*/}" "$WARMUP" "$WORK/warmup-${k/\//-}.txt"
      [ "$RUN_ERR" = 0 ] && [ "$RUN_OK" -gt 0 ] || { cat "$WORK/warmup-${k/\//-}.txt" >&2; die "warm-up of $k: $RUN_OK ok, $RUN_ERR errors"; }
    done
  fi

  local tsv="$WORK/service.tsv" n=${#names[@]} r i m0 m1 cancelled scmd ok err mean dec other rt0 rt1 rc0 rc1 rus rcmd
  printf 'round\tstore\tpath\tdecisions\twall_s\tdecisions_per_s\tcpu_ticks\tcpu_us_per_decision\tclient_ok\terrors\tcancelled_at_end\tmean_ms\tredis_us_per_decision\tredis_cmds_per_decision\tsluice_cmds_per_decision\n' >"$tsv"
  say ""
  say "per run: round store/path decisions/s CPU_us/decision mean_ms [client ok, errors, gRPC calls cancelled by h2load's close] [redis-server us/decision, commands/decision (those run inside scripts included); commands Sluice wrote per decision]"
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
      k=${names[$(((i + r - 1) % n))]}; s=${k%/*}; p=${k#*/}
      log "round $r/$ROUNDS: $k ($DURATION)"
      read -ra m0 <<<"$(service_metrics "${S_ADMIN[$s]}")" || die "sluice-$s: no metrics"
      [ "$s" = redis ] && { rc0=$(redis_commands "$REDIS_PID:$REDIS_PORT"); rt0=$(cpu_ticks "$REDIS_PID"); }
      run_path "$s" "$p" "$DURATION" "$WORK/run-$r-$s-$p.txt"
      local ticks=$CPU_TICKS wall=$WALL_NS
      [ "$s" = redis ] && { rt1=$(cpu_ticks "$REDIS_PID"); rc1=$(redis_commands "$REDIS_PID:$REDIS_PORT"); }
      read -ra m1 <<<"$(service_metrics "${S_ADMIN[$s]}")" || die "sluice-$s: no metrics"
      ok=$RUN_OK err=$RUN_ERR mean=$RUN_MEAN_MS
      case $p in
        gateway) dec=$((m1[0] - m0[0])) other=$((m1[1] - m0[1])) ;;
        check) dec=$((m1[2] - m0[2])) other=$((m1[3] - m0[3])) ;;
        grpc | grpc2) dec=$((m1[4] - m0[4])) other=$((m1[5] - m0[5])) ;;
      esac
      # h2load closes its connections at the end with calls in flight: those not yet decided
      # are cancelled (nothing charged), at most the calls in flight
      cancelled=$((m1[9] - m0[9]))
      [[ $p == grpc* ]] && [ "$cancelled" -le $((H2_CONNECTIONS * H2_STREAMS)) ] || other=$((other + cancelled)) cancelled=0
      err=$((err + other + m1[8] - m0[8]))
      [ "$dec" -gt 0 ] || { cat "$WORK/run-$r-$s-$p.txt" >&2; die "$k: Sluice counted no decision"; }
      # the client's successes and Sluice's admissions must agree (a call in flight at the end
      # of an h2load run is decided but not counted by h2load)
      [ $((dec - ok)) -ge 0 ] && [ $((dec - ok)) -le $((H2_CONNECTIONS * H2_STREAMS + CONNECTIONS)) ] ||
        die "$k: Sluice counted $dec admissions, the client $ok successes"
      rus=- rcmd=- scmd=-
      if [ "$s" = redis ]; then
        scmd=$(awk -v x=$((m1[6] - m0[6])) -v q="$dec" 'BEGIN { printf "%.3f", x / q }')
        rus=$(awk -v t=$((rt1 - rt0)) -v c="$clk" -v q="$dec" 'BEGIN { printf "%.2f", t / c * 1e6 / q }')
        rcmd=$(awk -v x=$((rc1 - rc0 - 1)) -v q="$dec" 'BEGIN { printf "%.3f", x / q }')   # minus one INFO
      fi
      local rate cpu
      rate=$(awk -v d="$dec" -v w="$wall" 'BEGIN { printf "%.1f", d / (w / 1e9) }')
      cpu=$(awk -v t="$ticks" -v c="$clk" -v q="$dec" 'BEGIN { printf "%.3f", t / c * 1e6 / q }')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$s" "$p" "$dec" \
        "$(awk -v w="$wall" 'BEGIN { printf "%.3f", w / 1e9 }')" "$rate" "$ticks" "$cpu" "$ok" "$err" "$cancelled" "$mean" "$rus" "$rcmd" "$scmd" >>"$tsv"
      say "$(printf '  %d %-15s %10.0f %8.2f %8.3f  [%d ok, %d errors, %d cancelled at the end]' "$r" "$k" "$rate" "$cpu" "$mean" "$ok" "$err" "$cancelled")$(
        [ "$rus" != - ] && printf '  [redis %s us, %s cmds; sluice wrote %s cmds]' "$rus" "$rcmd" "$scmd")"
    done
  done
  say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  say ""
  say "medians over $ROUNDS round(s) of $DURATION; gateway and check: wrk -c $CONNECTIONS -t $THREADS; grpc: h2load -c $H2_CONNECTIONS -m $H2_STREAMS -t $THREADS; 1 Sluice worker:"
  local table; table=$(summarize "$tsv") || die "summary failed"
  say "$table"

  mkdir -p "$RESULTS_DIR"
  if [ "$PERF" = 1 ]; then
    for s in $STORES; do [[ " $PATHS " == *" grpc "* ]] && perf_grpc "$s"; done
    cp "$WORK/perf.txt" "$RESULTS_DIR/service-perf.txt"
    log "written: $RESULTS_DIR/service-perf.txt"
  fi
  cp "$REPORT" "$RESULTS_DIR/service.txt.tmp" && mv "$RESULTS_DIR/service.txt.tmp" "$RESULTS_DIR/service.txt"
  cp "$tsv" "$RESULTS_DIR/service.tsv"
  log "written: $RESULTS_DIR/service.txt (raw runs: service.tsv)"
}

main "$@"
