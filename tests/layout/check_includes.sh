#!/usr/bin/env bash
# Fails when a file under src/ includes a module its own may not depend on. The table is
# the dependency order of docs/design.md ("Modules and their order"): each module lists the
# modules below it that it may use.
# Usage: check_includes.sh SOURCE_DIR
set -euo pipefail
src="${1:-$(dirname "$0")/../..}/src"
declare -A may_use=(
  [app]="server proxy route identity limit store http config metrics"
  [server]="proxy route identity limit http config metrics"
  [proxy]="http config metrics"
  [route]="limit http config"
  [identity]="http config"
  [limit]="identity http config metrics"
  [store]="limit config metrics"
  [http]="config metrics"
  [config]=""
  [metrics]=""
)
bad=0
while IFS= read -r line; do
  file=${line%%:*}
  rest=${line#*:}
  module=${file#"$src"/}; module=${module%%/*}
  used=$(sed -E 's/^[^"]*#include "([a-z_]+)\/.*/\1/' <<<"$rest")
  [ "$used" = "$module" ] && continue
  if [ -z "${may_use[$module]+x}" ]; then
    echo "$file: module '$module' is not in the dependency table (tests/layout/check_includes.sh, DESIGN.md)"; bad=1; continue
  fi
  if [[ " ${may_use[$module]} " != *" $used "* ]]; then
    echo "$file: $module/ may not include $used/ ($rest)"; bad=1
  fi
done < <(grep -rHE '^#include "[a-z_]+/' "$src" --include='*.cpp' --include='*.hpp')
if [ "$bad" = 0 ]; then echo "module layout: every include points down"; fi
exit "$bad"
