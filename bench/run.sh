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
#                    node-redis"
#        ROUNDS=3  DURATION=4s  WARMUP=2s  CONNECTIONS=64  THREADS=2
#        ORDER=fixed|rotate  PIN=0|1  SLUICE_BIN=build/sluice  LIMIT_HEADERS=ietf
#        RATIOS="sluice:nginx sluice:haproxy sluice-limit-pass:nginx-limit-pass ..."
#        WRK_TIMEOUT=2s  READY_TIMEOUT=10  KEEP_TMP=0
#        REDIS_SERVER=/usr/bin/redis-server  NODE_LIMITERS=2  NODE_AUTOPIPELINE=1
#
# Adding a contender: write a function `start_contender_<name>` (dashes in the
# name become underscores) that starts the server as a child of this script,
# writes its config under "$WORK", waits until it is ready, and calls
#   add_contender NAME PID PORT [PATH [EXPECT]]
# (EXPECT: "200", the default: every response must be 200 with the upstream body;
# "200,429": a rate-limited contender whose 429s are expected, not errors)
# then put NAME in CONTENDERS (or DEFAULT_CONTENDERS). CPU is measured over PID
# and its direct children (covers nginx master + workers). Everything else
# (proxy check, warm-up, rounds, CPU, medians, table, ratios) is generic. A contender
# that uses the bench's Redis (need_redis NAME before starting; then $REDIS_PORT) sets
# C_REDIS[NAME]=1: redis-server's CPU and commands are measured during its runs; a Sluice
# with the Redis store also sets C_METRICS[NAME]=ADMIN_PORT: its sluice_redis_* counters
# are read before and after each run (commands per socket write = pipelining factor).
set -uo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO_ROOT" || exit 1

DEFAULT_CONTENDERS="sluice nginx haproxy sluice-logged nginx-logged sluice-limit-pass nginx-limit-pass sluice-limit-reject nginx-limit-reject sluice-redis sluice-cluster node-redis"
CONTENDERS=${CONTENDERS:-$DEFAULT_CONTENDERS}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4s}
WARMUP=${WARMUP:-2s}            # per contender, before round 1; 0 disables
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ORDER=${ORDER:-fixed}           # fixed: same order every round; rotate: shift by one per round
PIN=${PIN:-0}                   # 1: proxy on CPU 0, upstream + wrk on the other CPUs
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
RATIOS=${RATIOS:-"sluice:nginx sluice:haproxy sluice-logged:nginx-logged sluice-logged:sluice nginx-logged:nginx sluice-limit-pass:nginx-limit-pass sluice-limit-reject:nginx-limit-reject sluice-limit-pass:sluice nginx-limit-pass:nginx sluice-redis:sluice-limit-pass sluice-cluster:sluice-redis sluice-redis:node-redis sluice-redis:nginx node-redis:nginx"}
LIMIT_HEADERS=${LIMIT_HEADERS:-ietf}  # Sluice limit contenders: response.headers (ietf|legacy|both|none)
HASH_SECRET=bench-only-hash-secret    # SLUICE_HASH_SECRET for every Sluice (keyed hashing, as in production)
WRK_TIMEOUT=${WRK_TIMEOUT:-2s}
READY_TIMEOUT=${READY_TIMEOUT:-10}   # seconds to wait for a server to come up
KEEP_TMP=${KEEP_TMP:-0}
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
NODE_LIMITERS=${NODE_LIMITERS:-2}          # node-redis: 2 = a 1 s and a 60 s limiter (2 EVALSHA/request), 1 = the 1 s one
NODE_AUTOPIPELINE=${NODE_AUTOPIPELINE:-1}  # node-redis: ioredis enableAutoPipelining (1) or not (0)
NODE_PEER_DIR="$SCRIPT_DIR/node-peer"
RESULTS_DIR="$SCRIPT_DIR/results"
UPSTREAM_BODY="hello from upstream"

# ---------------------------------------------------------------- helpers
WORK=""
NOFILE=1024 MAXCONN=400
STARTED_PIDS=()          # every process this script started (by PID)
REPORT=""

