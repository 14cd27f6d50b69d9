# shellcheck shell=bash
# node-redis: the Node peer (bench/node-peer/server.js): express + rate-limiter-flexible
# RateLimiterRedis (ioredis, on the bench's redis-server) + http-proxy with a keep-alive
# agent; the same never-rejecting limit keyed by client IP; one single-threaded process.
# NODE_LIMITERS, NODE_AUTOPIPELINE: see bench/run.sh.
contender node-redis default=120 needs="redis node" \
  ratios="node-redis:nginx"

start_contender_node_redis() {  # PORT
  local port=$1
  ensure_node_peer
  start_bg node-redis proxy -- env PORT="$port" UPSTREAM="http://127.0.0.1:$UP_PORT" REDIS_PORT="$REDIS_PORT" \
    LIMITERS="$NODE_LIMITERS" AUTOPIPELINE="$NODE_AUTOPIPELINE" NODE_ENV=production \
    node "$NODE_PEER_DIR/server.js"
  wait_log_line "$WORK/node-redis.err.log" "node peer listening on 127.0.0.1:$port" "$BG_PID" node-redis
  add_contender node-redis "$BG_PID" "$port"
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
