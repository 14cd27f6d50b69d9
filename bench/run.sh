#!/usr/bin/env bash
# Sluice comparative benchmark: Sluice vs nginx vs HAProxy, each with ONE worker
# thread, in front of the same nginx upstream, driven in turn by wrk over loopback.
#
# Usage: bench/run.sh            (as root on Debian 12; see bench/README.md)
#   env: CONTENDERS="sluice nginx haproxy"  ROUNDS=3  DURATION=10s  WARMUP=2s
#        CONNECTIONS=64  THREADS=2  ORDER=fixed|rotate  PIN=0|1
#        SLUICE_BIN=build/sluice  RATIOS="sluice:nginx sluice:haproxy"
#        WRK_TIMEOUT=2s  READY_TIMEOUT=10  KEEP_TMP=0
#
# Adding a contender: write a function `start_contender_<name>` (dashes in the
# name become underscores) that starts the server as a child of this script,
# writes its config under "$WORK", waits until it is ready, and calls
#   add_contender NAME PID PORT [PATH]
# then put NAME in CONTENDERS (or DEFAULT_CONTENDERS). CPU is measured over PID
# and its direct children (covers nginx master + workers). Everything else
# (proxy check, warm-up, rounds, CPU, medians, table, ratios) is generic.
set -uo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO_ROOT" || exit 1

DEFAULT_CONTENDERS="sluice nginx haproxy"
CONTENDERS=${CONTENDERS:-$DEFAULT_CONTENDERS}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}            # per contender, before round 1; 0 disables
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ORDER=${ORDER:-fixed}           # fixed: same order every round; rotate: shift by one per round
PIN=${PIN:-0}                   # 1: proxy on CPU 0, upstream + wrk on the other CPUs
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
RATIOS=${RATIOS:-"sluice:nginx sluice:haproxy"}
WRK_TIMEOUT=${WRK_TIMEOUT:-2s}
READY_TIMEOUT=${READY_TIMEOUT:-10}   # seconds to wait for a server to come up
KEEP_TMP=${KEEP_TMP:-0}
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

