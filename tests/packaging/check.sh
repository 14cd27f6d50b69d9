#!/usr/bin/env bash
# Packaging checks that need no Docker engine: Dockerfile, compose.yaml (also through
# docker-compose / docker compose config when installed), the containers' health checks,
# drain and stop timeouts, conf/*.yaml (each passes --check; the four samples share one
# block), conf/grafana-dashboard.json, the metrics table in docs/operations.md.
#   check.sh SOURCE_DIR SLUICE_BINARY
# Prints one line per check; exits 1 after listing every failure.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCE_DIR SLUICE_BINARY" >&2
  exit 2
fi
root=$1
sluice=$2
cd "$root" || { echo "FAIL: cannot enter source dir $root"; exit 1; }

failures=0
ok()   { echo "ok:   $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
note() { echo "note: $*"; }

# Redis store families announced before their code lands; they must be in the dashboard
# and the metrics table of docs/operations.md already. Once the code defines them they are found there as well.
announced_redis=(sluice_redis_commands_total sluice_redis_writes_total
                 sluice_redis_deny_cache_hits_total sluice_redis_timeouts_total
                 sluice_redis_reconnects_total sluice_redis_noscript_reloads_total
                 sluice_redis_connected)

# --- Dockerfile ----------------------------------------------------------------------
# Logical instructions, one per line: "LINENO<TAB>INSTRUCTION<TAB>ARGUMENTS", comments and
# blank lines dropped, backslash continuations joined.
instructions() {
  awk '
    function flush() { if (buf != "") { print start "\t" toupper(word) "\t" rest; buf = "" } }
    {
      line = $0
      if (buf == "" && line ~ /^[ \t]*(#|$)/) next        # comment or blank
      if (buf != "" && line ~ /^[ \t]*#/) next            # comment inside a continuation
      if (buf == "") start = NR
      cont = (line ~ /\\[ \t]*$/)
      if (cont) sub(/\\[ \t]*$/, "", line)
      buf = buf " " line
      if (!cont) {
        sub(/^[ \t]+/, "", buf)
        word = buf; sub(/[ \t].*$/, "", word)
        rest = substr(buf, length(word) + 1); sub(/^[ \t]+/, "", rest)
        flush()
      }
    }
    END { if (buf != "") { sub(/^[ \t]+/, "", buf); word = buf; sub(/[ \t].*$/, "", word); rest = substr(buf, length(word) + 1); sub(/^[ \t]+/, "", rest); flush() } }
  ' "$1"
}

stages=()          # alias of each stage ("" when unnamed), in order
bases=()           # its FROM image
ins=()
if [ ! -f Dockerfile ]; then
  fail "Dockerfile missing"
else
  mapfile -t ins < <(instructions Dockerfile)
  declare -A stage_user=() stage_expose=() stage_health=() stage_entry=()
  stage=-1
  for l in "${ins[@]}"; do
    IFS=$'\t' read -r lineno word args <<<"$l"
    case $word in
      FROM)
        stage=$((stage + 1))
        read -r -a f <<<"$args"
        img=${f[0]}; alias=""
        [[ $img == --platform=* ]] && img=${f[1]}
        for ((i = 0; i < ${#f[@]}; i++)); do
          [ "${f[i],,}" = as ] && alias=${f[i+1]:-}
        done
        base_ok=0
        [ "$img" = debian:12 ] && base_ok=1
        for s in "${stages[@]}"; do [ -n "$s" ] && [ "$s" = "$img" ] && base_ok=1; done
        if ((base_ok)); then ok "Dockerfile:$lineno: stage ${alias:-#$stage} FROM $img (debian:12 or an earlier stage)"
        else fail "Dockerfile:$lineno: stage ${alias:-#$stage} starts FROM $img; every stage must start FROM debian:12 or an earlier stage of this Dockerfile"; fi
        stages+=("$alias"); bases+=("$img")
        ;;
      RUN)
        if grep -qE '(^|[;&|( ])(apt-get|apt|aptitude|dpkg|apk|yum|dnf|microdnf|pip3?|npm|gem|snap)[[:space:]]+(-[^[:space:]]+[[:space:]]+)*(install|add|-i)([[:space:]]|$)' <<<"$args"; then
          fail "Dockerfile:$lineno: RUN installs packages itself instead of through scripts/install-deps.sh: $args"
        elif grep -q 'install-deps\.sh' <<<"$args"; then
          ok "Dockerfile:$lineno: RUN installs packages with install-deps.sh"
        fi
        ;;
      COPY|ADD)
        if [[ $args != *--from=* ]]; then
          read -r -a f <<<"$args"
          f=("${f[@]/--chown=*/}"); f=("${f[@]/--chmod=*/}"); f=("${f[@]/--link/}")
          srcs=()
          for a in "${f[@]}"; do [ -n "$a" ] && srcs+=("$a"); done
          for ((i = 0; i < ${#srcs[@]} - 1; i++)); do
            [ -e "${srcs[i]}" ] || fail "Dockerfile:$lineno: $word source ${srcs[i]} does not exist in the repository"
          done
          if [[ $args == *install-deps.sh* && $args != scripts/install-deps.sh* ]]; then
            fail "Dockerfile:$lineno: install-deps.sh must come from scripts/install-deps.sh: $args"
          fi
        fi
        ;;
      USER) stage_user[$stage]=$args ;;
      EXPOSE) stage_expose[$stage]="${stage_expose[$stage]:-} $args" ;;
      HEALTHCHECK) stage_health[$stage]=$args ;;
      ENTRYPOINT) stage_entry[$stage]=$args ;;
    esac
  done

  # Every stage built straight from debian:12 runs install-deps.sh (build or --runtime).
  for ((s = 0; s < ${#stages[@]}; s++)); do
    [ "${bases[s]}" = debian:12 ] || continue
    body=$(printf '%s\n' "${ins[@]}" | awk -F'\t' -v want=$s '$2 == "FROM" { n++ } n - 1 == want && $2 == "RUN"')
    if grep -q 'install-deps\.sh' <<<"$body"; then ok "stage ${stages[s]:-#$s} (debian:12) runs install-deps.sh"
    else fail "stage ${stages[s]:-#$s} starts from debian:12 but never runs scripts/install-deps.sh"; fi
  done

  # What the final stage inherits: walk its chain of bases within this Dockerfile.
  last=$((${#stages[@]} - 1))
  if ((last < 0)); then
    fail "Dockerfile has no FROM"
  else
    chain=()
    s=$last
    while :; do
      chain+=("$s")
      next=-1
      for ((t = 0; t < s; t++)); do [ -n "${stages[t]}" ] && [ "${stages[t]}" = "${bases[s]}" ] && next=$t; done
      ((next < 0)) && break
      s=$next
    done
    eff() {  # eff ARRAY-NAME: the nearest value along the chain (the final stage first)
      local -n a=$1; local c
      for c in "${chain[@]}"; do [ -n "${a[$c]:-}" ] && { echo "${a[$c]}"; return; }; done
    }
    exposes=""
    for c in "${chain[@]}"; do exposes+=" ${stage_expose[$c]:-}"; done
    user=${stage_user[$last]:-}
    if [ -z "$user" ]; then fail "the final stage (${stages[last]:-#$last}) sets no USER"
    elif [[ $user =~ ^(root|0)(:.*)?$ ]]; then fail "the final stage runs as $user"
    else ok "the final stage (${stages[last]:-#$last}) runs as USER $user"; fi
    for p in 8080 9090; do
      if grep -qE "(^| )$p(/tcp)?( |$)" <<<"$exposes"; then ok "the final stage EXPOSEs $p"
      else fail "the final stage does not EXPOSE $p"; fi
    done
    health=$(eff stage_health)
    if [[ $health == *"9090/healthz"* ]]; then ok "HEALTHCHECK hits /healthz on the admin port: $health"
    else fail "the final stage has no HEALTHCHECK on http://...:9090/healthz (got: ${health:-none})"; fi
    entry=$(eff stage_entry)
    if [[ $entry == *"/usr/local/bin/sluice\""* ]]; then ok "the final stage (what 'docker build .' yields) runs the gateway: $entry"
    else fail "the final stage's ENTRYPOINT is not the gateway (got: ${entry:-none}); keep the gateway stage last"; fi
  fi
fi

# The chain CI uses: .ci/run -> scripts/test.sh -> scripts/install-deps.sh.
code_lines() { grep -vE '^[[:space:]]*(#|$)' "$1"; }
if [ -f .ci/run ] && code_lines .ci/run | grep -qE 'scripts/test\.sh'; then ok ".ci/run runs scripts/test.sh"
else fail ".ci/run does not run scripts/test.sh"; fi
if [ -f scripts/test.sh ] && code_lines scripts/test.sh | grep -qE '(bash|sh|\.)[[:space:]]+scripts/install-deps\.sh'; then
  ok "scripts/test.sh runs scripts/install-deps.sh (the script the Dockerfile uses)"
else fail "scripts/test.sh does not run scripts/install-deps.sh"; fi

# --- compose.yaml ----------------------------------------------------------------------
service_block() {  # the lines of one service under services:, by indentation
  awk -v want="$1" '
    /^[^ #]/ { in_services = ($0 ~ /^services:/); inside = 0; next }
    in_services && /^  [A-Za-z0-9._-]+:/ { name = $1; sub(/:.*/, "", name); inside = (name == want); next }
    in_services && inside { print }
  ' compose.yaml
}
if [ ! -f compose.yaml ]; then
  fail "compose.yaml missing"
else
  structural_ok=1
  if grep -n $'\t' compose.yaml; then fail "compose.yaml contains tabs"; structural_ok=0; fi
  bad_indent=$(awk '!/^[[:space:]]*(#|$)/ { match($0, /^ */); if (RLENGTH % 2) print NR": "$0 }' compose.yaml)
  if [ -n "$bad_indent" ]; then fail "compose.yaml: odd indentation: $bad_indent"; structural_ok=0; fi
  # No top-level name: Debian 12's docker-compose (1.29) refuses it ("'name' does not match
  # any of the regexes"); the project is named after the directory instead.
  if top_name=$(grep -nE '^name:' compose.yaml); then
    fail "compose.yaml:${top_name%%:*}: top-level name: Debian's docker-compose 1.29 refuses it; leave it out (the project is then named after the directory, or by -p)"; structural_ok=0
  else ok "compose.yaml has no top-level name: (which Debian's docker-compose 1.29 refuses)"; fi
  bad_top=$(grep -nE '^[^ #]' compose.yaml | grep -vE '^[0-9]+:(name|services|volumes|networks|configs|secrets|x-[A-Za-z0-9_-]+):' || true)
  if [ -n "$bad_top" ]; then fail "compose.yaml: unexpected top-level keys: $bad_top"; structural_ok=0; fi
  for svc in sluice redis upstream; do
    [ -n "$(service_block $svc)" ] || { fail "compose.yaml: no service '$svc' under services:"; structural_ok=0; }
  done
  sl=$(service_block sluice); rd=$(service_block redis); up=$(service_block upstream)
  expect() {  # expect BLOCK-TEXT REGEX WHAT
    if grep -qE -- "$2" <<<"$1"; then :; else fail "compose.yaml: $3"; structural_ok=0; fi
  }
  expect "$sl" '/etc/sluice/docker\.yaml' "sluice does not run --config /etc/sluice/docker.yaml"
  expect "$sl" '"?([0-9.]+:)?8080:8080"?' "sluice does not publish port 8080"
  expect "$sl" '"?([0-9.]+:)?9090:9090"?' "sluice does not publish port 9090"
  expect "$sl" 'SLUICE_HASH_SECRET' "sluice does not pass SLUICE_HASH_SECRET"
  expect "$sl" '^    depends_on:' "sluice has no depends_on"
  expect "$sl" '^      (- )?redis:?' "sluice does not depend on redis"
  expect "$sl" '^      (- )?upstream:?' "sluice does not depend on upstream"
  expect "$rd" 'image: *"?redis:7' "redis does not use image redis:7"
  expect "$rd" 'noeviction' "redis does not run with --maxmemory-policy noeviction"
  expect "$rd" 'healthcheck:' "redis has no healthcheck"
  # Every build target named in compose.yaml is a stage of the Dockerfile.
  for t in $(grep -oE 'target: *[A-Za-z0-9._-]+' compose.yaml | sed 's/target: *//'); do
    found=0
    for s in "${stages[@]}"; do [ "$s" = "$t" ] && found=1; done
    if ((found)); then ok "compose.yaml build target '$t' is a Dockerfile stage"
    else fail "compose.yaml builds target '$t', which the Dockerfile does not define"; structural_ok=0; fi
  done
  expect "$up" 'target: *demo-upstream' "upstream is not built from the demo-upstream stage"
  # sluice is built from this Dockerfile, as its final (default) stage.
  expect "$sl" '^    build: *\.$|^      context: *\.$' "sluice is not built from this directory's Dockerfile"
  sl_target=$(grep -oE 'target: *[A-Za-z0-9._-]+' <<<"$sl" | sed 's/target: *//')
  if [ -n "$sl_target" ] && ((${#stages[@]})) && [ "$sl_target" != "${stages[-1]}" ]; then
    fail "compose.yaml: sluice builds target '$sl_target', not the Dockerfile's final stage '${stages[-1]}'"; structural_ok=0
  fi
  # The config compose runs is baked into the image at that path.
  if grep -qE '^COPY +conf/docker\.yaml +/etc/sluice/docker\.yaml' Dockerfile; then ok "the image holds /etc/sluice/docker.yaml (from conf/docker.yaml)"
  else fail "the Dockerfile does not COPY conf/docker.yaml to /etc/sluice/docker.yaml"; fi
  if grep -qE '^COPY +conf/container\.yaml +/etc/sluice/container\.yaml' Dockerfile && grep -qE '^CMD .*/etc/sluice/container\.yaml' Dockerfile; then
    ok "the image's default CMD runs /etc/sluice/container.yaml (from conf/container.yaml)"
  else fail "the Dockerfile does not COPY conf/container.yaml to /etc/sluice/ and run it by default"; fi
  ((structural_ok)) && ok "compose.yaml structure: services sluice, redis, upstream; 2-space indentation; ports, depends_on, targets"

  if python3 -c 'import yaml' 2>/dev/null; then
    if python3 - compose.yaml <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
s = doc["services"]
assert set(s) >= {"sluice", "redis", "upstream"}, f"services: {sorted(s)}"
assert "/etc/sluice/docker.yaml" in s["sluice"]["command"], s["sluice"]["command"]
ports = [str(p) for p in s["sluice"]["ports"]]
assert any(p.endswith("8080:8080") for p in ports) and any(p.endswith("9090:9090") for p in ports), ports
deps = s["sluice"]["depends_on"]
assert {"redis", "upstream"} <= set(deps), deps
env = s["sluice"]["environment"]
assert "SLUICE_HASH_SECRET" in (env if isinstance(env, dict) else [e.split("=")[0] for e in env]), env
assert str(s["redis"]["image"]).startswith("redis:7"), s["redis"]["image"]
cmd = s["redis"]["command"]
cmd = cmd if isinstance(cmd, list) else cmd.split()
assert "noeviction" in cmd and cmd[cmd.index("noeviction") - 1] == "--maxmemory-policy", cmd
assert s["upstream"]["build"]["target"] == "demo-upstream", s["upstream"]["build"]
PY
    then ok "compose.yaml parses as YAML (PyYAML) and has the expected services"
    else fail "compose.yaml: PyYAML parse or content check failed (above)"; fi
  else
    note "PyYAML not installed: compose.yaml checked structurally only (no real YAML parse)"
  fi
fi

# --- containers, as a user runs them ---------------------------------------------------
# Docker's and podman's default stop timeout (SIGTERM, then SIGKILL after it): what
# `docker run` and a compose service without stop_grace_period give the gateway.
default_stop=10s
drain_margin_ms=2000        # a drain must end this much before the stop timeout
default_drain=10s           # server.drain_timeout when a config leaves it out

to_ms() {  # to_ms DURATION: "8s", "500ms", "1m30s" -> milliseconds; status 1 if unparsable
  local s=$1 total=0 n
  s=${s//\"/}; s=${s//\'/}
  [[ $s =~ ^([0-9]+(us|ms|s|m|h))+$ ]] || return 1
  while [[ $s =~ ^([0-9]+)(us|ms|s|m|h)(.*)$ ]]; do
    n=$((10#${BASH_REMATCH[1]})); s=${BASH_REMATCH[3]}
    case ${BASH_REMATCH[2]} in
      us) total=$((total + n / 1000)) ;;
      ms) total=$((total + n)) ;;
      s)  total=$((total + n * 1000)) ;;
      m)  total=$((total + n * 60000)) ;;
      h)  total=$((total + n * 3600000)) ;;
    esac
  done
  echo "$total"
}
sub_block() {  # sub_block SERVICE-BLOCK KEY: the lines under one key of a service
  awk -v k="$2" '
    /^[[:space:]]*(#|$)/ { next }
    { match($0, /^ */); ind = RLENGTH }
    ind <= 4 { inside = (ind == 4 && index($0, "    " k ":") == 1); next }
    inside { print }
  ' <<<"$1"
}
compose_services() {
  awk '/^[^ #]/ { in_s = ($0 ~ /^services:/); next }
       in_s && /^  [A-Za-z0-9._-]+:/ { n = $1; sub(/:.*/, "", n); print n }' compose.yaml
}
quoted_items() {  # the double-quoted strings of a flow list, unquoted, one a line
  grep -oE '"([^"\\]|\\.)*"' <<<"$1" | sed -E 's/^"//; s/"$//; s/\\(.)/\1/g'
}
chain_of() {  # chain_of STAGE: the stage, then its base within this Dockerfile, and so on
  local s=$1 t next
  while :; do
    echo "$s"
    next=-1
    for ((t = 0; t < s; t++)); do [ -n "${stages[t]}" ] && [ "${stages[t]}" = "${bases[s]}" ] && next=$t; done
    ((next < 0)) && break
    s=$next
  done
}
stage_index() {  # stage_index ALIAS: its index, or the final stage's for ""
  local t
  [ -z "$1" ] && { echo $((${#stages[@]} - 1)); return; }
  for ((t = 0; t < ${#stages[@]}; t++)); do [ "${stages[t]}" = "$1" ] && { echo "$t"; return; }; done
  echo -1
}
conf_drain() {  # conf_drain FILE: server.drain_timeout as written, or the default
  local d
  d=$(awk '/^[^ #]/ { in_s = ($0 ~ /^server:/); next }
           in_s && /^  drain_timeout:/ { v = $0; sub(/^  drain_timeout: */, "", v); sub(/[ #].*/, "", v); print v; exit }' "$1")
  echo "${d:-$default_drain}"
}
check_drain() {  # check_drain CONF STOP-DURATION WHERE
  local drain d_ms s_ms
  drain=$(conf_drain "$1")
  if ! d_ms=$(to_ms "$drain"); then fail "$1: cannot read server.drain_timeout '$drain'"; return; fi
  if ! s_ms=$(to_ms "$2"); then fail "$3: cannot read the stop timeout '$2'"; return; fi
  if ((d_ms + drain_margin_ms <= s_ms)); then
    ok "$1: server.drain_timeout $drain ends ${drain_margin_ms}ms or more before the stop timeout $2 ($3)"
  else
    fail "$1: server.drain_timeout $drain is not ${drain_margin_ms}ms under the stop timeout $2 ($3): a request in flight is SIGKILLed with the gateway instead of being cut off by the drain"
  fi
}

if [ -f Dockerfile ] && [ -f compose.yaml ] && ((${#stages[@]})); then
  # Parsed HEALTHCHECK of a stage as "TEST US interval_ms US timeout_ms US start_period_ms
  # US retries" (US the unit separator, as TEST may hold "|"), TEST being "sh: COMMAND" (shell form) or "exec: ARG ARG..." (exec form); "" if none.
  image_health() {
    local h="" c opts cmd o interval=30s timeout=30s start=0s retries=3 test
    for c in $(chain_of "$1"); do [ -n "${stage_health[$c]:-}" ] && { h=${stage_health[$c]}; break; }; done
    [ -z "$h" ] || [[ $h =~ ^NONE ]] && return
    opts=${h%%CMD *}; cmd=${h#*CMD }
    for o in $opts; do
      case $o in
        --interval=*) interval=${o#*=} ;;
        --timeout=*) timeout=${o#*=} ;;
        --start-period=*) start=${o#*=} ;;
        --retries=*) retries=${o#*=} ;;
      esac
    done
    if [[ $cmd == \[* ]]; then test="exec: $(quoted_items "$cmd" | paste -sd' ')"; else test="sh: $cmd"; fi
    printf '%s\x1f%s\x1f%s\x1f%s\x1f%s\n' "$test" "$(to_ms "$interval")" "$(to_ms "$timeout")" "$(to_ms "$start")" "$retries"
  }
  # The same from a service's healthcheck: block (Compose's defaults are Docker's).
  compose_health() {
    local hc=$1 v interval timeout start retries test items
    v=$(sed -nE 's/^      test: *//p' <<<"$hc" | sed -E 's/[[:space:]]+#.*$//')
    if [[ $v == \[* ]]; then items=$(quoted_items "$v")
    elif [ -z "$v" ]; then items=$(sed -nE 's/^        - *//p' <<<"$hc" | sed -E 's/^"(.*)"$/\1/; s/^'"'"'(.*)'"'"'$/\1/')
    else items=$'CMD-SHELL\n'$(sed -E 's/^"(.*)"$/\1/; s/^'"'"'(.*)'"'"'$/\1/' <<<"$v")
    fi
    case $(head -n1 <<<"$items") in
      CMD-SHELL) test="sh: $(sed -n 2p <<<"$items")" ;;
      CMD) test="exec: $(tail -n +2 <<<"$items" | paste -sd' ')" ;;
      *) test="unreadable: $v" ;;
    esac
    interval=$(sed -nE 's/^      interval: *//p' <<<"$hc"); timeout=$(sed -nE 's/^      timeout: *//p' <<<"$hc")
    start=$(sed -nE 's/^      start_period: *//p' <<<"$hc"); retries=$(sed -nE 's/^      retries: *//p' <<<"$hc")
    printf '%s\x1f%s\x1f%s\x1f%s\x1f%s\n' "$test" "$(to_ms "${interval:-30s}")" "$(to_ms "${timeout:-30s}")" "$(to_ms "${start:-0s}")" "${retries:-3}"
  }

  gateway_stages=()   # stages whose image runs the gateway, by the final stage's ENTRYPOINT
  shipped=()          # stages that end up in an image: the final one and compose's targets
  for c in $(chain_of $((${#stages[@]} - 1))); do shipped+=("$c"); done
  for svc in $(compose_services); do
    blk=$(service_block "$svc")
    grep -qE '^    build:' <<<"$blk" || continue
    t=$(grep -oE '^      target: *[A-Za-z0-9._-]+' <<<"$blk" | sed 's/.*target: *//' || true)
    idx=$(stage_index "$t")
    ((idx < 0)) && continue   # reported above
    for c in $(chain_of "$idx"); do shipped+=("$c"); done
    label="service $svc (stage ${stages[idx]:-#$idx})"

    # (1) The image's HEALTHCHECK, repeated in compose.yaml.
    want=$(image_health "$idx")
    hc=$(sub_block "$blk" healthcheck)
    if [ -z "$want" ]; then
      note "compose.yaml: $label: its stage has no HEALTHCHECK to repeat"
    elif [ -z "$hc" ]; then
      fail "compose.yaml: $label has no healthcheck: (the image's is ${want%%$'\x1f'*}); builders that drop HEALTHCHECK (podman build, OCI format) leave it unchecked"
    else
      got=$(compose_health "$hc")
      IFS=$'\x1f' read -r w_test w_int w_to w_sp w_re <<<"$want"
      IFS=$'\x1f' read -r g_test g_int g_to g_sp g_re <<<"$got"
      bad=()
      [ "$w_test" = "$g_test" ] || bad+=("test '$g_test', the image's '$w_test'")
      [ "$w_int" = "$g_int" ] || bad+=("interval ${g_int}ms, the image's ${w_int}ms")
      [ "$w_to" = "$g_to" ] || bad+=("timeout ${g_to}ms, the image's ${w_to}ms")
      [ "$w_sp" = "$g_sp" ] || bad+=("start_period ${g_sp}ms, the image's ${w_sp}ms")
      [ "$w_re" = "$g_re" ] || bad+=("retries $g_re, the image's $w_re")
      if ((${#bad[@]})); then fail "compose.yaml: $label: healthcheck differs from the Dockerfile's HEALTHCHECK: $(IFS=';'; echo "${bad[*]}")"
      else ok "compose.yaml: $label has the image's health check (${w_test}; interval ${w_int}ms, timeout ${w_to}ms, start period ${w_sp}ms, retries $w_re)"; fi
    fi

    # (2) The config the service's gateway runs drains within its stop timeout.
    entry=""
    for c in $(chain_of "$idx"); do [ -n "${stage_entry[$c]:-}" ] && { entry=${stage_entry[$c]}; break; }; done
    [[ $entry == *"/usr/local/bin/sluice\""* ]] || continue
    cmdtxt=$(grep -E '^    command:' <<<"$blk"; sub_block "$blk" command)
    path=$(grep -oE "[^][ \"',]+\.ya?ml" <<<"$cmdtxt" | head -n1 || true)
    [ -z "$path" ] && path=$(grep -E '^CMD ' Dockerfile | grep -oE "[^][ \"',]+\.ya?ml" | tail -n1)
    conf=$(grep -oE "\./conf/[^:]+:$path(:|\$)" <<<"$(sub_block "$blk" volumes)" | head -n1 | sed -E 's#^\./##; s#:.*##' || true)
    [ -z "$conf" ] && conf=$(grep -E "^COPY +conf/[^ ]+ +$path *\$" Dockerfile | awk '{print $2}' | head -n1)
    grace=$(sed -nE 's/^    stop_grace_period: *([^ #]+).*/\1/p' <<<"$blk")
    if [ -z "$conf" ] || [ ! -f "$conf" ]; then
      fail "compose.yaml: $label runs ${path:-no config}, which is neither mounted from nor copied from conf/"
    else
      check_drain "$conf" "${grace:-$default_stop}" "compose.yaml service $svc, $([ -n "$grace" ] && echo "its stop_grace_period" || echo "the default stop timeout")"
    fi
  done
  # Healthchecks others wait on: a service_healthy condition on a service without one in
  # compose.yaml fails as soon as its image lacks a HEALTHCHECK.
  for dep in $(awk '
      /^  [A-Za-z0-9._-]+:/ { indep = 0 }
      /^    depends_on:/ { indep = 1; next }
      /^    [^ ]/ { indep = 0 }
      indep && /^      [A-Za-z0-9._-]+:/ { d = $1; sub(/:.*/, "", d) }
      indep && /condition: *service_healthy/ { print d }' compose.yaml | sort -u); do
    if [ -n "$(sub_block "$(service_block "$dep")" healthcheck)" ]; then ok "compose.yaml: $dep, waited on as service_healthy, has a healthcheck: of its own"
    else fail "compose.yaml: services wait for $dep to be service_healthy, but it has no healthcheck: in compose.yaml"; fi
  done

  # Every config copied into the image may be run by `docker run`: the default stop timeout.
  while read -r src dst; do
    check_drain "$src" "$default_stop" "in the image as $dst, under docker's and podman's default stop timeout"
  done < <(printf '%s\n' "${ins[@]}" | awk -F'\t' '$2 == "COPY" && $3 !~ /--from=/ { n = split($3, f, " "); if (f[1] ~ /^conf\/.*\.ya?ml$/) print f[1], f[n] }')

  # The shipped stages that install packages drop apt's lists and caches in the same RUN.
  mapfile -t shipped < <(printf '%s\n' "${shipped[@]}" | sort -un)
  for s in "${shipped[@]}"; do
    while IFS=$'\t' read -r lineno _ args; do
      miss=()
      grep -qE 'rm +-[a-zA-Z]*r[a-zA-Z]* +([^&;|]* )?/var/lib/apt/lists(/\*)?([ ;&|]|$)' <<<"$args" || miss+=("rm -rf /var/lib/apt/lists/*")
      grep -qE 'apt-get +(-[^ ]+ +)*clean([ ;&|]|$)' <<<"$args" || miss+=("apt-get clean")
      if ((${#miss[@]})); then fail "Dockerfile:$lineno: stage ${stages[s]:-#$s} installs packages and keeps apt's files (add to that RUN: $(printf '%s && ' "${miss[@]}" | sed 's/ && $//')); the image's size would depend on the base image's apt configuration"
      else ok "Dockerfile:$lineno: stage ${stages[s]:-#$s} drops apt's lists and caches in the RUN that installs"; fi
    done < <(printf '%s\n' "${ins[@]}" | awk -F'\t' -v want="$s" '$2 == "FROM" { n++ } n - 1 == want && $2 == "RUN" && $3 ~ /install-deps\.sh/')
  done
fi

# Validation by the Compose tools themselves, when present: Debian 12's docker-compose
# (1.29, python) and the Compose v2 plugin (`docker compose`). Neither needs an engine.
profiles=$(grep -oE '^    profiles: *\[[^]]*\]' compose.yaml 2>/dev/null | grep -oE '[A-Za-z0-9_.-]+' | grep -v '^profiles$' | sort -u || true)
compose_validate() {  # compose_validate NAME COMMAND...
  local name=$1 out p; shift
  if out=$(SLUICE_HASH_SECRET= timeout 120 "$@" -f compose.yaml config -q 2>&1); then ok "$name accepts compose.yaml (config -q)"
  else fail "$name refuses compose.yaml: $out"; fi
  for p in $profiles; do
    if out=$(SLUICE_HASH_SECRET= timeout 120 "$@" -f compose.yaml --profile "$p" config -q 2>&1); then ok "$name accepts compose.yaml with profile $p"
    else fail "$name refuses compose.yaml with profile $p: $out"; fi
  done
}
if [ -f compose.yaml ]; then
  if command -v docker-compose >/dev/null; then
    compose_validate "docker-compose $(docker-compose version --short 2>/dev/null)" docker-compose
  else
    note "docker-compose not installed (Debian: apt-get install --no-install-recommends docker-compose): compose.yaml not validated by Compose 1.29"
  fi
  if command -v docker >/dev/null && v2=$(timeout 20 docker compose version --short 2>/dev/null); then
    compose_validate "docker compose $v2" docker compose
  else
    note "no Compose v2 plugin (docker compose): compose.yaml not validated by Compose v2"
  fi
fi

# --- conf/*.yaml -----------------------------------------------------------------------
if [ ! -x "$sluice" ]; then
  fail "gateway binary $sluice missing or not executable"
else
  shopt -s nullglob
  confs=(conf/*.yaml conf/*.yml)
  ((${#confs[@]})) || fail "no conf/*.yaml files"
  # The container samples read the admin token from a secret mounted at run time: checked
  # with a stand-in token file there.
  stand_in=$(mktemp -d)
  openssl rand -hex 32 >"$stand_in/sluice_admin_token" 2>/dev/null || echo 0123456789abcdef0123456789abcdef >"$stand_in/sluice_admin_token"
  for f in "${confs[@]}"; do
    checked=$f note=""
    if grep -q '/run/secrets/sluice_admin_token' "$f"; then
      checked="$stand_in/$(basename "$f")" note=" (with a stand-in for its admin token secret)"
      sed "s|/run/secrets/sluice_admin_token|$stand_in/sluice_admin_token|" "$f" >"$checked"
    fi
    if out=$("$sluice" --config "$checked" --check 2>&1); then ok "$f: --check passes$note"
    else fail "sluice --config $f --check$note: $out"; fi
  done
  rm -rf "$stand_in"
fi

# The sample configs share their clients, response, policies and routes: the lines from
# `clients:` to the end of the file are the same in each, conf/sluice.yaml's being the model.
shared_from_clients() { sed -n '/^clients:/,$p' "$1"; }
base=conf/sluice.yaml
if [ ! -f "$base" ]; then
  fail "$base missing"
else
  base_block=$(shared_from_clients "$base")
  n=$(wc -l <<<"$base_block")
  if [ -z "$base_block" ]; then fail "$base has no clients: section"; fi
  for f in conf/docker.yaml conf/docker-cluster.yaml conf/container.yaml; do
    if [ ! -f "$f" ]; then fail "$f missing"; continue; fi
    if d=$(diff <(echo "$base_block") <(shared_from_clients "$f")); then
      ok "$f: from clients: to the end ($n lines) as in $base"
    else
      fail "$f: from clients: to the end differs from $base (copy that block over): $(head -n 6 <<<"$d" | tr '\n' ' ')"
    fi
  done
fi

# --- metric families: code -> dashboard and docs ---------------------------------------
mapfile -t families < <(grep -rhoE '"sluice_[a-z0-9_]+"' src --include='*.cpp' --include='*.hpp' | tr -d '"' | sort -u)
if ((${#families[@]} < 10)); then
  fail "found only ${#families[@]} metric family names in src/ (${families[*]}); expected every family"
else
  ok "${#families[@]} metric families defined in src/: ${families[*]}"
fi
mapfile -t expected < <(printf '%s\n' "${families[@]}" "${announced_redis[@]}" | sort -u)

dash=conf/grafana-dashboard.json
if [ ! -f "$dash" ]; then
  fail "$dash missing"
else
  if command -v python3 >/dev/null; then
    if err=$(python3 -m json.tool "$dash" 2>&1 >/dev/null); then ok "$dash is valid JSON (python3 -m json.tool)"
    else fail "$dash is not valid JSON: $err"; fi
  else
    tmp=$(mktemp); printf 'file(READ "%s" j)\nstring(JSON t ERROR_VARIABLE e TYPE "${j}")\nif(e)\n  message(FATAL_ERROR "${e}")\nendif()\n' "$PWD/$dash" >"$tmp"
    if err=$(cmake -P "$tmp" 2>&1); then ok "$dash is valid JSON (cmake string(JSON))"
    else fail "$dash is not valid JSON: $err"; fi
    rm -f "$tmp"
  fi
  grep -q '"schemaVersion": *3[0-9]' "$dash" && ok "$dash schemaVersion: $(grep -oE '"schemaVersion": *[0-9]+' "$dash" | grep -oE '[0-9]+$')" \
    || fail "$dash: schemaVersion is not 3x"
  grep -q '"${DS_PROMETHEUS}"' "$dash" && grep -q '"name": *"DS_PROMETHEUS"' "$dash" \
    && ok "$dash uses the \${DS_PROMETHEUS} datasource input" || fail "$dash: no \${DS_PROMETHEUS} datasource input"
  # Only the queries count: a name in a title or description is not a panel over it.
  exprs=$(grep -oE '"expr": *"([^"\\]|\\.)*"' "$dash")
  missing=()
  for m in "${expected[@]}"; do
    grep -qE "(^|[^a-z0-9_])${m}(_bucket|_sum|_count)?([^a-z0-9_]|$)" <<<"$exprs" || missing+=("$m")
  done
  if ((${#missing[@]})); then fail "$dash has no query over: ${missing[*]}"
  else ok "$dash queries every family (${#expected[@]}, the announced Redis ones included)"; fi
  unknown=()
  for n in $(grep -oE 'sluice_[a-z0-9_]+' <<<"$exprs" | sort -u); do
    base=$n
    # grep -x >/dev/null, not -q: -q stops reading at the first match, and under pipefail
    # printf's SIGPIPE would then fail the pipeline now and then.
    for suf in _bucket _sum _count; do [[ $n == *$suf ]] && printf '%s\n' "${expected[@]}" | grep -x "${n%"$suf"}" >/dev/null && base=${n%"$suf"}; done
    printf '%s\n' "${expected[@]}" | grep -x "$base" >/dev/null || unknown+=("$n")
  done
  if ((${#unknown[@]})); then fail "$dash queries names no code defines (typo?): ${unknown[*]}"
  else ok "$dash queries no unknown metric names"; fi
  bad_hq=$(grep -oE 'histogram_quantile\(([^"\\]|\\.)*' <<<"$exprs" | grep -v 'by (le)' || true)
  [ -z "$bad_hq" ] && ok "$dash: every histogram_quantile aggregates by (le)" || fail "$dash: histogram_quantile without by (le): $bad_hq"
fi

doc=docs/operations.md
if [ ! -f "$doc" ]; then
  fail "$doc missing"
else
  missing=()
  for m in "${expected[@]}"; do grep -qE "^\| \`$m\` \|" "$doc" || missing+=("$m"); done
  if ((${#missing[@]})); then fail "$doc has no table row for: ${missing[*]}"
  else ok "$doc has a row for every family (${#expected[@]})"; fi
fi

if ((failures)); then
  echo "packaging: $failures check(s) failed"
  exit 1
fi
echo "packaging: all checks passed"
