#!/usr/bin/env bash
# Redis CPU per call of the rate-limit script (lua/rate_limit.lua), by tier mix.
#
# Starts its own redis-server on a free loopback port (no persistence), loads the script,
# and for each scenario drives N EVALSHAs of one fixed call (one identifier, production
# form: ARGV[1] = "" so the script reads TIME; limits high enough that every call admits
# and commits, except in `reject`) with redis-benchmark, then reads `usec_per_call` of
# evalsha from INFO commandstats. `inner` is the usec of the commands the script ran
# (redis.call) per EVALSHA; `rest` = evalsha - inner: the Lua code, the calls' Lua side
# and EVALSHA's own overhead. `cpu` is redis-server's CPU time per EVALSHA (its main thread's
# run time in /proc/PID/schedstat over the redis-benchmark run: the commands, the clients'
# reading and writing too): unlike `evalsha`, which is elapsed time, it does not grow while
# the server waits for a CPU, so it is the steadier figure on a busy machine. Prints the
# median of RUNS runs.
#
# Before each run: FLUSHALL, then the same call at past instants (time override), so the
# identifier holds a steady state: buckets over the last hour (every minute), the last
# minute (every 6 s) and second (every 100 ms), as a client active for an hour has.
#
# With BATCH=m (m > 1) each EVALSHA is the script's batch mode deciding m copies of the
# call in turn, as the Redis store sends the checks of one event-loop turn; the figures are
# then per decision (per EVALSHA / m). The m copies share the identifier (one client's burst:
# each reads the commits of the ones before it from the script's memory; each after the first
# is sent as "=", as the store sends a repeat, or with REPEATS=0 in full, as a script before
# the "=" and "~" forms needs), or with DISTINCT=1 each has its own (m clients, each after the first
# sent as "~" and its keys, or in full with REPEATS=0), each warmed as below.
#
# With several scripts (e.g. the committed one and a candidate), their runs alternate,
# script by script within each round, so that both see the same machine: on a shared
# machine, compare scripts in one invocation only.
#
# A script written in parts (lua/rate_limit.lua and lua/parts/) is assembled first, as the build
# does (cmake/embed_lua.cmake); an old single-file script is loaded as it is.
#
# usage: bench/lua_bench.sh [script.lua ...]   env: N (20000), RUNS (5), SCENARIOS (all:
#        fixed fixed+sliding default gcra log reject), CLIENTS (16), PIPELINE (16), BATCH (1),
#        DISTINCT (0), REPEATS (1)
# needs: cmake; redis-server, redis-cli, redis-benchmark on PATH (or REDIS_SERVER, REDIS_CLI,
#        REDIS_BENCHMARK). The ARGV layout follows the header of lua/rate_limit.lua
#        (as src/store/redis_script.cpp builds it).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
scripts=("$@")
[[ ${#scripts[@]} -gt 0 ]] || scripts=("$here/lua/rate_limit.lua")
N=${N:-20000}
BATCH=${BATCH:-1}
DISTINCT=${DISTINCT:-0}
REPEATS=${REPEATS:-1}
RUNS=${RUNS:-5}
CLIENTS=${CLIENTS:-16}
PIPELINE=${PIPELINE:-16}
SERVER=${REDIS_SERVER:-redis-server}
CLI=${REDIS_CLI:-redis-cli}
BENCH=${REDIS_BENCHMARK:-redis-benchmark}

# Below Linux's ephemeral range (32768 on), where the benches' own connections take ports.
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((10000 + RANDOM % 20000))
        if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return; fi
    done
    echo "no free port" >&2; exit 1
}

server_pid=
trap '[[ -z $server_pid ]] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; } || true' EXIT
cli() { "$CLI" -p "$port" "$@"; }
# A port can still be taken between the check and the bind: start again on another.
for _ in 1 2 3 4 5; do
    port=$(free_port)
    "$SERVER" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir /tmp \
        --loglevel warning --daemonize no >/dev/null &
    server_pid=$!
    for _ in $(seq 1 100); do
        cli ping >/dev/null 2>&1 && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.05
    done
    cli ping >/dev/null 2>&1 && break
    kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true
    server_pid=
done
[[ -n $server_pid ]] || { echo "redis-server did not start" >&2; exit 1; }
# A script in parts (its "-- #include" lines) is assembled as the build does.
assembled=$(mktemp -d)
trap '[[ -z $server_pid ]] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; } || true; rm -rf "$assembled"' EXIT
shas=()
for i in "${!scripts[@]}"; do
    cmake -DINPUT="$(realpath "${scripts[$i]}")" -DLUA_OUTPUT="$assembled/$i.lua" -P "$here/cmake/embed_lua.cmake"
    shas+=("$(cli -x script load <"$assembled/$i.lua")")
done

# A tier: algorithm limit per_us bucket_us buckets burst interval_us tolerance_us
# min_interval_us horizon_us id (tier::from's derived values).
BIG=1000000000
fixed_1s=(f $BIG 1000000 1000000 1 0 0 0 0 1000000 bench/ip/fixed/1s/1s)
sliding_1m=(s $BIG 60000000 6000000 10 0 0 0 0 60000000 bench/ip/sliding/1m/6s)
sliding_1s=(s $BIG 1000000 100000 10 0 0 0 0 1000000 default/ip/sliding/1s/100ms)
fixed_1m=(f $BIG 60000000 60000000 1 0 0 0 0 60000000 default/ip/fixed/1m/1m)
sliding_1h=(s $BIG 3600000000 60000000 60 0 0 0 0 3600000000 default/ip/sliding/1h/1m)
gcra_1s=(g 1000000 1000000 0 1 1000000 1 1000000 0 1000000 bench/ip/gcra/1s/1000000)
log_1s=(l $BIG 1000000 0 1 0 0 0 0 1000000 bench/ip/log/1s/1s)
reject_1s=(s 100 1000000 100000 10 0 0 0 0 1000000 bench/ip/sliding/1s/100ms)

declare -A scen=(
    [fixed]="fixed_1s"
    [fixed+sliding]="fixed_1s sliding_1m"
    [default]="sliding_1s fixed_1m sliding_1h"
    [gcra]="gcra_1s"
    [log]="log_1s"
    [reject]="reject_1s"
)
order=(fixed fixed+sliding default gcra log reject)
[[ -n ${SCENARIOS:-} ]] && read -r -a order <<<"$SCENARIOS"

# the identifier's HASH (copy c of a DISTINCT batch: its own)
key_of() { echo "bench:{ip:00112233445566778899aabbccddee$(printf '%02x' "$1")}"; }
# one_call SHA KEY TIER...: sets keys, argv and CALL, the EVALSHA of one identifier
one_call() {
    local sha=$1 key=$2
    shift 2
    keys=("$key")
    argv=("" 1 1 "$#")
    local name
    for name in "$@"; do
        local -n t=$name
        argv+=("${t[@]}")
        [[ ${t[0]} == l ]] && keys+=("$key:log:${t[10]}")
    done
    CALL=(EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "${argv[@]}")
    # for warm: the call as one line, its time override (ARGV[1]) a word T
    CALLS+=("EVALSHA $sha ${#keys[@]} ${keys[*]} T ${argv[*]:1}")
}
# call SHA TIER...: CALLS, the EVALSHA of each identifier the benchmark uses (to warm), and
# RUN, what it sends (that call, or BATCH copies of it in one batch call)
call() {
    local sha=$1 c
    shift
    CALLS=()
    one_call "$sha" "$(key_of 0)" "$@"
    RUN=("${CALL[@]}")
    if ((BATCH > 1)); then
        local -a bkeys=() bargv=("" batch "$BATCH")
        for ((c = 0; c < BATCH; c++)); do
            if ((DISTINCT && c > 0)); then
                one_call "$sha" "$(key_of "$c")" "$@"
                if ((REPEATS)); then
                    bkeys+=("${keys[@]}")
                    bargv+=("~")
                    continue
                fi
            elif ((REPEATS && c > 0)); then
                bargv+=(=)
                continue
            fi
            bkeys+=("${keys[@]}")
            bargv+=(- "${argv[@]:1}")
        done
        RUN=(EVALSHA "$sha" "${#bkeys[@]}" "${bkeys[@]}" "${bargv[@]}")
    fi
}

warm() {
    local sec usec t0 k
    { read -r sec; read -r usec; } < <(cli time)
    t0=$((sec * 1000000 + usec))
    {
        for k in $(seq 59 -1 1); do echo $((t0 - k * 60000000)); done
        for k in $(seq 9 -1 1); do echo $((t0 - k * 6000000)); done
        for k in $(seq 9 -1 1); do echo $((t0 - k * 100000)); done
    } | sort -n | while read -r t; do  # ascending: a key's last time only grows
        local one
        for one in "${CALLS[@]}"; do
            local -a w=($one)
            w[$((3 + w[2]))]=$t
            echo "${w[*]}"
        done
    done | cli >/dev/null
}

stat() {  # stat <commandstats> <command> <field>
    awk -F'[:,=]' -v c="cmdstat_$2" -v f="$3" '$1 == c {for (i = 2; i < NF; i += 2) if ($i == f) print $(i+1)}' <<<"$1"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# sanity: every call works and returns a decision
for s in "${order[@]}"; do
    for sha in "${shas[@]}"; do
        call "$sha" ${scen[$s]}
        out=$(cli "${RUN[@]}" 2>&1 | head -1)
        [[ $out =~ ^[0-9]+$ ]] || { echo "scenario $s: bad reply: $out" >&2; exit 1; }
    done
done

for i in "${!scripts[@]}"; do echo "script $i: ${scripts[$i]}"; done
printf '%-14s %-6s %8s %8s %8s %8s   (N=%d, -c %d -P %d, BATCH %d, DISTINCT %d, REPEATS %d, median of %d runs; µs per decision)\n' \
    scenario script evalsha inner rest cpu "$N" "$CLIENTS" "$PIPELINE" "$BATCH" "$DISTINCT" "$REPEATS" "$RUNS"
for s in "${order[@]}"; do
    declare -A per=() inn=() cpu=()
    for _ in $(seq 1 "$RUNS"); do
        for i in "${!scripts[@]}"; do
            call "${shas[$i]}" ${scen[$s]}
            cli flushall >/dev/null
            [[ $s == reject ]] || warm
            cli config resetstat >/dev/null
            read -r ns0 _ </proc/"$server_pid"/schedstat
            "$BENCH" -p "$port" -n "$N" -c "$CLIENTS" -P "$PIPELINE" -q "${RUN[@]}" >/dev/null
            read -r ns1 _ </proc/"$server_pid"/schedstat
            st=$(cli info commandstats | tr -d '\r')
            calls=$(($(stat "$st" evalsha calls) * BATCH))
            usec=$(stat "$st" evalsha usec)
            inner=$(awk -F'[:,=]' -v c="$calls" '/^cmdstat_/ && $1 != "cmdstat_evalsha" && $1 != "cmdstat_config" \
                     {for (i = 2; i < NF; i += 2) if ($i == "usec") u += $(i+1)} END {printf "%.2f", u / c}' <<<"$st")
            per[$i]+="$(awk -v u="$usec" -v c="$calls" 'BEGIN {printf "%.2f", u / c}') "
            inn[$i]+="$inner "
            cpu[$i]+="$(awk -v n=$((ns1 - ns0)) -v c="$calls" 'BEGIN {printf "%.2f", n / 1000 / c}') "
        done
    done
    for i in "${!scripts[@]}"; do
        m=$(printf '%s\n' ${per[$i]} | median)
        mi=$(printf '%s\n' ${inn[$i]} | median)
        mc=$(printf '%s\n' ${cpu[$i]} | median)
        printf '%-14s %-6s %8.2f %8.2f %8.2f %8.2f   runs: %s cpu: %s\n' "$s" "$i" "$m" "$mi" \
            "$(awk -v a="$m" -v b="$mi" 'BEGIN {printf "%.2f", a - b}')" "$mc" "${per[$i]}" "${cpu[$i]}"
    done
    unset per inn cpu
done
