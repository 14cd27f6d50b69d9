# shellcheck shell=bash
# bench/run.sh helpers: the bench's own Redis (one redis-server, or a 3-primary Redis
# Cluster), started once for the contenders that declare needs=redis / needs=cluster, and
# what is read around their runs (redis-server's CPU and commands, Sluice's counters).

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