ensure_packages() {  # install nginx, haproxy, wrk from Debian if missing; never start services
  local missing=()
  command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || missing+=(nginx)
  command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v wrk     >/dev/null 2>&1 || missing+=(wrk)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v pgrep   >/dev/null 2>&1 || missing+=(procps)
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
declare -A C_PID C_PORT C_PATH

add_contender() {  # add_contender NAME PID PORT [PATH]
  CONTENDER_LIST+=("$1")
  C_PID[$1]=$2; C_PORT[$1]=$3; C_PATH[$1]=${4:-/}
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

start_contender_sluice() {
  local port=$1 admin_port=$2 bin=$SLUICE_BIN conf="$WORK/sluice.yaml"
  if [ ! -x "$bin" ]; then
    log "$bin not found: building Sluice (Release)"
    { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
      cmake --build build -j2 --target sluice; } >&2 || die "building sluice failed"
    bin=build/sluice
    [ -x "$bin" ] || die "build finished but $bin is missing"
  fi
  cat >"$conf" <<EOF
server: { listen: "127.0.0.1:$port", threads: 1, max_connections: 10000 }
admin:  { listen: "127.0.0.1:$admin_port" }
upstream: { url: "http://127.0.0.1:$UP_PORT", max_idle_per_worker: 256 }
log: { level: warn }
EOF
  start_bg sluice proxy -- "$bin" --config "$conf"
  wait_log_line "$WORK/sluice.err.log" "proxy listening on 127.0.0.1:$port" "$BG_PID" sluice
  add_contender sluice "$BG_PID" "$port"
}

start_contender_nginx() {
  local port=$1 conf="$WORK/nginx.conf"
  {
    nginx_common nginx
    echo "http {"
    nginx_http_common nginx
    cat <<EOF
    upstream backend {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
  } >"$conf"
  start_bg nginx proxy -- nginx -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$conf" -g 'daemon off;'
  wait_port "$port" "$BG_PID" nginx
  add_contender nginx "$BG_PID" "$port"
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
run_wrk() {  # run_wrk NAME DURATION OUTFILE -> sets CPU_TICKS (CPU used by the contender during the run)
  local name=$1 dur=$2 out=$3 pid=${C_PID[$1]} t0 t1
  local url="http://127.0.0.1:${C_PORT[$1]}${C_PATH[$1]}"
  t0=$(cpu_ticks "$pid")
  pin_prefix other
  # in the background + wait, so that a signal interrupts the run at once
  "${PIN_CMD[@]}" wrk --latency -t "$THREADS" -c "$CONNECTIONS" -d "$dur" --timeout "$WRK_TIMEOUT" "$url" >"$out" 2>&1 </dev/null &
  WRK_PID=$!
  wait "$WRK_PID"
  WRK_PID=""
  t1=$(cpu_ticks "$pid")
  kill -0 "$pid" 2>/dev/null || { show_log "$name"; die "$name died during the run"; }
  CPU_TICKS=$((t1 - t0))
}

check_proxies() {
  local name got status body
  for name in "${CONTENDER_LIST[@]}"; do
    got=$(http_get "http://127.0.0.1:${C_PORT[$name]}${C_PATH[$name]}")
    status=${got%%$'\t'*}; body=${got#*$'\t'}
    if [ "$status" != 200 ] || [ "$body" != "$UPSTREAM_BODY" ]; then
      show_log "$name"; die "$name does not proxy: got status $status body '$body'"
    fi
    say "check: $name on 127.0.0.1:${C_PORT[$name]} -> $status '$body'"
  done
}

summarize() {  # summarize TSV -> table of medians + ratios
  python3 - "$1" "$RATIOS" "${CONTENDER_LIST[*]}" <<'EOF'
import sys, statistics
tsv, ratios, order = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rows = {}
for line in open(tsv):
    if line.startswith("#"): continue
    rnd, name, rps, p50, p99, req, non, sock, ticks, cpu = line.split("\t")
    rows.setdefault(name, []).append(dict(rps=float(rps), p50=float(p50), p99=float(p99),
        non=int(non), sock=int(sock), cpu=float(cpu)))
med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99", "cpu")}
       for n, rs in rows.items()}
hdr = f"{'proxy':<12} | {'req/s':>10} | {'p50 ms':>8} | {'p99 ms':>8} | {'CPU us/req':>10} | errors (non2xx/socket, all rounds)"
print(hdr); print("-" * len(hdr))
for n in order:
    if n not in rows: continue
    m = med[n]; non = sum(r["non"] for r in rows[n]); sock = sum(r["sock"] for r in rows[n])
    print(f"{n:<12} | {m['rps']:>10.0f} | {m['p50']:>8.3f} | {m['p99']:>8.3f} | {m['cpu']:>10.2f} | {non}/{sock}")
printed = False
for pair in ratios:
    a, _, b = pair.partition(":")
    if a not in med or b not in med: continue
    if not printed:
        print(); print("ratios (medians; req/s higher is better, p99 and CPU lower is better):"); printed = True
    A, B = med[a], med[b]
    div = lambda x, y: f"{x / y:.2f}" if y else "n/a"
    print(f"  {a}/{b}: req/s {div(A['rps'], B['rps'])}  p99 {div(A['p99'], B['p99'])}  CPU/req {div(A['cpu'], B['cpu'])}")
if not printed:
    print(); print(f"ratios: none ({' '.join(ratios) or 'RATIOS empty'}: not both measured)")
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
  printf '#round\tproxy\trps\tp50_ms\tp99_ms\trequests\tnon2xx\tsockerr\tcpu_ticks\tcpu_us_per_req\n' >"$tsv"

  local clk; clk=$(getconf CLK_TCK)
  say "Sluice benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "command: $0 $*"
  say "env: CONTENDERS=\"$CONTENDERS\" ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS ORDER=$ORDER PIN=$PIN"
  say "machine: nproc=$(nproc) kernel=$(uname -r) cpu=\"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\""
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  say "load average at start: $load$(awk '$1 > 0.5 { printf "  (WARNING: machine busy, results will be noisy)" }' /proc/loadavg)"
  say "versions: $(nginx -v 2>&1 | sed 's/.*version: //'), $(haproxy -v 2>/dev/null | head -n1 | awk '{print "haproxy/"$3}'), $(wrk -v 2>&1 | head -n1 | awk '{print $1"/"$2}')"

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

  if [ "$WARMUP" != 0 ]; then
    for name in "${CONTENDER_LIST[@]}"; do
      log "warm-up $name ($WARMUP)"
      run_wrk "$name" "$WARMUP" "$WORK/warmup-$name.txt"
    done
  fi

  local r n=${#CONTENDER_LIST[@]} k ticks rps p50 p99 req non sock cpu out
  say ""
  say "per run: round proxy req/s p50ms p99ms requests non2xx sockerr cpu_us/req"
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
      if [ "$ORDER" = rotate ]; then name=${CONTENDER_LIST[$(((k + r - 1) % n))]}; else name=${CONTENDER_LIST[$k]}; fi
      out="$WORK/run-$r-$name.txt"
      log "round $r/$ROUNDS: $name ($DURATION, $CONNECTIONS conns, $THREADS threads)"
      run_wrk "$name" "$DURATION" "$out"; ticks=$CPU_TICKS
      read -r rps p50 p99 req non sock <<<"$(parse_wrk "$out")"
      [ "$req" -gt 0 ] || { cat "$out" >&2; die "wrk completed no requests against $name"; }
      cpu=$(awk -v t="$ticks" -v c="$clk" -v q="$req" 'BEGIN { printf "%.3f", t / c * 1e6 / q }')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$rps" "$p50" "$p99" "$req" "$non" "$sock" "$ticks" "$cpu" >>"$tsv"
      say "$(printf '  %d %-10s %10.0f %8.3f %8.3f %10d %6d %6d %8.2f' "$r" "$name" "$rps" "$p50" "$p99" "$req" "$non" "$sock" "$cpu")"
    done
  done

  say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  say ""
  say "medians over $ROUNDS round(s), $DURATION each, $CONNECTIONS connections, $THREADS wrk threads, 1 proxy worker thread:"
  local table; table=$(summarize "$tsv") || die "summary failed"
  say "$table"

  mkdir -p "$RESULTS_DIR"
  cp "$REPORT" "$RESULTS_DIR/latest.txt.tmp" && mv "$RESULTS_DIR/latest.txt.tmp" "$RESULTS_DIR/latest.txt"
  cp "$tsv" "$RESULTS_DIR/latest.tsv"
  log "written: $RESULTS_DIR/latest.txt (raw runs: latest.tsv)"
}

main "$@"