say() {  # print and record in the report
  printf '%s\n' "$*"
  [ -n "$REPORT" ] && printf '%s\n' "$*" >>"$REPORT"
  return 0
}
log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cleanup() {
  local rc=$? pid kids=() i
  trap - EXIT INT TERM
  [ -n "${WRK_PID:-}" ] && kill -TERM "$WRK_PID" 2>/dev/null
  # children of our processes (e.g. nginx workers) so nothing survives a forced kill
  for pid in "${STARTED_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && mapfile -t -O "${#kids[@]}" kids < <(pgrep -P "$pid" 2>/dev/null)
  done
  for pid in "${STARTED_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for i in $(seq 1 50); do   # up to 5 s for a graceful exit
    local alive=0
    for pid in "${STARTED_PIDS[@]}" "${kids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${STARTED_PIDS[@]}" "${kids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${STARTED_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    if [ "$KEEP_TMP" = 1 ] || [ $rc -ne 0 ]; then log "temp dir kept: $WORK"; else rm -rf "$WORK"; fi
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_packages() {  # install nginx, haproxy, wrk (redis-server, node) from Debian if missing; never start services
  local missing=()
  command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || missing+=(nginx)
  command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v wrk     >/dev/null 2>&1 || missing+=(wrk)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v pgrep   >/dev/null 2>&1 || missing+=(procps)
  if [[ " $CONTENDERS " == *" sluice-redis "* || " $CONTENDERS " == *" sluice-cluster "* || " $CONTENDERS " == *" node-redis "* ]]; then
    [ -x "$REDIS_SERVER" ] || missing+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  fi
  if [[ " $CONTENDERS " == *" node-redis "* ]]; then
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm  >/dev/null 2>&1 || missing+=(npm)
  fi
  ((${#missing[@]})) || return 0
  log "installing: ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then   # forbid maintainer scripts from starting the services
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  local rc=$?
  [ $made_policy = 1 ] && rm -f "$policy"
  [ $rc = 0 ] || die "apt-get install failed"
}

free_ports() {  # free_ports N -> N distinct free loopback TCP ports, space separated
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {  # wait_port PORT PID NAME
  local port=$1 pid=$2 name=$3 i
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { show_log "$name"; die "$name exited during startup"; }
    port_open "$port" && return 0
    sleep 0.1
  done
  show_log "$name"; die "$name did not listen on 127.0.0.1:$port within ${READY_TIMEOUT}s"
}

wait_log_line() {  # wait_log_line FILE PATTERN PID NAME
  local file=$1 pat=$2 pid=$3 name=$4 i
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    grep -qF -- "$pat" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { show_log "$name"; die "$name exited during startup"; }
    sleep 0.1
  done
  show_log "$name"; die "$name did not log '$pat' within ${READY_TIMEOUT}s"
}

show_log() { local f; for f in "$WORK/$1".*log "$WORK/$1"/*.log; do [ -f "$f" ] && { log "--- $f"; tail -n 20 "$f" >&2; }; done; }

http_get() {  # http_get URL -> prints "STATUS<TAB>BODY"
  python3 - "$1" <<'EOF'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(f"{r.status}\t{r.read().decode(errors='replace').strip()}")
except urllib.error.HTTPError as e:
    print(f"{e.code}\t{e.read().decode(errors='replace').strip()}")
except Exception as e:
    print(f"000\t{e}")
EOF
}

http_burst() {  # http_burst URL N -> up to N GETs on one keep-alive connection, stopping at the
  # first 429: prints "COUNT_200 COUNT_429 COUNT_OTHER<TAB>FIRST_200_BODY<TAB>OTHER_STATUSES"
  python3 - "$1" "$2" <<'EOF'
import sys, http.client, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); n = int(sys.argv[2])
ok = lim = other = 0; body200 = ""; others = []
try:
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    for _ in range(n):
        c.request("GET", u.path or "/")
        r = c.getresponse(); b = r.read().decode(errors="replace").strip()
        if r.status == 200:
            ok += 1; body200 = body200 or b
        elif r.status == 429:
            lim += 1; break
        else:
            other += 1; others.append(str(r.status))
except Exception as e:
    other += 1; others.append(repr(e))
print(f"{ok} {lim} {other}\t{body200}\t{' '.join(others[:5])}")
EOF
}

pin_prefix() {  # pin_prefix proxy|other -> sets PIN_CMD (taskset prefix, or empty unless PIN=1)
  PIN_CMD=()
  if [ "$PIN" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    if [ "$1" = proxy ]; then PIN_CMD=(taskset -c 0); else PIN_CMD=(taskset -c "1-$(($(nproc) - 1))"); fi
  fi
}

# CPU ticks (utime+stime, fields 14+15 of /proc/PID/stat) of PID and its direct children
cpu_pids() { echo "$1" $(pgrep -P "$1" 2>/dev/null); }
cpu_ticks() {
  local total=0 pid rest
  for pid in $(cpu_pids "$1"); do
    rest=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    rest=${rest##*) }                      # drop "pid (comm) " (comm may contain spaces)
    set -- $rest                           # now $1 = state (field 3): utime = $12, stime = $13
    total=$((total + ${12} + ${13}))
  done
  echo $total
}

# ---------------------------------------------------------------- contenders registry
CONTENDER_LIST=()        # names, in registration order
declare -A C_PID C_PORT C_PATH C_EXPECT C_REDIS C_METRICS

add_contender() {  # add_contender NAME PID PORT [PATH [EXPECT]]   EXPECT: 200 (default) or 200,429
  CONTENDER_LIST+=("$1")
  C_PID[$1]=$2; C_PORT[$1]=$3; C_PATH[$1]=${4:-/}; C_EXPECT[$1]=${5:-200}
}

start_bg() {  # start_bg NAME ROLE -- cmd...   (stdout/stderr -> $WORK/NAME.{out,err}.log); sets BG_PID
  local name=$1 role=$2; shift 3
  pin_prefix "$role"
  # a plain command (not a function) in the background, so $! is the server's own PID
  "${PIN_CMD[@]}" "$@" >"$WORK/$name.out.log" 2>"$WORK/$name.err.log" </dev/null &
  BG_PID=$!
  STARTED_PIDS+=("$BG_PID")
}

nginx_common() {  # nginx_common NAME -> main-context lines shared by all our nginx instances
  local d="$WORK/$1"
  mkdir -p "$d"
  cat <<EOF
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections $MAXCONN; multi_accept on; }
EOF
}
nginx_http_common() {
  local d="$WORK/$1"
  cat <<EOF
    access_log off;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
EOF
}

UP_PORT="" UP_PID=""
start_upstream() {
  local conf="$WORK/upstream.conf"
  {
    nginx_common upstream
    echo "http {"
    nginx_http_common upstream
    cat <<EOF
    server {
        listen 127.0.0.1:$UP_PORT;
        location / { default_type text/plain; return 200 "$UPSTREAM_BODY\n"; }
    }
}
EOF
  } >"$conf"
  start_bg upstream other -- nginx -p "$WORK/upstream" -e "$WORK/upstream/error.log" -c "$conf" -g 'daemon off;'
  UP_PID=$BG_PID
  wait_port "$UP_PORT" "$UP_PID" upstream
}

ensure_sluice() {  # builds Sluice if SLUICE_BIN is missing
  [ -x "$SLUICE_BIN" ] && return 0
  log "$SLUICE_BIN not found: building Sluice (Release)"
  { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
    cmake --build build -j2 --target sluice; } >&2 || die "building sluice failed"
  SLUICE_BIN=build/sluice
  [ -x "$SLUICE_BIN" ] || die "build finished but $SLUICE_BIN is missing"
}

start_sluice() {  # start_sluice NAME PORT ADMIN_PORT EXPECT [EXTRA_YAML [ACCESS_LOG]]
  local name=$1 port=$2 admin_port=$3 expect=$4 extra=${5:-} access=${6:-off} conf="$WORK/$1.yaml"
  ensure_sluice
  # access log off unless asked (the nginx and HAProxy contenders log nothing either, but
  # the -logged pair); no routes = no limit
  cat >"$conf" <<EOF
server: { listen: "127.0.0.1:$port", threads: 1, max_connections: 10000 }
admin:  { listen: "127.0.0.1:$admin_port" }
upstream: { url: "http://127.0.0.1:$UP_PORT", max_idle_per_worker: 256 }
log: { level: warn, access: { path: "$access" } }
$extra
EOF
  "$SLUICE_BIN" --check --config "$conf" >/dev/null || die "$name: sluice config check failed ($conf)"
  SLUICE_HASH_SECRET=$HASH_SECRET start_bg "$name" proxy -- "$SLUICE_BIN" --config "$conf"
  wait_log_line "$WORK/$name.err.log" "proxy listening on 127.0.0.1:$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port" / "$expect"
}

start_contender_sluice() { start_sluice sluice "$1" "$2" 200; }

# The same proxy with its JSON access log written to a file (the default config logs).
start_contender_sluice_logged() {
  mkdir -p "$WORK/sluice-logged"
  start_sluice sluice-logged "$1" "$2" 200 "" "$WORK/sluice-logged/access.log"
}

# One client (127.0.0.1), so one identifier: a limit far above any rate wrk reaches,
# checked on every request (a fixed and a sliding tier, in one store call).
start_contender_sluice_limit_pass() {
  start_sluice sluice-limit-pass "$1" "$2" 200 "store: { type: memory, memory: { max_keys: 100000 } }
response: { headers: $LIMIT_HEADERS }
policies:
  pass:
    ip:
      - {limit: 1000000000, per: 1s, algorithm: fixed}
      - {limit: 1000000000, per: 1m, algorithm: sliding}
routes:
  - {match: {path_prefix: /}, policy: pass}"
}

# 100 requests per second admitted, everything else answered 429 by Sluice itself.
start_contender_sluice_limit_reject() {
  start_sluice sluice-limit-reject "$1" "$2" 200,429 "store: { type: memory, memory: { max_keys: 100000 } }
response: { headers: $LIMIT_HEADERS }
policies:
  reject:
    ip:
      - {limit: 100, per: 1s, algorithm: sliding}
routes:
  - {match: {path_prefix: /}, policy: reject}"
}

start_nginx_proxy() {  # start_nginx_proxy NAME PORT EXPECT [HTTP_EXTRA [LOCATION_EXTRA]]
  local name=$1 port=$2 expect=$3 http_extra=${4:-} location_extra=${5:-} conf="$WORK/$1.conf"
  {
    nginx_common "$name"
    echo "http {"
    nginx_http_common "$name"
    [ -n "$http_extra" ] && printf '    %s\n' "$http_extra"
    cat <<EOF
    upstream backend {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            $location_extra
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
  } >"$conf"
  nginx -t -q -p "$WORK/$name" -e "$WORK/$name/error.log" -c "$conf" >&2 || die "$name: nginx config check failed"
  start_bg "$name" proxy -- nginx -p "$WORK/$name" -e "$WORK/$name/error.log" -c "$conf" -g 'daemon off;'
  wait_port "$port" "$BG_PID" "$name"
  add_contender "$name" "$BG_PID" "$port" / "$expect"
}

start_contender_nginx() { start_nginx_proxy nginx "$1" 200; }

# nginx writing the same JSON fields as Sluice's access log, buffered as nginx is usually
# run for speed (64 KiB, flushed at least every second).
start_contender_nginx_logged() {
  start_nginx_proxy nginx-logged "$1" 200 \
    "log_format sluice_json escape=json '{\"time\":\"\$time_iso8601\",\"peer\":\"\$remote_addr\",\"method\":\"\$request_method\",\"path\":\"\$uri\",\"route\":\"/*\",\"policy\":\"\",\"decision\":\"\",\"id_kind\":\"\",\"id\":\"\",\"status\":\$status,\"bytes_in\":\$request_length,\"bytes_out\":\$body_bytes_sent,\"upstream_us\":\"\$upstream_response_time\",\"total_us\":\"\$request_time\"}';" \
    "access_log $WORK/nginx-logged/access.log sluice_json buffer=64k flush=1s;"
}

# limit_req keeps "excess" in 1/1000 requests: rate 1e9 r/s is 1e12 units/s and burst 1e9
# is 1e12 units, far above anything reached here, and rate * elapsed ms stays below 2^63
# for a key idle up to ~2.5 h (much larger values pass "nginx -t" but overflow at run
# time). The burst is needed: the leak is applied per elapsed millisecond, so requests
# within one millisecond tick pile up 1000 units each. Rejections are logged at info, below
# error_log's warn, so nginx writes no line per 429 (Sluice's access log is off too).
start_contender_nginx_limit_pass() {
  start_nginx_proxy nginx-limit-pass "$1" 200 \
    'limit_req_zone $binary_remote_addr zone=pass:10m rate=1000000000r/s; limit_req_status 429; limit_req_log_level info;' \
    'limit_req zone=pass burst=1000000000 nodelay;'
}

# rate=100r/s without burst: one request per 10 ms admitted, everything else 429.
start_contender_nginx_limit_reject() {
  start_nginx_proxy nginx-limit-reject "$1" 200,429 \
    'limit_req_zone $binary_remote_addr zone=reject:10m rate=100r/s; limit_req_status 429; limit_req_log_level info;' \
    'limit_req zone=reject;'
}

# ---------------------------------------------------------------- Redis store contenders
REDIS_PORT="" REDIS_PID=""
need_redis() {  # need_redis NAME: starts the bench's redis-server (once) on a free loopback port
  if [ -n "$REDIS_PID" ]; then C_REDIS[$1]="$REDIS_PID:$REDIS_PORT"; return 0; fi
  read -r REDIS_PORT <<<"$(free_ports 1)"
  mkdir -p "$WORK/redis"
  # no persistence, no eviction (docs/redis.md, "One Redis node"), loopback only, in the foreground
  start_bg redis other -- "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes \
    --daemonize no --dir "$WORK/redis" --save "" --appendonly no --maxmemory-policy noeviction \
    --loglevel warning
  REDIS_PID=$BG_PID
  wait_port "$REDIS_PORT" "$REDIS_PID" redis
  local i
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] || die "redis-server on 127.0.0.1:$REDIS_PORT does not answer PING"
  say "redis: redis-server $("$REDIS_SERVER" --version | awk '{print $3}' | sed 's/^v=//') on 127.0.0.1:$REDIS_PORT (--save \"\" --appendonly no --maxmemory-policy noeviction)"
  C_REDIS[$1]="$REDIS_PID:$REDIS_PORT"
}

CLUSTER_NODES=""  # "pid:port ..." of the bench's Redis Cluster
need_cluster() {  # need_cluster NAME: starts a 3-primary Redis Cluster (once), no replicas
  if [ -n "$CLUSTER_NODES" ]; then C_REDIS[$1]=$CLUSTER_NODES; return 0; fi
  local ports port i nodes=() create=()
  # a node's cluster bus listens 10000 above its port: both must be free, the port <= 55535
  ports=$(python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
out = []
while len(out) < 3:
    p = random.randint(20000, 55535)
    if p not in out and free(p) and free(p + 10000): out.append(p)
print(" ".join(map(str, out)))')
  for port in $ports; do
    mkdir -p "$WORK/cluster-$port"
    start_bg "cluster-$port" other -- "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --protected-mode yes \
      --daemonize no --dir "$WORK/cluster-$port" --save "" --appendonly no --maxmemory-policy noeviction \
      --cluster-enabled yes --cluster-config-file "$WORK/cluster-$port/nodes.conf" --loglevel warning
    wait_port "$port" "$BG_PID" "cluster-$port"
    nodes+=("$BG_PID:$port"); create+=("127.0.0.1:$port")
  done
  timeout 60 redis-cli --cluster create "${create[@]}" --cluster-replicas 0 --cluster-yes >"$WORK/cluster-create.txt" 2>&1 ||
    { cat "$WORK/cluster-create.txt" >&2; die "redis-cli --cluster create failed"; }
  for port in $ports; do
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
      sleep 0.1
    done
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || die "cluster node $port: state not ok"
  done
  CLUSTER_NODES="${nodes[*]}"
  C_REDIS[$1]=$CLUSTER_NODES
  say "redis cluster: 3 primaries on 127.0.0.1: ${ports} (no replicas, no persistence)"
}

redis_commands() {  # redis_commands "PID:PORT ...": total_commands_processed summed (these INFOs included)
  local node total=0 n
  for node in $1; do
    n=$(redis-cli -p "${node#*:}" info stats 2>/dev/null | tr -d '\r' | awk -F: '$1 == "total_commands_processed" { print $2 }')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

redis_cpu_ticks() {  # redis_cpu_ticks "PID:PORT ...": CPU ticks summed over the nodes
  local node total=0
  for node in $1; do total=$((total + $(cpu_ticks "${node%%:*}"))); done
  echo "$total"
}

sluice_redis_metrics() {  # sluice_redis_metrics ADMIN_PORT -> "commands writes errors timeouts" (-1: missing)
  python3 - "$1" <<'EOF'
import sys, urllib.request
want = ["sluice_redis_commands_total", "sluice_redis_writes_total", "sluice_redis_errors_total", "sluice_redis_timeouts_total"]
v = {}
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("#"): continue
            parts = line.split()
            if len(parts) >= 2 and parts[0] in want: v[parts[0]] = int(float(parts[1]))
except Exception:
    pass
print(" ".join(str(v.get(k, -1)) for k in want))
EOF
}

# start_sluice_store NAME PROXY_PORT ADMIN_PORT TYPE NODE: sluice-limit-pass's policy on a
# Redis store (TYPE redis or redis-cluster, NODE its address or a seed), then waits for
# /readyz (config loaded, every needed Redis node connected).
start_sluice_store() {
  local name=$1 type=$4 node=$5
  start_sluice "$name" "$2" "$3" 200 "store:
  type: $type
  redis: { nodes: [\"$node\"], timeout: 50ms }
  on_error: allow
response: { headers: $LIMIT_HEADERS }
policies:
  pass:
    ip:
      - {limit: 1000000000, per: 1s, algorithm: fixed}
      - {limit: 1000000000, per: 1m, algorithm: sliding}
routes:
  - {match: {path_prefix: /}, policy: pass}"
  C_METRICS[$name]=$3
  local i got=""
  for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
    got=$(http_get "http://127.0.0.1:$3/readyz"); [ "${got%%$'\t'*}" = 200 ] && return 0
    sleep 0.1
  done
  show_log "$name"; die "$name: /readyz not 200 within ${READY_TIMEOUT}s (last: $got)"
}

# sluice-limit-pass with the Redis store instead of the memory store (the same policy, so
# sluice-redis vs sluice-limit-pass isolates the store): one EVALSHA per request, pipelined.
start_contender_sluice_redis() {
  need_redis sluice-redis
  start_sluice_store sluice-redis "$1" "$2" redis "127.0.0.1:$REDIS_PORT"
}

# sluice-redis on a 3-primary Redis Cluster: one EVALSHA per identifier (here one: the
# client address), routed by slot, the checks of one turn batched per slot (here all: one
# client address); redis-server CPU and commands summed over the nodes.
start_contender_sluice_cluster() {
  need_cluster sluice-cluster
  local seed=${CLUSTER_NODES%% *}
  start_sluice_store sluice-cluster "$1" "$2" redis-cluster "127.0.0.1:${seed#*:}"
}

ensure_node_peer() {  # npm ci into bench/node-peer/node_modules unless it is already up to date
  local d=$NODE_PEER_DIR stamp=$NODE_PEER_DIR/node_modules/.package-lock.json
  [ -f "$d/package.json" ] || die "$d/package.json missing"
  if [ -f "$stamp" ] && [ "$stamp" -nt "$d/package.json" ] &&
     { [ ! -f "$d/package-lock.json" ] || [ "$stamp" -nt "$d/package-lock.json" ]; }; then
    return 0
  fi
  local cmd=(npm install --no-audit --no-fund --loglevel=error)
  [ -f "$d/package-lock.json" ] && cmd=(npm ci --no-audit --no-fund --loglevel=error)
  log "node-redis: ${cmd[*]} in $d"
  (cd "$d" && timeout 600 "${cmd[@]}") >&2 || die "node-redis: ${cmd[*]} failed in $d"
}

# Node peer: express + rate-limiter-flexible RateLimiterRedis (ioredis, the same Redis) +
# http-proxy with a keep-alive agent; the same never-rejecting limit keyed by client IP; one
# single-threaded process (bench/node-peer/server.js).
start_contender_node_redis() {
  local port=$1
  need_redis node-redis
  ensure_node_peer
  start_bg node-redis proxy -- env PORT="$port" UPSTREAM="http://127.0.0.1:$UP_PORT" REDIS_PORT="$REDIS_PORT" \
    LIMITERS="$NODE_LIMITERS" AUTOPIPELINE="$NODE_AUTOPIPELINE" NODE_ENV=production \
    node "$NODE_PEER_DIR/server.js"
  wait_log_line "$WORK/node-redis.err.log" "node peer listening on 127.0.0.1:$port" "$BG_PID" node-redis
  add_contender node-redis "$BG_PID" "$port"
}

start_contender_haproxy() {
  local port=$1 conf="$WORK/haproxy.cfg"
  cat >"$conf" <<EOF
global
    nbthread 1
    maxconn $MAXCONN
    pidfile $WORK/haproxy.pid

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend fe
    bind 127.0.0.1:$port
    default_backend be

backend be
    server up 127.0.0.1:$UP_PORT
EOF
  haproxy -c -q -f "$conf" >&2 || die "haproxy config check failed"
  start_bg haproxy proxy -- haproxy -db -f "$conf"
  wait_port "$port" "$BG_PID" haproxy
  add_contender haproxy "$BG_PID" "$port"
}

# Optional baseline (not in the default list): wrk straight at the upstream.
start_contender_direct() { add_contender direct "$UP_PID" "$UP_PORT"; }

# ---------------------------------------------------------------- measuring
parse_wrk() {  # parse_wrk FILE -> "rps p50_ms p99_ms requests non2xx sockerr"
  awk '
    function ms(v,  n, u) { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
      if (u == "us") return n / 1000; if (u == "ms") return n; if (u == "s") return n * 1000
      if (u == "m") return n * 60000; if (u == "h") return n * 3600000; return n }
    /^ *50% /                     { p50 = ms($2) }
    /^ *99% /                     { p99 = ms($2) }
    / requests in /               { req = $1 }
    /^Requests\/sec:/             { rps = $2 }
    /Socket errors:/              { gsub(",", ""); sock = $4 + $6 + $8 + $10 }
    /Non-2xx or 3xx responses:/   { non = $NF }
    END { printf "%s %.3f %.3f %d %d %d\n", (rps == "" ? 0 : rps), p50, p99, req, non, sock }' "$1"
}

WRK_PID=""
# Counts responses by status in wrk's Lua (uncounted warm-up only: a response() callback
# costs wrk about a third of its throughput here). Prints "status CODE COUNT" lines.
STATUS_LUA='local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {} end
function response(status, headers, body) statuses[status] = (statuses[status] or 0) + 1 end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do total[code] = (total[code] or 0) + n end
  end
  for code, n in pairs(total) do io.write(string.format("status %d %d\n", code, n)) end
end'

run_wrk() {  # run_wrk NAME DURATION OUTFILE [WRK_ARGS...] -> sets CPU_TICKS (CPU used by the contender during the run)
  local name=$1 dur=$2 out=$3 pid=${C_PID[$1]} t0 t1
  local url="http://127.0.0.1:${C_PORT[$1]}${C_PATH[$1]}"
  shift 3
  t0=$(cpu_ticks "$pid")
  pin_prefix other
  # in the background + wait, so that a signal interrupts the run at once
  "${PIN_CMD[@]}" wrk --latency -t "$THREADS" -c "$CONNECTIONS" -d "$dur" --timeout "$WRK_TIMEOUT" "$@" "$url" >"$out" 2>&1 </dev/null &
  WRK_PID=$!
  wait "$WRK_PID"
  WRK_PID=""
  t1=$(cpu_ticks "$pid")
  kill -0 "$pid" 2>/dev/null || { show_log "$name"; die "$name died during the run"; }
  CPU_TICKS=$((t1 - t0))
}

expects_429() { [[ ",${C_EXPECT[$1]}," == *,429,* ]]; }

check_proxies() {  # pass contenders: 200 + the upstream body; reject contenders: 200 + body, then 429
  local name got status body counts others url n200 n429 nother
  for name in "${CONTENDER_LIST[@]}"; do
    url="http://127.0.0.1:${C_PORT[$name]}${C_PATH[$name]}"
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
  python3 - "$1" "$RATIOS" "${CONTENDER_LIST[*]}" "${expects[*]}" "$2" "$(getconf CLK_TCK)" <<'EOF'
import os, sys, statistics
tsv, ratios, order = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
clk = int(sys.argv[6])
expect = {n: set(e.split(",")) for n, _, e in (x.partition("=") for x in sys.argv[4].split())}
status_file = sys.argv[5]
rows = {}
for line in open(tsv):
    if line.startswith("#"): continue
    f = line.rstrip("\n").split("\t") + ["-"] * 5
    rnd, name, rps, p50, p99, req, non, sock, ticks, cpu = f[:10]
    num = lambda x: None if x in ("-", "") else int(x)
    rticks, rcmds, scmds, swrites, serrs = map(num, f[10:15])
    rows.setdefault(name, []).append(dict(rps=float(rps), p50=float(p50), p99=float(p99),
        req=int(req), non=int(non), sock=int(sock), cpu=float(cpu),
        rcpu=None if rticks is None else rticks / clk * 1e6 / int(req),
        rcmd=None if rcmds is None else rcmds / int(req),
        pipe=None if not swrites else scmds / swrites, scmds=scmds, swrites=swrites, serrs=serrs))
mix = {}  # warm-up status counts: name -> {code: count}
if status_file and os.path.exists(status_file):
    for line in open(status_file):
        name, code, count = line.split()
        mix.setdefault(name, {})[code] = int(count)
med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99", "cpu")}
       for n, rs in rows.items()}
W = max([len(n) for n in order] + [5])
hdr = (f"{'proxy':<{W}} | {'req/s':>9} | {'p50 ms':>7} | {'p99 ms':>7} | {'CPU us/req':>10} | {'429 %':>7}"
       " | errors (unexpected non2xx/socket, all rounds)")
print(hdr); print("-" * len(hdr))
for n in order:
    if n not in rows: continue
    m = med[n]; req = sum(r["req"] for r in rows[n])
    non = sum(r["non"] for r in rows[n]); sock = sum(r["sock"] for r in rows[n])
    if "429" in expect.get(n, {"200"}):
        # wrk counts non-2xx only; the warm-up's status mix (below) shows they are 429s
        pct = f"{100 * non / req:.2f}"; bad = 0
    else:
        pct = "0.00" if non == 0 else f"<={100 * non / req:.2f}"; bad = non
    print(f"{n:<{W}} | {m['rps']:>9.0f} | {m['p50']:>7.3f} | {m['p99']:>7.3f} | {m['cpu']:>10.2f} | {pct:>7} | {bad}/{sock}")
print()
if mix:
    print("status mix in the warm-up runs (wrk Lua counter; the measured runs count non-2xx only,")
    print("which for a 429-expecting contender are reported as its 429 %):")
    for n in order:
        if n not in mix: continue
        tot = sum(mix[n].values()) or 1
        parts = "  ".join(f"{c}: {k} ({100 * k / tot:.2f}%)" for c, k in sorted(mix[n].items()))
        odd = sorted(set(mix[n]) - expect.get(n, {"200"}))
        print(f"  {n:<{W}}  {parts}" + (f"  UNEXPECTED: {' '.join(odd)}" if odd else ""))
else:
    print("status mix: not sampled (WARMUP=0); a 429-expecting contender's non-2xx are reported as 429 %")
printed = False
div = lambda x, y: f"{x / y:.2f}" if y else "n/a"
for pair in ratios:
    a, _, b = pair.partition(":")
    if a not in med or b not in med: continue
    if not printed:
        print(); print("ratios (medians; req/s higher is better, p99 and CPU lower is better):"); printed = True
    A, B = med[a], med[b]
    print(f"  {a}/{b}: req/s {div(A['rps'], B['rps'])}  p99 {div(A['p99'], B['p99'])}  CPU/req {div(A['cpu'], B['cpu'])}")
if not printed:
    print(); print(f"ratios: none ({' '.join(ratios) or 'RATIOS empty'}: not both measured)")
over = [(a, b) for a, _, b in (p.partition(":") for p in ratios) if a == b + "-limit-pass" and a in med and b in med]
if over:
    print(); print("limit overhead (X-limit-pass vs X, the same proxy with a never-rejecting limit checked on every request;")
    print("change of the medians, negative req/s = slower):")
    for a, b in over:
        A, B = med[a], med[b]
        thr = 100 * (1 - A["rps"] / B["rps"]) if B["rps"] else float("nan")
        cpu = 100 * (A["cpu"] / B["cpu"] - 1) if B["cpu"] else float("nan")
        goal = ""
        if b == "sluice":
            goal = "  goal < 5%: " + ("met" if thr < 5 and cpu < 5 else "NOT met")
        print(f"  {b}: req/s {-thr:+.1f}%  CPU us/req {cpu:+.1f}%  (throughput lost {thr:.1f}%, CPU added {cpu:.1f}%){goal}")
redis = [n for n in order if n in rows and any(r["rcpu"] is not None for r in rows[n])]
if redis:
    mm = lambda rs, k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else None
    print(); print("Redis store (medians over rounds; redis-server's CPU is NOT in the CPU us/req column above;")
    print("Redis cmds/req = INFO total_commands_processed, commands run inside scripts included;")
    print("commands/write = Sluice's sluice_redis_commands_total / sluice_redis_writes_total over the run,")
    print("i.e. the pipelining factor):")
    hdr = (f"  {'proxy':<{W}} | {'req/s':>9} | {'p99 ms':>7} | {'proxy CPU':>9} | {'redis CPU':>9} | {'sum CPU':>9}"
           f" | {'Redis cmds/req':>14} | {'commands/write':>14} | errors")
    print(hdr); print("  " + "-" * (len(hdr) - 2))
    for n in redis:
        rs = rows[n]; rc = mm(rs, "rcpu"); pc = med[n]["cpu"]
        sumc = statistics.median(r["cpu"] + r["rcpu"] for r in rs if r["rcpu"] is not None)
        pipe = mm(rs, "pipe"); rcmd = mm(rs, "rcmd")
        errs = sum(r["serrs"] for r in rs if r["serrs"] is not None) if any(r["serrs"] is not None for r in rs) else None
        per_round = "  (rounds: " + " ".join(f"{r['pipe']:.1f}" for r in rs if r["pipe"] is not None) + ")" if pipe is not None else ""
        print(f"  {n:<{W}} | {med[n]['rps']:>9.0f} | {med[n]['p99']:>7.3f} | {pc:>9.2f} | {rc:>9.2f} | {sumc:>9.2f}"
              f" | {rcmd:>14.2f} | {('-' if pipe is None else f'{pipe:.1f}'):>14} | {'-' if errs is None else errs}{per_round}")
    print("  (CPU columns in us/req: proxy = the contender's process, redis = redis-server, sum = both, per run then median;")
    print("   errors = Sluice's sluice_redis_errors_total + sluice_redis_timeouts_total over all rounds, each would have")
    print("   been forwarded unchecked by on_error: allow)")
    if "sluice-redis" in med and "sluice-limit-pass" in med:
        A, B = med["sluice-redis"], med["sluice-limit-pass"]
        thr = 100 * (1 - A["rps"] / B["rps"]) if B["rps"] else float("nan")
        cpu = 100 * (A["cpu"] / B["cpu"] - 1) if B["cpu"] else float("nan")
        rsum = statistics.median(r["cpu"] + r["rcpu"] for r in rows["sluice-redis"] if r["rcpu"] is not None)
        print(); print("Redis store overhead (sluice-redis vs sluice-limit-pass: the same policy, Redis store vs memory store):")
        print(f"  req/s {-thr:+.1f}%  Sluice CPU us/req {cpu:+.1f}%  Sluice + redis-server CPU us/req "
              f"{100 * (rsum / B['cpu'] - 1):+.1f}%  (throughput lost {thr:.1f}%)  goal < 15%: {'met' if thr < 15 else 'NOT met'}")
EOF
}

# ---------------------------------------------------------------- main
main() {
  [ "$(id -u)" = 0 ] || log "warning: not root; installing packages will fail if any are missing"
  ensure_packages
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  NOFILE=$(ulimit -n); [ "$NOFILE" = unlimited ] && NOFILE=65536
  MAXCONN=$(((NOFILE - 200) / 2)); [ $MAXCONN -gt 20000 ] && MAXCONN=20000

  WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX) || die "mktemp failed"
  chmod 755 "$WORK"            # nginx workers run as an unprivileged user
  REPORT="$WORK/report.txt"; : >"$REPORT"
  local tsv="$WORK/runs.tsv"
  printf '#round\tproxy\trps\tp50_ms\tp99_ms\trequests\tnon2xx\tsockerr\tcpu_ticks\tcpu_us_per_req\tredis_ticks\tredis_cmds\tsluice_redis_cmds\tsluice_redis_writes\tsluice_redis_errors\n' >"$tsv"

  local clk; clk=$(getconf CLK_TCK)
  say "Sluice benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "command: $0 $*"
  say "env: CONTENDERS=\"$CONTENDERS\" ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS ORDER=$ORDER PIN=$PIN LIMIT_HEADERS=$LIMIT_HEADERS"
  say "machine: nproc=$(nproc) kernel=$(uname -r) cpu=\"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\""
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  say "load average at start: $load$(awk '$1 > 0.5 { printf "  (WARNING: machine busy, results will be noisy)" }' /proc/loadavg)"
  say "versions: $(nginx -v 2>&1 | sed 's/.*version: //'), $(haproxy -v 2>/dev/null | head -n1 | awk '{print "haproxy/"$3}'), $(wrk -v 2>&1 | head -n1 | awk '{print $1"/"$2}')$(
    [[ " $CONTENDERS " == *" node-redis "* ]] && echo ", node/$(node -v 2>/dev/null | tr -d v)")"

  # ports: upstream + one or two per contender
  local names ports
  read -ra names <<<"$CONTENDERS"
  read -ra ports <<<"$(free_ports $((1 + 2 * ${#names[@]})))"
  ((${#ports[@]} == 1 + 2 * ${#names[@]})) || die "could not find free ports"
  UP_PORT=${ports[0]}
  start_upstream
  say "upstream: nginx on 127.0.0.1:$UP_PORT (1 worker, fixed body)"

  local i=1 name fn
  for name in "${names[@]}"; do
    fn="start_contender_${name//-/_}"
    declare -F "$fn" >/dev/null || die "unknown contender '$name' (no function $fn)"
    "$fn" "${ports[$i]}" "${ports[$((i + 1))]}"
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
      rticks=- rcmds=- scmds=- swrites=- serrs=- extra=""
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
      read -r rps p50 p99 req non sock <<<"$(parse_wrk "$out")"
      [ "$req" -gt 0 ] || { cat "$out" >&2; die "wrk completed no requests against $name"; }
      cpu=$(awk -v t="$ticks" -v c="$clk" -v q="$req" 'BEGIN { printf "%.3f", t / c * 1e6 / q }')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$rps" "$p50" "$p99" "$req" "$non" "$sock" "$ticks" "$cpu" \
        "$rticks" "$rcmds" "$scmds" "$swrites" "$serrs" >>"$tsv"
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
