# shellcheck shell=bash
# The contenders: declared by the files bench/contenders/NAME.sh, registered when started.
#
# A contender file holds one declaration and one start function:
#   contender NAME [expect=200|200,429] [needs="redis cluster node pool"] [default=RANK] [ratios="A:B ..."]
#   start_contender_NAME() { ... add_contender NAME PID PORT ... }   (dashes in NAME -> _)
# expect   statuses it answers: 200 (every response 200 with the upstream body, the default)
#          or 200,429 (a rate-limited contender: its 429s are expected, not errors)
# needs    redis: the bench's redis-server, started (once) before its start function, whose
#          CPU and commands are measured during its runs ($REDIS_PORT); cluster: likewise a
#          3-primary Redis Cluster ($CLUSTER_NODES); node: nodejs and npm installed; pool:
#          POOL_SIZE (3) upstreams like the common one, started (once) before its start
#          function ($POOL_PORTS, pool_backends)
# default  its place in DEFAULT_CONTENDERS (ascending); without it, it runs only when
#          named in CONTENDERS
# ratios   pairs it adds to the default RATIOS (in DEFAULT_CONTENDERS order)
# tls      1: it listens with TLS (the bench's EC P-256 certificate, $TLS_CERT/$TLS_KEY):
#          wrk drives https://, and each round also times new connections (full
#          handshakes, then resumed ones) with openssl s_time

declare -A DECL_FILE DECL_EXPECT DECL_NEEDS DECL_DEFAULT DECL_RATIOS DECL_TLS
LOADING_NAME=""          # the contender whose file is being sourced

contender() {  # contender NAME [KEY=VALUE...]: the declaration in a contender file
  local name=$1 kv key value v; shift
  [ -n "$LOADING_NAME" ] && [ "$name" = "$LOADING_NAME" ] ||
    die "contender '$name' declared outside bench/contenders/$name.sh (loading: ${LOADING_NAME:-none})"
  DECL_EXPECT[$name]=200 DECL_NEEDS[$name]="" DECL_DEFAULT[$name]="" DECL_RATIOS[$name]="" DECL_TLS[$name]=0
  for kv in "$@"; do
    key=${kv%%=*} value=${kv#*=}
    case $key in
      expect)  [[ $value == 200 || $value == 200,429 ]] || die "$name: expect=$value (200 or 200,429)"
               DECL_EXPECT[$name]=$value ;;
      needs)   for v in $value; do
                 case $v in redis | cluster | node | pool) ;; *) die "$name: needs '$v' (redis, cluster, node, pool)" ;; esac
               done
               DECL_NEEDS[$name]=$value ;;
      default) [[ $value =~ ^[0-9]+$ ]] || die "$name: default=$value (a number)"
               DECL_DEFAULT[$name]=$value ;;
      ratios)  DECL_RATIOS[$name]=$value ;;
      tls)     [[ $value == 0 || $value == 1 ]] || die "$name: tls=$value (0 or 1)"
               DECL_TLS[$name]=$value ;;
      *)       die "$name: unknown key '$key' (expect, needs, default, ratios, tls)" ;;
    esac
  done
}

load_contenders() {  # sources bench/contenders/*.sh; sets DEFAULT_CONTENDERS and DEFAULT_RATIOS
  local f name
  for f in "$SCRIPT_DIR"/contenders/*.sh; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .sh)
    LOADING_NAME=$name DECL_FILE[$name]=$f
    # shellcheck source=/dev/null
    source "$f" || die "$f: failed to load"
    [ -n "${DECL_EXPECT[$name]:-}" ] || die "$f: no 'contender $name ...' declaration"
    declare -F "start_contender_${name//-/_}" >/dev/null || die "$f: no function start_contender_${name//-/_}"
  done
  LOADING_NAME=""
  local ranked=() others=() ratios=() pairs=()
  mapfile -t ranked < <(for name in "${!DECL_FILE[@]}"; do
    [ -n "${DECL_DEFAULT[$name]}" ] && printf '%s %s\n' "${DECL_DEFAULT[$name]}" "$name"
  done | sort -k1,1n -k2,2 | cut -d' ' -f2)
  mapfile -t others < <(for name in "${!DECL_FILE[@]}"; do
    [ -z "${DECL_DEFAULT[$name]}" ] && printf '%s\n' "$name"
  done | sort)
  for name in "${ranked[@]}" "${others[@]}"; do read -ra pairs <<<"${DECL_RATIOS[$name]}"; ratios+=("${pairs[@]}"); done
  DEFAULT_CONTENDERS="${ranked[*]}"
  DEFAULT_RATIOS="${ratios[*]}"
}

known_contender() { [ -n "${DECL_FILE[$1]:-}" ]; }

needs() {  # needs NAME WHAT: does contender NAME declare needs=WHAT
  [[ " ${DECL_NEEDS[$1]:-} " == *" $2 "* ]]
}

is_tls() { [ "${DECL_TLS[$1]:-0}" = 1 ]; }   # is_tls NAME: declared tls=1

any_tls() {  # any_tls: does any contender in CONTENDERS listen with TLS
  local name
  for name in $CONTENDERS; do is_tls "$name" && return 0; done
  return 1
}

any_needs() {  # any_needs WHAT: does any contender in CONTENDERS need WHAT
  local name
  for name in $CONTENDERS; do needs "$name" "$1" && return 0; done
  return 1
}

# ---------------------------------------------------------------- registration
CONTENDER_LIST=()        # names, in registration (= start) order
declare -A C_PID C_PORT C_PATH C_EXPECT C_REDIS C_METRICS C_SCHEME

# add_contender NAME PID PORT [PATH [EXPECT]]: called by a start function once the server
# is ready. CPU is measured over PID and its direct children (nginx master + workers).
# EXPECT defaults to the declared one. C_REDIS[NAME] (set by need_redis/need_cluster) makes
# the runs measure redis-server; C_METRICS[NAME]=ADMIN_PORT (a Sluice on the Redis store)
# reads its sluice_redis_* counters before and after each run.
add_contender() {
  CONTENDER_LIST+=("$1")
  C_PID[$1]=$2; C_PORT[$1]=$3; C_PATH[$1]=${4:-/}; C_EXPECT[$1]=${5:-${DECL_EXPECT[$1]:-200}}
  C_SCHEME[$1]=http; is_tls "$1" && C_SCHEME[$1]=https
  return 0
}

contender_url() { echo "${C_SCHEME[$1]}://127.0.0.1:${C_PORT[$1]}${C_PATH[$1]}"; }

expects_429() { [[ ",${C_EXPECT[$1]}," == *,429,* ]]; }
