#!/usr/bin/env bash
# Failover of a pool: each proxy in front of 3 upstreams (the pool contenders of bench/run.sh:
# sluice-pool3, nginx-pool3, haproxy-pool3), wrk sending GETs for DURATION seconds, and
# KILL_AFTER seconds in, one upstream killed (SIGKILL to its nginx master and worker, by PID).
# Counted: what the clients saw go wrong, from wrk: "Non-2xx or 3xx responses" (their
# statuses from wrk's Lua counter) and "Socket errors" (connect, read, write, timeout).
#
# Each run gives every proxy a fresh pool (3 upstreams on new free ports) and a fresh proxy
# process, so nothing one proxy's kill did (a dead server marked down, connections cut)
# carries over to the next; the order of the proxies rotates by one each run. Before the
# measured run, a spread check (every server answers) and an uncounted warm-up that must
# see no error. Loopback only; every load is bounded by wrk's duration; every process
# started is ended by PID (bench/lib/common.sh's stop_pids, at the end of its run and on exit).
#
# usage: bench/pool_failover.sh     (as root on Debian 12; see bench/README.md)
#   env: PROXIES="sluice-pool3 nginx-pool3 haproxy-pool3"  RUNS=3  DURATION=10  KILL_AFTER=3
#        KILL_SERVER=2 (which of the 3, 1..3)  WARMUP=1s  CONNECTIONS=64  THREADS=2
#        WRK_TIMEOUT=2s  READY_TIMEOUT=10  SLUICE_BIN=build/sluice  PIN=0  KEEP_TMP=0
# Output: stdout and bench/results/pool_failover.txt (raw rows: pool_failover.tsv).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO_ROOT"

# shellcheck source=lib/common.sh
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/servers.sh
source "$SCRIPT_DIR/lib/servers.sh"
# shellcheck source=lib/registry.sh
source "$SCRIPT_DIR/lib/registry.sh"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
load_contenders

PROXIES=${PROXIES:-sluice-pool3 nginx-pool3 haproxy-pool3}
RUNS=${RUNS:-3}
DURATION=${DURATION:-10}       # seconds of each measured run
KILL_AFTER=${KILL_AFTER:-3}    # seconds into it, the kill
KILL_SERVER=${KILL_SERVER:-2}  # which pool server (1..POOL_SIZE)
WARMUP=${WARMUP:-1s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
WRK_TIMEOUT=${WRK_TIMEOUT:-2s}
READY_TIMEOUT=${READY_TIMEOUT:-10}
SLUICE_BIN=${SLUICE_BIN:-build/sluice}
PIN=${PIN:-0}
KEEP_TMP=${KEEP_TMP:-0}
# shellcheck disable=SC2034  # read by ensure_packages (lib/common.sh)
CONTENDERS=$PROXIES
RESULTS_DIR="$SCRIPT_DIR/results"

[[ $RUNS =~ ^[1-9][0-9]*$ && $DURATION =~ ^[1-9][0-9]*$ && $KILL_AFTER =~ ^[0-9]+$ ]] ||
  die "RUNS, DURATION and KILL_AFTER are whole numbers (RUNS=$RUNS DURATION=$DURATION KILL_AFTER=$KILL_AFTER)"
((KILL_AFTER < DURATION)) || die "KILL_AFTER ($KILL_AFTER) must be under DURATION ($DURATION)"
if ! [[ $KILL_SERVER =~ ^[1-9][0-9]*$ ]] || ((KILL_SERVER > POOL_SIZE)); then die "KILL_SERVER is 1..$POOL_SIZE"; fi
for name in $PROXIES; do
  if ! known_contender "$name" || ! needs "$name" pool; then
    die "$name: not a pool contender (bench/contenders/*.sh with needs=pool)"
  fi
done

# proxy_saw NAME ADMIN_PORT -> the upstream failures the proxy itself recorded in the run, as
# "what:count ...": Sluice's sluice_upstream_errors_total by kind (admin /metrics), nginx's
# error log lines by message (connect() failed, recv() failed ...); "-" for HAProxy (no log)
proxy_saw() {
  case $1 in
    sluice*)
      http_get "http://127.0.0.1:$2/metrics" |
        awk '/^sluice_upstream_errors_total\{/ && $NF > 0 { k = $1; sub(/.*kind="/, "", k); sub(/".*/, "", k); printf "%s%s:%d", (n++ ? " " : ""), k, $NF }
             END { if (!n) printf "none" }' ;;
    nginx*)
      awk '/\[(error|warn)\]/ { m = $0; sub(/^.*: \*[0-9]+ /, "", m); sub(/ while .*/, "", m); sub(/ \(.*/, "", m); gsub(/ /, "_", m); c[m]++ }
           END { for (m in c) printf "%s%s:%d", (n++ ? " " : ""), m, c[m]; if (!n) printf "none" }' "$WORK/$1/error.log" ;;
    *) printf -- - ;;
  esac
}

