# shellcheck shell=bash
# bench/run.sh helpers: output, set-up and cleanup of what the bench started, packages, free
# ports, waiting for a server, HTTP checks, CPU pinning, background start, CPU ticks, wrk runs.
# Sourced by bench/run.sh and bench/pool_failover.sh; uses their settings (READY_TIMEOUT, PIN,
# KEEP_TMP, THREADS, CONNECTIONS, WRK_TIMEOUT, ...).

WORK=""                  # temp dir: configs, logs, wrk output (set by main)
NOFILE=1024 MAXCONN=400  # open-files limit and per-server connection cap (set by main)
STARTED_PIDS=()          # every process this script started (by PID)
REPORT=""                # the report file, a copy of what say printed
WRK_PID=""               # the running wrk, if any
UPSTREAM_BODY="hello from upstream"    # what every upstream answers
HASH_SECRET=bench-only-hash-secret     # SLUICE_HASH_SECRET for every Sluice (keyed hashing, as in production)

say() {  # print and record in the report
  printf '%s\n' "$*"
  [ -n "$REPORT" ] && printf '%s\n' "$*" >>"$REPORT"
  return 0
}
log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# bench_setup: packages, the open-files limit (NOFILE, MAXCONN), the temp dir WORK and the
# report file in it
bench_setup() {
  [ "$(id -u)" = 0 ] || log "warning: not root; installing packages will fail if any are missing"
  ensure_packages
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  NOFILE=$(ulimit -n); [ "$NOFILE" = unlimited ] && NOFILE=65536
  MAXCONN=$(((NOFILE - 200) / 2)); [ $MAXCONN -gt 20000 ] && MAXCONN=20000
  WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX) || die "mktemp failed"
  chmod 755 "$WORK"            # nginx workers run as an unprivileged user
  REPORT="$WORK/report.txt"; : >"$REPORT"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "${WRK_PID:-}" ] && kill -TERM "$WRK_PID" 2>/dev/null
  stop_pids "${STARTED_PIDS[@]}"
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    if [ "$KEEP_TMP" = 1 ] || [ $rc -ne 0 ]; then log "temp dir kept: $WORK"; else rm -rf "$WORK"; fi
  fi
  exit $rc
}

# stop_pids PID...: ends processes this script started (and their children, e.g. nginx
# workers, so nothing survives a forced kill): SIGTERM, up to 5 s for a graceful exit, then
# SIGKILL; reaps them and drops them from STARTED_PIDS
stop_pids() {
  local pid kids=() i alive keep=()
  for pid in "$@"; do
    kill -0 "$pid" 2>/dev/null && mapfile -t -O "${#kids[@]}" kids < <(pgrep -P "$pid" 2>/dev/null || true)
  done
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for i in $(seq 1 50); do
    alive=0
    for pid in "$@" "${kids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "$@" "${kids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
  for pid in "${STARTED_PIDS[@]}"; do [[ " $* " == *" $pid "* ]] || keep+=("$pid"); done
  STARTED_PIDS=("${keep[@]}")
  return 0
}

# install nginx, haproxy, wrk (and what the chosen contenders need: redis-server and
# redis-tools for redis/cluster, nodejs and npm for node) from Debian if missing; never
# start services
ensure_packages() {
  local missing=()
  command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || missing+=(nginx)
  command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v wrk     >/dev/null 2>&1 || missing+=(wrk)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v pgrep   >/dev/null 2>&1 || missing+=(procps)
  if any_needs redis || any_needs cluster; then
    [ -x "$REDIS_SERVER" ] || missing+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  fi
  if any_needs node; then
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
import ssl, sys, urllib.request, urllib.error
try:
    # https: the bench's own self-signed certificate, not verified
    with urllib.request.urlopen(sys.argv[1], timeout=5, context=ssl._create_unverified_context()) as r:
        print(f"{r.status}\t{r.read().decode(errors='replace').strip()}")
except urllib.error.HTTPError as e:
    print(f"{e.code}\t{e.read().decode(errors='replace').strip()}")
except Exception as e:
    print(f"000\t{e}")
EOF
}

make_tls_cert() {  # make_tls_cert: the TLS contenders' certificate, EC P-256, self-signed, in $WORK/tls
  local d="$WORK/tls"
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$d/key.pem" -out "$d/cert.pem" 2>"$d/openssl.log" || { cat "$d/openssl.log" >&2; die "openssl req failed"; }
  chmod 644 "$d/key.pem"   # nginx reads it as root, but HAProxy and Sluice as whoever runs the bench
  cat "$d/cert.pem" "$d/key.pem" >"$d/both.pem"   # HAProxy's crt: certificate and key in one file
  TLS_CERT="$d/cert.pem" TLS_KEY="$d/key.pem" TLS_BOTH="$d/both.pem"
}

tls_session_info() {  # tls_session_info PORT -> "PROTOCOL CIPHER" negotiated by a default openssl client
  timeout 5 openssl s_client -connect "127.0.0.1:$1" -servername localhost </dev/null 2>/dev/null |
    awk '/^New, .*Cipher is/ { p = $2; sub(",", "", p); c = $NF } END { print (p ? p : "?"), (c ? c : "?") }'
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

start_bg() {  # start_bg NAME ROLE -- cmd...   (stdout/stderr -> $WORK/NAME.{out,err}.log); sets BG_PID
  local name=$1 role=$2; shift 3
  pin_prefix "$role"
  # a plain command (not a function) in the background, so $! is the server's own PID
  "${PIN_CMD[@]}" "$@" >"$WORK/$name.out.log" 2>"$WORK/$name.err.log" </dev/null &
  BG_PID=$!
  STARTED_PIDS+=("$BG_PID")
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

# Counts responses by status in wrk's Lua (run.sh: in the uncounted warm-up only, as a
# response() callback costs wrk about a third of its throughput here; pool_failover.sh: in
# its kill runs, whose statuses matter more than their rate). Prints "status CODE COUNT" lines.
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
  local url; url=$(contender_url "$1")
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
