#!/usr/bin/env bash
# Installs everything Sluice needs to build, test and run on Debian 12, as root.
# Used alike by the README, .ci/run and the Dockerfile. Idempotent, non-interactive.
#   install-deps.sh           build + test dependencies
#   install-deps.sh --runtime only the shared libraries the binary links against
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [ "${1:-}" = "--runtime" ]; then
  pkgs=(ca-certificates curl libboost-program-options1.81.0 libhiredis0.14 libyaml-cpp0.7
        libprometheus-cpp-core1.0 libssl3 libjwt0 libspdlog1.10 libfmt9
        libgrpc++1.51 libgrpc29 libprotobuf32)
else
  pkgs=(build-essential cmake pkg-config git ca-certificates
        libboost1.81-all-dev libhiredis-dev libyaml-cpp-dev prometheus-cpp-dev libssl-dev
        libjwt-dev doctest-dev libspdlog-dev libfmt-dev redis-server
        libgrpc++-dev protobuf-compiler-grpc   # Envoy's rate-limit service (proto/, src/service)
        clang libclang-rt-14-dev clang-format clang-tidy
        slowhttptest
        haproxy           # in front of the gateway in the PROXY protocol tests (tests/e2e)
        nginx             # the HTTPS upstream in the https upstream tests (tests/e2e)
        testssl.sh        # scans the TLS listener (tests/tls/testssl.sh)
        docker-compose)   # 1.29, python: the packaging test validates compose.yaml with it
                          # (no engine: docker.io is only recommended)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The structured-field check (tests/sf) reads Sluice's fields with an npm parser: Node.js
# (the machine's, else Debian's) and the one locked package.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" != "--runtime" ] && [ -f "$root/tests/sf/package-lock.json" ]; then
  if ! command -v npm >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  [ -d "$root/tests/sf/node_modules/structured-headers" ] ||
    npm ci --prefix "$root/tests/sf" --no-audit --no-fund --loglevel=error >/dev/null
fi