# failover_run RUN NAME TSV: a fresh pool and proxy, the spread check, the warm-up, then the
# measured run with the kill; appends a row to TSV and prints it
failover_run() {
  local run=$1 name=$2 tsv=$3 port admin victims pid killer out rps req non sock cpu errs statuses saw
  start_pool
  read -r port admin <<<"$(free_ports 2)"
  "start_contender_${name//-/_}" "$port" "$admin"
  pid=${C_PID[$name]}
  out="$WORK/warmup-$run-$name.txt"
  run_wrk "$name" "$WARMUP" "$out"
  read -r rps _ _ req non sock <<<"$(parse_wrk "$out")"
  ((req > 0 && non == 0 && sock == 0)) || { cat "$out" >&2; die "$name: the warm-up, before any kill, saw $non non-2xx and $sock socket errors in $req requests"; }

  # the kill: the server's nginx master and its worker, at once, by PID
  victims=("${POOL_PIDS[$((KILL_SERVER - 1))]}")
  mapfile -t -O 1 victims < <(pgrep -P "${victims[0]}" || true)
  ((${#victims[@]} >= 2)) || die "pool-$KILL_SERVER: no nginx worker under its master ${victims[0]}"
  disown "${victims[0]}"   # still reaped by this shell, without a "Killed" job notice on stderr
  (sleep "$KILL_AFTER" && kill -KILL "${victims[@]}") &
  killer=$!
  STARTED_PIDS+=("$killer")
  out="$WORK/run-$run-$name.txt"
  log "run $run/$RUNS: $name, ${DURATION}s, $CONNECTIONS conns; SIGKILL to pool-$KILL_SERVER (PIDs ${victims[*]}) at ${KILL_AFTER}s"
  run_wrk "$name" "${DURATION}s" "$out" -s "$WORK/status.lua"
  wait "$killer" || die "the kill of pool-$KILL_SERVER (PIDs ${victims[*]}) failed"
  for pid in "${victims[@]}"; do ! kill -0 "$pid" 2>/dev/null || die "pool-$KILL_SERVER (PID $pid) survived SIGKILL"; done

  read -r rps _ _ req non sock <<<"$(parse_wrk "$out")"
  ((req > 0)) || { cat "$out" >&2; die "wrk completed no requests against $name"; }
  cpu=$(awk -v t="$CPU_TICKS" -v c="$(getconf CLK_TCK)" -v q="$req" 'BEGIN { printf "%.2f", t / c * 1e6 / q }')
  errs=$(awk '/Socket errors:/ { gsub(",", ""); print $4, $6, $8, $10; f = 1 } END { if (!f) print 0, 0, 0, 0 }' "$out")
  statuses=$(awk '$1 == "status" { printf "%s%s:%s", (n++ ? " " : ""), $2, $3 }' "$out")
  saw=$(proxy_saw "$name" "$admin")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$name" "$req" "$rps" "$cpu" "$non" "$sock" "${errs// /$'\t'}" "$statuses" "$saw" >>"$tsv"
  say "$(printf '  %d %-14s %9d %9.0f %7s %7d %7d  (connect read write timeout: %s)  statuses: %s  proxy saw: %s' \
    "$run" "$name" "$req" "$rps" "$cpu" "$non" "$sock" "$errs" "$statuses" "$saw")"

  stop_pids "${C_PID[$name]}" "$killer" "${POOL_PIDS[@]}"
}

main() {
  bench_setup
  local tsv="$WORK/failover.tsv" r k name names
  printf '#run\tproxy\trequests\trps\tcpu_us_per_req\tnon2xx\tsockerr\tconnect\tread\twrite\ttimeout\tstatuses\tproxy_saw\n' >"$tsv"
  printf '%s\n' "$STATUS_LUA" >"$WORK/status.lua"
  read -ra names <<<"$PROXIES"
  say "Sluice pool failover  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "env: PROXIES=\"$PROXIES\" RUNS=$RUNS DURATION=$DURATION KILL_AFTER=$KILL_AFTER KILL_SERVER=$KILL_SERVER WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS THREADS=$THREADS WRK_TIMEOUT=$WRK_TIMEOUT"
  say "machine: nproc=$(nproc) kernel=$(uname -r); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  say "versions: $(nginx -v 2>&1 | sed 's/.*version: //'), $(haproxy -v 2>/dev/null | head -n1 | awk '{print "haproxy/"$3}'), $(wrk -v 2>&1 | head -n1 | awk '{print $1"/"$2}')"
  say "each run, each proxy: a fresh pool of $POOL_SIZE nginx upstreams and a fresh proxy; wrk GETs for ${DURATION}s;"
  say "at ${KILL_AFTER}s SIGKILL to pool server $KILL_SERVER (master and worker); wrk --timeout $WRK_TIMEOUT, with a Lua status counter"
  say ""
  say "per run: run proxy requests req/s cpu_us/req non2xx sockerr"
  for ((r = 1; r <= RUNS; r++)); do
    for ((k = 0; k < ${#names[@]}; k++)); do
      name=${names[$(((k + r - 1) % ${#names[@]}))]}
      failover_run "$r" "$name" "$tsv"
    done
  done
  say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  say ""
  say "$(python3 - "$tsv" "$PROXIES" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"): continue
    f = line.rstrip("\n").split("\t")
    rows[f[1]].append(dict(req=int(f[2]), rps=float(f[3]), cpu=float(f[4]), non=int(f[5]), sock=int(f[6]),
                           kinds=list(map(int, f[7:11])), st=f[11] if len(f) > 11 else "",
                           saw=f[12] if len(f) > 12 else "-"))
print("errors seen by clients after one of 3 servers was killed (medians over runs; all runs in brackets):")
hdr = f"{'proxy':<14} | {'requests':>9} | {'req/s':>7} | {'non-2xx':>14} | {'socket errors':>14} | errors per 10^6 requests | statuses (all runs)"
print(hdr); print("-" * len(hdr))
for n in sys.argv[2].split():
    rs = rows.get(n)
    if not rs: continue
    med = lambda k: statistics.median(r[k] for r in rs)
    non = f"{med('non'):.0f} ({'/'.join(str(r['non']) for r in rs)})"
    sock = f"{med('sock'):.0f} ({'/'.join(str(r['sock']) for r in rs)})"
    ppm = statistics.median(1e6 * (r["non"] + r["sock"]) / r["req"] for r in rs)
    st = collections.Counter()
    for r in rs:
        for kv in r["st"].split():
            c, _, v = kv.partition(":"); st[c] += int(v)
    kinds = [sum(r["kinds"][i] for r in rs) for i in range(4)]
    saw = collections.Counter()
    for r in rs:
        for kv in r["saw"].split():
            c, _, v = kv.partition(":")
            if v: saw[c] += int(v)
    print(f"{n:<14} | {med('req'):>9.0f} | {med('rps'):>7.0f} | {non:>14} | {sock:>14} | {ppm:>24.1f} | "
          + " ".join(f"{c}:{v}" for c, v in sorted(st.items()))
          + f"; socket errors connect/read/write/timeout {'/'.join(map(str, kinds))}")
    if saw: print(f"{'':<14}   the proxy saw (all runs): " + " ".join(f"{c}:{v}" for c, v in sorted(saw.items())))
EOF
)"
  mkdir -p "$RESULTS_DIR"
  cp "$REPORT" "$RESULTS_DIR/pool_failover.txt"
  cp "$tsv" "$RESULTS_DIR/pool_failover.tsv"
  log "written: $RESULTS_DIR/pool_failover.txt (raw runs: pool_failover.tsv)"
}

main "$@"
