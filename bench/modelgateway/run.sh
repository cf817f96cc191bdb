#!/usr/bin/env bash
# Model gateway load bench (issue 3): gateway overhead against a local
# OpenAI-compatible mock upstream with a fixed 20 ms latency, at 500, 1000
# and 2000 requests per second, unary and streaming (time to first chunk),
# with the gateway's peak RSS; and the same chat request through the REST
# gateway's OpenAI-compatible API in front of it (issue 17). Part of
# `make bench`, not `make test`.
# Usage: bench/modelgateway/run.sh [-duration 10s] [-rates 500,1000,2000]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/loadbench" ./services/modelgateway/cmd/loadbench
go build -o "$dir/gateway" ./gateway
"$dir/loadbench" -http-gateway "$dir/gateway" "$@"
