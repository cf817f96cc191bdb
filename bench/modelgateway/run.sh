#!/usr/bin/env bash
# Model gateway load bench (issue 3): gateway overhead against a local
# OpenAI-compatible mock upstream with a fixed 20 ms latency, at 500, 1000
# and 2000 requests per second, unary and streaming (time to first chunk),
# with the gateway's peak RSS. Part of `make bench`, not `make test`.
# Usage: bench/modelgateway/run.sh [-duration 10s] [-rates 500,1000,2000]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$(mktemp -d)/loadbench"
go build -o "$bin" ./services/modelgateway/cmd/loadbench
exec "$bin" "$@"
