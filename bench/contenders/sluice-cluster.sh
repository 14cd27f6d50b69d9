# shellcheck shell=bash
# sluice-cluster: sluice-redis on a 3-primary Redis Cluster: one EVALSHA per identifier
# (here one: the client address), routed by slot, the checks of one turn batched per slot
# (here all: one client address); redis-server CPU and commands summed over the nodes.
contender sluice-cluster default=110 needs=cluster \
  ratios="sluice-cluster:sluice-redis"

start_contender_sluice_cluster() {  # PORT ADMIN_PORT
  local seed=${CLUSTER_NODES%% *}
  start_sluice_store sluice-cluster "$1" "$2" redis-cluster "127.0.0.1:${seed#*:}"
}
