#!/usr/bin/env bash
# One command: install dependencies, build (Release), start the demo upstream on
# 127.0.0.1:3000 and run the gateway on conf/sluice.yaml in front of it. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release --target sluice sluice_test_upstream

build/tests/sluice_test_upstream --listen 127.0.0.1:3000 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null || true' EXIT
cat <<TXT

  Demo upstream: http://127.0.0.1:3000 (echoes each request as JSON)
  Send requests to:  curl -i http://127.0.0.1:8080/hello
  Metrics:           curl http://127.0.0.1:9090/metrics
  Stop:              Ctrl-C

TXT
build/sluice --config conf/sluice.yaml
