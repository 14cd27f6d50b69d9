#!/usr/bin/env bash
# Fails when a file under src/ reaches a module its own may not depend on: by its own
# #include, or through the headers of other modules it includes. The table is the
# dependency order of docs/design.md ("Modules and their order"); a request's phases read down it (server runs them:
# read the head -> route -> identify -> limit -> exchange).
# Usage: check_includes.sh SOURCE_DIR
set -euo pipefail
src="${1:-$(dirname "$0")/../..}/src"

# Each module and the modules below it that it may use.
declare -A may_use=(
  [app]="service server upstream proxy route identity limit store tls http config metrics base"  # wires the rest
  [service]="server upstream proxy route identity limit tls http config metrics base"  # Envoy's rate-limit service: calls decided on the workers (server/worker.hpp reaches all server does)
  [server]="upstream proxy route identity limit tls http config metrics base"            # the session runs every phase
  [upstream]="proxy tls http config metrics base"  # pools of servers: balancing, health, DNS, retries' budget
  [proxy]="tls http config metrics base"                                      # the exchange with the upstream
  [route]="limit config base"                                               # a request's route (see below)
  [store]="limit identity config metrics base"                                       # the stores behind limit::store
  [limit]="identity config metrics base"  # the limit step: the caller, never an HTTP message (no http/)
  [identity]="http config base"           # the identify step: a request's head and peer -> the caller
  [tls]="config metrics base"  # the byte stream (plain or TLS) and the TLS contexts
  [http]="config metrics base"
  [config]="base"
  [metrics]="base"
  [base]=""  # text, sizes, coroutine helpers: the room at the bottom every module may use
)
# Where a module may use only some headers of another.
#
# route/ may know limit::policy, and nothing else of limit/: a route names its policy,
# resolved once when a config is compiled (route::route::limits points into the snapshot's
# policies), so that matching a request yields its policy without a second lookup. route/
# knows nothing of the caller, admission or the stores, and limit/ nothing of routes.
declare -A only=(
  [route:limit]="limit/policy.hpp"
)

declare -A includes  # file (path under src/) -> the project headers it includes
declare -A reach     # header -> the modules it reaches, its own included (memo)
files=()
while IFS= read -r f; do
  rel=${f#"$src"/}
  files+=("$rel")
  includes[$rel]=$(sed -nE 's/^#include "([a-z_]+\/[^"]+)".*/\1/p' "$f" | tr '\n' ' ')
done < <(find "$src" -type f \( -name '*.cpp' -o -name '*.hpp' \) | sort)

# Sets reach[$1]: the modules header $1 reaches through its includes, transitively.
reach_of() {
  local h=$1 i m out
  [ -n "${reach[$h]+x}" ] && return 0
  reach[$h]=" "  # an include cycle stops here
  out=" ${h%%/*} "
  for i in ${includes[$h]-}; do
    reach_of "$i"
    for m in ${reach[$i]}; do [[ $out == *" $m "* ]] || out+="$m "; done
  done
  reach[$h]=$out
}

bad=0
for f in "${files[@]}"; do
  module=${f%%/*}
  if [ -z "${may_use[$module]+x}" ]; then
    echo "src/$f: module '$module' is not in the dependency table (tests/layout/check_includes.sh, docs/design.md)"
    bad=1; continue
  fi
  for i in ${includes[$f]}; do
    used=${i%%/*}
    [ "$used" = "$module" ] && continue
    if [[ " ${may_use[$module]} " != *" $used "* ]]; then
      echo "src/$f: $module/ may not include $used/ ($i)"; bad=1; continue
    fi
    if [ -n "${only[$module:$used]+x}" ] && [[ " ${only[$module:$used]} " != *" $i "* ]]; then
      echo "src/$f: $module/ may include only ${only[$module:$used]} of $used/ ($i)"; bad=1; continue
    fi
    reach_of "$i"
    for m in ${reach[$i]}; do
      if [ "$m" != "$module" ] && [[ " ${may_use[$module]} " != *" $m "* ]]; then
        echo "src/$f: $module/ may not reach $m/ (through $i)"; bad=1
      fi
    done
  done
done
if [ "$bad" = 0 ]; then echo "module layout: every include points down"; fi
exit "$bad"
